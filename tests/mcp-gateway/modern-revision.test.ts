/**
 * MCP revision 2026-07-28 through the gateway, with the v2 SDK's own client
 * (`@modelcontextprotocol/client`, `versionNegotiation: auto`: it probes `server/discover` and
 * never sends `initialize`) in front of a legacy upstream (the v1 SDK test server): the same
 * decisions and audit as the stateful revisions, the revision's own wire (discover, resultType,
 * cache hints, UnsupportedProtocolVersion, removed methods), and legacy clients unchanged.
 */
import { readFileSync } from 'node:fs';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestMcpServer, type TestMcpServer } from '../support/mcp-server.ts';
import { keyFor, useTestServer } from '../support/server.ts';
import { connectClient, postMcp } from './support.ts';

const spec = JSON.parse(readFileSync(new URL('../../spec/dist/openapi.json', import.meta.url), 'utf8'));
const ALL: string = spec.components.schemas.Permission.enum.join(',');
const MODERN = '2026-07-28';
const server = useTestServer({ egressAllowlist: ['127.0.0.1/32'] });
let upstream: TestMcpServer;
let key: string;
let agentKey: string;
const clients: Client[] = [];

beforeAll(async () => {
  upstream = await startTestMcpServer();
  key = await keyFor(server, ALL, 'modern-revision');
  agentKey = `ak_modern_${Date.now().toString(36)}`;
  const api = (path: string, body: unknown) => server.api('POST', path as '/agents', { key, body, unchecked: true });
  expect((await api('/mcp-servers', { name: 'Up', slug: 'up', transport_url: upstream.url })).status).toBe(201);
  expect((await api('/agents', { name: 'Bot', slug: 'bot', provider: 'local', api_key: agentKey })).status).toBe(201);
  const block = { name: 'No deleting', rules: [{ match: { action: ['mcp.call'], tool: ['delete_everything'] }, effect: 'block' }] };
  expect((await api('/policies', block)).status).toBe(201);
  const ask = { name: 'Ask before failing', rules: [{ match: { action: ['mcp.call'], tool: ['fail'] }, effect: 'require_approval' }] };
  expect((await api('/policies', ask)).status).toBe(201);
});
afterAll(async () => {
  for (const client of clients) await client.close().catch(() => undefined);
  await upstream?.close();
});

async function modernClient(path = '/up', capabilities: ConstructorParameters<typeof Client>[1] = {}): Promise<Client> {
  const client = new Client({ name: 'modern-test', version: '1.0.0' }, { ...capabilities, versionNegotiation: { mode: 'auto' } });
  clients.push(client);
  await client.connect(
    new StreamableHTTPClientTransport(new URL(`${server.url}/mcp${path}`), {
      requestInit: { headers: { authorization: `Bearer ${agentKey}` } },
    }),
  );
  return client;
}

const audited = async (action: string) =>
  (await server.api('GET', '/audit-logs', { key, query: { action, limit: 50 }, unchecked: true })).body.data as {
    result: string;
    tool?: string;
    agent: string;
  }[];

const post = (body: unknown, headers: Record<string, string>) => postMcp(`${server.url}/mcp/up`, agentKey, body, headers);
const envelope = { 'io.modelcontextprotocol/protocolVersion': MODERN, 'io.modelcontextprotocol/clientCapabilities': {} };

describe('a 2026-07-28 client (the v2 SDK)', () => {
  it('negotiates 2026-07-28 through server/discover, lists the tools policy lets it call, and calls one', async () => {
    const client = await modernClient();
    expect(client.getNegotiatedProtocolVersion()).toBe(MODERN);
    const { tools } = await client.listTools();
    expect(tools.map((tool) => tool.name).sort()).toEqual(['add', 'echo', 'fail']);
    const result = await client.callTool({ name: 'echo', arguments: { text: 'from 2026' } });
    expect(result.content).toEqual([{ type: 'text', text: 'from 2026' }]);
    expect(upstream.calls()).toContain('echo');
    const calls = await audited('mcp.call');
    expect(calls.some((e) => e.result === 'allowed' && e.tool === 'echo' && e.agent === 'bot')).toBe(true);
  });

  it('is refused a blocked tool as a tool error, audited blocked, and the upstream never runs it', async () => {
    const client = await modernClient();
    const before = upstream.calls().filter((c) => c === 'delete_everything').length;
    const result = await client.callTool({ name: 'delete_everything', arguments: {} });
    expect(result.isError).toBe(true);
    expect(JSON.stringify(result.content)).toMatch(/No deleting/);
    expect(upstream.calls().filter((c) => c === 'delete_everything').length).toBe(before);
    expect((await audited('mcp.call')).some((e) => e.result === 'blocked' && e.tool === 'delete_everything')).toBe(true);
  });

  it('works on the aggregate endpoint with namespaced names', async () => {
    const client = await modernClient('');
    const { tools } = await client.listTools();
    expect(tools.map((tool) => tool.name)).toContain('up__echo');
    const result = await client.callTool({ name: 'up__add', arguments: { a: 2, b: 3 } });
    expect(result.content).toEqual([{ type: 'text', text: '5' }]);
  });
});

