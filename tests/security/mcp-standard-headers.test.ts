/**
 * MCP's standard headers (revision 2026-07-28, SEP-2243) are part of the act: a request whose
 * `Mcp-Method`, `Mcp-Name` or `MCP-Protocol-Version` says another act than its body is refused
 * with HTTP 400 and JSON-RPC -32020 (HeaderMismatch) before anything is decided, recorded or
 * sent upstream, whichever revision the client speaks. Sent raw, as a proxy in front of Warden
 * would route them: the header names a harmless tool, the body a dangerous one.
 */
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { postMcp } from '../mcp-gateway/support.ts';
import { startTestMcpServer, type TestMcpServer } from '../support/mcp-server.ts';
import { keyFor, useTestServer } from '../support/server.ts';

const spec = JSON.parse(readFileSync(new URL('../../spec/dist/openapi.json', import.meta.url), 'utf8'));
const ALL: string = spec.components.schemas.Permission.enum.join(',');
const server = useTestServer({ egressAllowlist: ['127.0.0.1/32'] });
let upstream: TestMcpServer;
let agentKey: string;
let key: string;

beforeAll(async () => {
  upstream = await startTestMcpServer();
  key = await keyFor(server, ALL, 'standard-headers');
  agentKey = `ak_headers_${Date.now().toString(36)}`;
  const api = (path: string, body: unknown) => server.api('POST', path as '/agents', { key, body, unchecked: true });
  expect((await api('/mcp-servers', { name: 'Up', slug: 'up', transport_url: upstream.url })).status).toBe(201);
  expect((await api('/agents', { name: 'Bot', slug: 'bot', provider: 'local', api_key: agentKey })).status).toBe(201);
});
afterAll(async () => {
  await upstream?.close();
});

const post = (body: unknown, headers: Record<string, string> = {}) => postMcp(`${server.url}/mcp/up`, agentKey, body, headers);

const call = (name: string, id: number | string = 1) => ({
  jsonrpc: '2.0',
  id,
  method: 'tools/call',
  params: { name, arguments: {} },
});

const callsAudited = async () =>
  (await server.api('GET', '/audit-logs', { key, query: { action: 'mcp.call', limit: 100 }, unchecked: true })).body.data.length;

describe('headers that disagree with the body', () => {
  it.each([
    ['Mcp-Name names another tool', call('delete_everything'), { 'mcp-method': 'tools/call', 'mcp-name': 'echo' }],
    ['Mcp-Method names another method', call('delete_everything'), { 'mcp-method': 'tools/list' }],
    [
      'Mcp-Name in a base64 sentinel names another tool',
      call('delete_everything'),
      { 'mcp-method': 'tools/call', 'mcp-name': `=?base64?${Buffer.from('echo').toString('base64')}?=` },
    ],
    ['Mcp-Name differs only in case', call('delete_everything'), { 'mcp-method': 'tools/call', 'mcp-name': 'DELETE_EVERYTHING' }],
    [
      'Mcp-Name carries a malformed sentinel',
      call('delete_everything'),
      { 'mcp-method': 'tools/call', 'mcp-name': '=?base64?ZGVsZXRlX2V2ZXJ5dGhpbmc?=' },
    ],
    ['a modern request leaves Mcp-Method out', call('delete_everything'), { 'mcp-protocol-version': '2026-07-28' }],
    [
      'a modern tools/call leaves Mcp-Name out',
      call('delete_everything'),
      { 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/call' },
    ],
    [
      'MCP-Protocol-Version differs from the _meta claim',
      {
        ...call('echo'),
        params: { name: 'echo', arguments: { text: 'x' }, _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28' } },
      },
      { 'mcp-protocol-version': '2025-11-25', 'mcp-method': 'tools/call', 'mcp-name': 'echo' },
    ],
    [
      'Mcp-Name on a method that names nothing',
      { jsonrpc: '2.0', id: 1, method: 'tools/list', params: {} },
      { 'mcp-method': 'tools/list', 'mcp-name': 'echo' },
    ],
  ])('%s: 400, -32020, the request id echoed, nothing decided or sent', async (_what, body, headers) => {
    const before = { audited: await callsAudited(), upstream: upstream.requests(), calls: upstream.calls().length };
    const res = await post(body, headers);
    expect(res.status).toBe(400);
    const answer = await res.json();
    expect(answer).toMatchObject({ jsonrpc: '2.0', id: 1, error: { code: -32020, data: { mismatch: expect.any(Object) } } });
    expect(answer.error.message).toMatch(/headers and body disagree/);
    expect(upstream.calls().length).toBe(before.calls);
    expect(upstream.requests()).toBe(before.upstream);
    expect(await callsAudited()).toBe(before.audited);
  });

  it('a header sent on two lines is refused, even when the body names both joined', async () => {
    const { request } = await import('node:http');
    const url = new URL(`${server.url}/mcp/up`);
    const body = JSON.stringify(call('echo, delete_everything'));
    const answer = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = request(
        {
          host: url.hostname,
          port: url.port,
          path: url.pathname,
          method: 'POST',
          headers: {
            authorization: `Bearer ${agentKey}`,
            'content-type': 'application/json',
            accept: 'application/json, text/event-stream',
            'mcp-method': 'tools/call',
            'mcp-name': ['echo', 'delete_everything'],
          },
        },
        (res) => {
          let text = '';
          res.on('data', (chunk) => (text += chunk));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
        },
      );
      req.on('error', reject);
      req.end(body);
    });
    expect(answer.status).toBe(400);
    expect(JSON.parse(answer.body).error.code).toBe(-32020);
  });

  it('a batch carrying Mcp-Name is refused: one header cannot name several acts', async () => {
    const res = await post([call('echo', 1), call('delete_everything', 2)], { 'mcp-name': 'echo' });
    expect(res.status).toBe(400);
    expect((await res.json()).error.code).toBe(-32020);
  });

  it('a header sent twice is refused', async () => {
    const headers = new Headers({
      authorization: `Bearer ${agentKey}`,
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
    });
    headers.append('mcp-name', 'echo');
    headers.append('mcp-name', 'delete_everything');
    headers.set('mcp-method', 'tools/call');
    const res = await fetch(`${server.url}/mcp/up`, { method: 'POST', headers, body: JSON.stringify(call('delete_everything')) });
    // fetch folds a repeated header into one comma-joined value: that names no tool of the body either
    expect(res.status).toBe(400);
    expect((await res.json()).error.code).toBe(-32020);
  });
});

describe('headers that agree with the body, or none', () => {
  it('serves a call whose Mcp-Method and Mcp-Name match the body (plain and in a sentinel)', async () => {
    for (const name of ['echo', `=?base64?${Buffer.from('echo').toString('base64')}?=`]) {
      const res = await post(
        { ...call('echo'), params: { name: 'echo', arguments: { text: 'hi' } } },
        { 'mcp-method': 'tools/call', 'mcp-name': name },
      );
      expect(res.status).toBe(200);
      expect(JSON.stringify(await res.json())).toContain('hi');
    }
  });

  it('serves a legacy client that sends no standard header, and one that sends only MCP-Protocol-Version', async () => {
    for (const headers of [{}, { 'mcp-protocol-version': '2025-11-25' }] as Record<string, string>[]) {
      const res = await post({ ...call('echo'), params: { name: 'echo', arguments: { text: 'legacy' } } }, headers);
      expect(res.status).toBe(200);
      expect(JSON.stringify(await res.json())).toContain('legacy');
    }
  });
});