describe("an approval, in the revision's own terms", () => {
  it('sends a client that elicits URLs to the approval page (input_required), and its retry runs the approved act once', async () => {
    const client = await modernClient('/up', { capabilities: { elicitation: { url: {} } } });
    const asked: { mode?: string; url?: string }[] = [];
    client.setRequestHandler('elicitation/create', async (request) => {
      const params = request.params as { mode?: string; url?: string; message: string };
      asked.push(params);
      // the person opens the page and approves; then the client says it is done
      const id = /Approval ([0-9a-f-]{36}) is pending/.exec(params.message)?.[1] as string;
      const decided = await server.api('PATCH', `/approvals/${id}` as '/approvals/{id}', {
        key,
        body: { status: 'approved' },
        unchecked: true,
      });
      expect(decided.status).toBe(200);
      return { action: 'accept' };
    });
    const before = upstream.calls().filter((c) => c === 'fail').length;
    const result = await client.callTool({ name: 'fail', arguments: {} });
    expect(result.content).toEqual([{ type: 'text', text: 'it broke' }]); // the tool's own answer: it ran
    expect(asked).toHaveLength(1);
    expect(asked[0]).toMatchObject({ mode: 'url', url: expect.stringMatching(/\/dashboard\/#\/approvals$/) });
    expect(upstream.calls().filter((c) => c === 'fail').length).toBe(before + 1);
    const approvals = (await server.api('GET', '/approvals', { key, query: { status: 'approved' }, unchecked: true })).body.data;
    expect(approvals.filter((a: { tool: string }) => a.tool === 'fail')).toHaveLength(1);
  });
});

describe('the 2026-07-28 wire, raw', () => {
  it('answers server/discover with the revision, capabilities, identity in _meta, resultType and cache hints', async () => {
    const res = await post(
      { jsonrpc: '2.0', id: 'd', method: 'server/discover', params: { _meta: envelope } },
      {
        'mcp-protocol-version': MODERN,
        'mcp-method': 'server/discover',
      },
    );
    expect(res.status).toBe(200);
    const text = await res.text();
    const answer = JSON.parse(text.startsWith('{') ? text : (text.split('\n').find((l) => l.startsWith('data:')) as string).slice(5));
    expect(answer.result).toMatchObject({
      supportedVersions: [MODERN],
      resultType: 'complete',
      ttlMs: expect.any(Number),
      cacheScope: expect.stringMatching(/^(private|public)$/),
      capabilities: { tools: {} },
      _meta: { 'io.modelcontextprotocol/serverInfo': { name: 'warden:up' } },
    });
  });

  it('answers a plain tools/call on its fast path exactly as the v2 SDK answers it', async () => {
    const headers = { 'mcp-protocol-version': MODERN, 'mcp-method': 'tools/call', 'mcp-name': 'echo' };
    const call = (meta: Record<string, unknown>) =>
      post({ jsonrpc: '2.0', id: 5, method: 'tools/call', params: { name: 'echo', arguments: { text: 'same' }, _meta: meta } }, headers);
    const body = async (res: Response) => {
      const text = await res.text();
      return JSON.parse(text.startsWith('{') ? text : (text.split('\n').find((l) => l.startsWith('data:')) as string).slice(5));
    };
    const fast = await body(await call(envelope));
    // a trace context in _meta is one thing the fast path leaves to the SDK
    const viaSdk = await body(await call({ ...envelope, traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' }));
    expect(fast).toEqual(viaSdk);
    expect(fast.result).toMatchObject({ resultType: 'complete', content: [{ type: 'text', text: 'same' }] });
  });

  it('answers an unsupported revision -32022 naming the supported one', async () => {
    const res = await post(
      {
        jsonrpc: '2.0',
        id: 1,
        method: 'tools/list',
        params: { _meta: { ...envelope, 'io.modelcontextprotocol/protocolVersion': '2099-01-01' } },
      },
      {
        'mcp-protocol-version': '2099-01-01',
        'mcp-method': 'tools/list',
      },
    );
    expect(res.status).toBe(400);
    expect((await res.json()).error).toMatchObject({ code: -32022, data: { supported: expect.arrayContaining([MODERN]) } });
  });

  it('answers a method the revision removed (ping) as not found, without deciding anything', async () => {
    const res = await post(
      { jsonrpc: '2.0', id: 1, method: 'ping', params: { _meta: envelope } },
      { 'mcp-protocol-version': MODERN, 'mcp-method': 'ping' },
    );
    expect(res.status).toBe(404);
    expect((await res.json()).error.code).toBe(-32601);
  });
});

describe('legacy clients beside it', () => {
  it('the v1 SDK client still initializes a session and calls, on the same endpoint', async () => {
    const client = await connectClient(`${server.url}/mcp/up`, { authorization: `Bearer ${agentKey}` });
    const result = await client.callTool({ name: 'echo', arguments: { text: 'from 2025' } });
    expect(result.content).toEqual([{ type: 'text', text: 'from 2025' }]);
    await client.close();
  });
});
