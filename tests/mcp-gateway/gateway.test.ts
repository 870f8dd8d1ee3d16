/**
 * The MCP gateway (/api/v1/mcp/{server}) driven as an unmodified client drives it: the official
 * SDK Client over Streamable HTTP, against an SDK-built upstream. Listing is filtered, calls
 * are decided on the real tool and arguments, refusals are tool results with isError, and
 * fields pass through as the upstream sent them.
 */
import { readFileSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { keyFor, useTestServer } from '../support/server.ts';
import { type CountingUpstream, connectClient, startCountingUpstream } from './support.ts';

const spec = JSON.parse(readFileSync(new URL('../../spec/dist/openapi.json', import.meta.url), 'utf8'));
const ALL: string = spec.components.schemas.Permission.enum.join(',');
const server = useTestServer({ egressAllowlist: ['127.0.0.1/32'] });
let upstream: CountingUpstream;
let workspaces = 0;
const clients: Client[] = [];

beforeAll(async () => {
  upstream = await startCountingUpstream();
});
afterAll(async () => {
  for (const client of clients) await client.close().catch(() => undefined);
  await upstream?.close();
});

interface Workspace {
  key: string;
  agentKey: string;
  /** An SDK client on /mcp/tools acting for the agent (agent key as the bearer). */
  client: () => Promise<Client>;
}

/** A workspace of its own: the upstream registered as `tools`, agent `bot` with a key, these policies. */
async function workspace(policies: unknown[] = [], agent: Record<string, unknown> = {}): Promise<Workspace> {
  const key = await keyFor(server, ALL, `gw-${++workspaces}`);
  const agentKey = `ak_gateway_${workspaces}_${Math.random().toString(36).slice(2)}`;
  const api = (method: string, path: string, body: unknown) =>
    server.api(method as 'POST', path as '/agents', { key, body, unchecked: true });
  expect((await api('POST', '/mcp-servers', { name: 'tools', slug: 'tools', transport_url: upstream.url })).status).toBe(201);
  expect((await api('POST', '/agents', { name: 'Bot', slug: 'bot', provider: 'local', api_key: agentKey, ...agent })).status).toBe(201);
  for (const policy of policies) expect((await api('POST', '/policies', policy)).status).toBe(201);
  return {
    key,
    agentKey,
    client: async () => {
      const client = await connectClient(`${server.url}/mcp/tools`, { authorization: `Bearer ${agentKey}` });
      clients.push(client);
      return client;
    },
  };
}

const names = (tools: { name: string }[]) => tools.map((t) => t.name).sort();

describe('tools/list on /mcp/{server}', () => {
  it('lists the upstream tools with every field as the upstream sent it', async () => {
    const client = await (await workspace()).client();
    const { tools } = await client.listTools();
    expect(names(tools)).toEqual(['add', 'countdown', 'delete_everything', 'echo', 'report', 'slow_report', 'wait']);
    const echo = tools.find((t) => t.name === 'echo');
    expect(echo).toMatchObject({
      title: 'Echo',
      description: 'Echoes its text',
      annotations: { readOnlyHint: true, openWorldHint: false },
      _meta: { 'example.dev/origin': 'test' },
      inputSchema: { type: 'object', properties: { text: { type: 'string' } } },
    });
    expect(tools.find((t) => t.name === 'add')?.outputSchema).toMatchObject({ type: 'object', properties: { sum: { type: 'number' } } });
  });

  it("leaves out tools outside the agent's allowed_tools and tools a policy blocks", async () => {
    const ws = await workspace([{ name: 'No wipe', rules: [{ match: { tool: ['delete_everything'] }, effect: 'block' }] }], {
      allowed_tools: ['echo', 'add', 'delete_everything'],
    });
    const { tools } = await (await ws.client()).listTools();
    expect(names(tools)).toEqual(['add', 'echo']);
  });

  it('lists nothing when discovery is blocked, and records the decision', async () => {
    const ws = await workspace([{ name: 'No discovery', rules: [{ match: { action: ['mcp.discover'] }, effect: 'block' }] }]);
    const { tools } = await (await ws.client()).listTools();
    expect(tools).toEqual([]);
    const audit = await server.api('GET', '/audit-logs', { key: ws.key, query: { action: 'mcp.discover', limit: 10 }, unchecked: true });
    expect(audit.body.data.some((e: { result: string; agent: string }) => e.result === 'blocked' && e.agent === 'bot')).toBe(true);
  });
});

describe('tools/call on /mcp/{server}', () => {
  it('forwards an allowed call and answers the upstream result unchanged (structuredContent included)', async () => {
    const client = await (await workspace()).client();
    const result = await client.callTool({ name: 'add', arguments: { a: 2, b: 3 } });
    expect(result.isError).toBeFalsy();
    expect(result.content).toEqual([{ type: 'text', text: '5' }]);
    expect(result.structuredContent).toEqual({ sum: 5 });
    expect(upstream.calls()).toContain('add:{"a":2,"b":3}');
  });

  it('answers a blocked call with isError and the policy message, and never forwards it', async () => {
    const ws = await workspace([
      { name: 'No wipe', rules: [{ match: { tool: ['delete_everything'] }, effect: 'block', message: 'Wiping is not allowed' }] },
    ]);
    const before = upstream.calls().filter((c) => c.startsWith('delete_everything')).length;
    const result = await (await ws.client()).callTool({ name: 'delete_everything', arguments: {} });
    expect(result.isError).toBe(true);
    expect(result.content).toEqual([{ type: 'text', text: expect.stringContaining('Wiping is not allowed') }]);
    expect((result.content as { text: string }[])[0]?.text).toContain("'No wipe'");
    expect(upstream.calls().filter((c) => c.startsWith('delete_everything')).length).toBe(before);
  });

  it('decides on the arguments (CEL sees execution.arguments)', async () => {
    const ws = await workspace([
      {
        name: 'No shouting',
        rules: [{ match: { tool: ['echo'] }, condition: 'execution.arguments.text == "STOP"', effect: 'block', message: 'No shouting' }],
      },
    ]);
    const client = await ws.client();
    expect((await client.callTool({ name: 'echo', arguments: { text: 'hi' } })).isError).toBeFalsy();
    const refused = await client.callTool({ name: 'echo', arguments: { text: 'STOP' } });
    expect(refused.isError).toBe(true);
    expect(upstream.calls()).not.toContain('echo:{"text":"STOP"}');
  });

  it('answers a plain call exactly as the SDK server answers it (the same request through the SDK, by its content type)', async () => {
    const ws = await workspace([{ name: 'No wipe', rules: [{ match: { tool: ['delete_everything'] }, effect: 'block', message: 'No' }] }]);
    // 'application/json' alone is answered by the gateway's plain path; with a charset, by the SDK's server
    const post = async (contentType: string, id: string | number, name: string, args?: unknown) => {
      const response = await fetch(`${server.url}/mcp/tools`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${ws.agentKey}`,
          'content-type': contentType,
          accept: 'application/json, text/event-stream',
          'mcp-protocol-version': '2025-06-18',
        },
        body: JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call', params: { name, ...(args ? { arguments: args } : {}) } }),
      });
      return { status: response.status, type: response.headers.get('content-type'), body: await response.json() };
    };
    for (const [id, name, args] of [
      [1, 'add', { a: 2, b: 3 }],
      ['call-2', 'delete_everything', undefined],
      [3, 'no_such_tool', {}],
      [4, 'add', { a: 'two' }],
      // not a tools/call the SDK would run (a name that is not a string): the SDK's server answers both
      [5, 42 as unknown as string, {}],
    ] as const) {
      const plain = await post('application/json', id, name, args);
      const viaSdk = await post('application/json; charset=utf-8', id, name, args);
      expect(plain).toEqual(viaSdk);
      expect(plain).toMatchObject({ status: 200, type: 'application/json', body: { jsonrpc: '2.0', id } });
    }
    // two Content-Type headers (Node keeps the first): the SDK's server reads both, and refuses them
    const twice = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const url = new URL(`${server.url}/mcp/tools`);
      const req = httpRequest(
        {
          host: url.hostname,
          port: url.port,
          path: url.pathname,
          method: 'POST',
          headers: {
            authorization: `Bearer ${ws.agentKey}`,
            // capitalised: @types/node 24 types the lower-case key as one string; Node sends both
            'Content-Type': ['application/json', 'application/json'],
            accept: 'application/json, text/event-stream',
          },
        },
        (res) => {
          let body = '';
          res.on('data', (chunk) => {
            body += chunk;
          });
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
        },
      );
      req.on('error', reject);
      req.end(JSON.stringify({ jsonrpc: '2.0', id: 6, method: 'tools/call', params: { name: 'add', arguments: { a: 1, b: 1 } } }));
    });
    expect(twice.status).toBe(415);
  });

  it('sends the upstream the calls and nothing more: no cancellation of a call it answered', async () => {
    const client = await (await workspace()).client();
    await client.callTool({ name: 'echo', arguments: { text: 'opens the upstream session' } });
    const before = upstream.methods().length;
    for (let i = 0; i < 3; i++) await client.callTool({ name: 'echo', arguments: { text: `plain ${i}` } });
    // with progress asked for, the SDK's server answers
    await client.callTool({ name: 'countdown', arguments: {} }, undefined, { onprogress: () => undefined });
    await client.listTools();
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(upstream.methods().slice(before)).toEqual(['tools/call', 'tools/call', 'tools/call', 'tools/call', 'tools/list']);
  });

  it('cancels the upstream call of a client that goes away mid-call, and records the outcome as cancelled', async () => {
    const ws = await workspace();
    const before = upstream.methods().length;
    const gone = new AbortController();
    const call = fetch(`${server.url}/mcp/tools`, {
      method: 'POST',
      signal: gone.signal,
      headers: {
        authorization: `Bearer ${ws.agentKey}`,
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
      },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'wait', arguments: { ms: 10_000 } } }),
    }).catch(() => 'gone');
    const until = async (done: () => boolean | Promise<boolean>) => {
      for (let i = 0; i < 100 && !(await done()); i++) await new Promise((resolve) => setTimeout(resolve, 50));
      return done();
    };
    expect(await until(() => upstream.calls().includes('wait:{"ms":10000}'))).toBe(true);
    gone.abort();
    expect(await call).toBe('gone');
    expect(await until(() => upstream.methods().slice(before).includes('notifications/cancelled'))).toBe(true);
    const outcomes = async () => {
      const audit = await server.api('GET', '/audit-logs', { key: ws.key, query: { action: 'mcp.call', limit: 10 }, unchecked: true });
      return (audit.body.data as { context: { outcome?: string } }[]).map((e) => e.context.outcome);
    };
    // cancelled, its upstream outcome unknown: never failed (tests/security/mcp-bounds.test.ts)
    expect(await until(async () => (await outcomes()).includes('cancelled'))).toBe(true);
    expect(await outcomes()).not.toContain('failed');
  });

  it('records the decision before forwarding and the outcome after it', async () => {
    const ws = await workspace();
    await (await ws.client()).callTool({ name: 'echo', arguments: { text: 'audited' } });
    const audit = await server.api('GET', '/audit-logs', { key: ws.key, query: { action: 'mcp.call', limit: 10 }, unchecked: true });
    const events = audit.body.data as { message: string; tool: string; source: string; context: Record<string, unknown> }[];
    expect(events.map((e) => e.message)).toContain('executed');
    const decision = events.find((e) => e.message !== 'executed');
    expect(decision).toMatchObject({ tool: 'echo', source: 'mcp' });
    expect(decision?.context.execution).toMatchObject({ mode: 'mcp_proxy', server: 'tools', tool: 'echo' });
  });

  it('forwards progress notifications of the upstream to a client that asked for them', async () => {
    const client = await (await workspace()).client();
    const seen: number[] = [];
    const result = await client.callTool({ name: 'countdown', arguments: {} }, undefined, { onprogress: (p) => seen.push(p.progress) });
    expect(result.content).toEqual([{ type: 'text', text: 'liftoff' }]);
    expect(seen).toEqual([1, 2, 3]);
  });

  it('answers an unknown tool as the upstream does (a tool error), never a Warden failure', async () => {
    const client = await (await workspace()).client();
    const result = await client.callTool({ name: 'no_such_tool', arguments: {} });
    expect(result.isError).toBe(true);
  });
});

describe('resources and prompts on /mcp/{server}', () => {
  it('lists and reads resources and gets prompts, fields unchanged', async () => {
    const client = await (await workspace()).client();
    const { resources } = await client.listResources();
    expect(resources.find((r) => r.uri === 'test://greeting')).toMatchObject({ title: 'Greeting', mimeType: 'text/plain' });
    const read = await client.readResource({ uri: 'test://greeting' });
    expect(read.contents).toEqual([{ uri: 'test://greeting', text: 'hello', mimeType: 'text/plain' }]);
    const { prompts } = await client.listPrompts();
    expect(prompts.find((p) => p.name === 'greet')).toMatchObject({ title: 'Greet', arguments: [{ name: 'name', required: true }] });
    const prompt = await client.getPrompt({ name: 'greet', arguments: { name: 'Ada' } });
    expect(prompt.messages).toEqual([{ role: 'user', content: { type: 'text', text: 'Say hello to Ada' } }]);
  });

  it('refuses a read policy blocks (mcp.resources.read, resource = URI) with an error naming the policy', async () => {
    const ws = await workspace([
      {
        name: 'No secrets',
        rules: [{ match: { action: ['mcp.resources.read'], resource: ['test://secret'] }, effect: 'block', message: 'Secret' }],
      },
    ]);
    const client = await ws.client();
    expect((await client.readResource({ uri: 'test://greeting' })).contents).toHaveLength(1);
    await expect(client.readResource({ uri: 'test://secret' })).rejects.toThrow(/No secrets/);
  });

  it('refuses a prompt policy blocks (mcp.prompts.get)', async () => {
    const ws = await workspace([{ name: 'No prompts', rules: [{ match: { action: ['mcp.prompts.get'] }, effect: 'block' }] }]);
    await expect((await ws.client()).getPrompt({ name: 'greet', arguments: { name: 'Ada' } })).rejects.toThrow(/No prompts/);
  });
});

describe('authentication of /mcp/{server}', () => {
  const initialize = {
    jsonrpc: '2.0',
    id: 1,
    method: 'initialize',
    params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '1' } },
  };
  const post = (headers: Record<string, string>) =>
    fetch(`${server.url}/mcp/tools`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers },
      body: JSON.stringify(initialize),
    });

  it('answers 401 with a JSON-RPC error and WWW-Authenticate without credentials', async () => {
    const res = await post({});
    expect(res.status).toBe(401);
    expect(res.headers.get('www-authenticate')).toMatch(/^Bearer/);
    const body = await res.json();
    expect(body).toMatchObject({ jsonrpc: '2.0', id: null, error: { code: -32000, data: { code: 'unauthorized' } } });
    expect(body.error.message).toContain('X-Warden-Agent-Key');
  });

  it('answers 401 to an unknown bearer, and the SDK client fails to connect', async () => {
    expect((await post({ authorization: 'Bearer not-a-key' })).status).toBe(401);
    await expect(connectClient(`${server.url}/mcp/tools`, { authorization: 'Bearer not-a-key' })).rejects.toThrow(/401|key/);
  });

  it('answers 401 agent_key_required to a workspace key without X-Warden-Agent-Key', async () => {
    const ws = await workspace();
    const res = await post({ authorization: `Bearer ${ws.key}` });
    expect(res.status).toBe(401);
    expect((await res.json()).error.data.code).toBe('agent_key_required');
  });

  it('answers 401 invalid_agent_key to a workspace key with another workspace agent key', async () => {
    const [a, b] = [await workspace(), await workspace()];
    const res = await post({ authorization: `Bearer ${a.key}`, 'x-warden-agent-key': b.agentKey });
    expect(res.status).toBe(401);
    expect((await res.json()).error.data.code).toBe('invalid_agent_key');
  });

  it('answers 403 to a workspace key without runtime:execute', async () => {
    const ws = await workspace();
    const reader = await keyFor(server, 'agents:read', `gw-${workspaces}`);
    const res = await post({ authorization: `Bearer ${reader}`, 'x-warden-agent-key': ws.agentKey });
    expect(res.status).toBe(403);
    expect((await res.json()).error.data.code).toBe('insufficient_permission');
  });

  it('serves a workspace key with runtime:execute plus X-Warden-Agent-Key', async () => {
    const ws = await workspace();
    const runtime = await keyFor(server, 'runtime:execute', `gw-${workspaces}`);
    const client = await connectClient(`${server.url}/mcp/tools`, {
      authorization: `Bearer ${runtime}`,
      'x-warden-agent-key': ws.agentKey,
    });
    clients.push(client);
    expect((await client.callTool({ name: 'echo', arguments: { text: 'with both keys' } })).content).toEqual([
      { type: 'text', text: 'with both keys' },
    ]);
  });

  it('keeps tenants apart: an agent key reaches only its own workspace servers', async () => {
    const ws = await workspace();
    const res = await fetch(`${server.url}/mcp/not-registered`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        authorization: `Bearer ${ws.agentKey}`,
      },
      body: JSON.stringify(initialize),
    });
    expect(res.status).toBe(404);
    expect((await res.json()).error.data.code).toBe('mcp_server_not_found');
  });

  it('carries the rate-limit headers and answers 405 to GET without a session (there is no stream to give)', async () => {
    const ws = await workspace();
    const res = await fetch(`${server.url}/mcp/tools`, {
      headers: { authorization: `Bearer ${ws.agentKey}`, accept: 'text/event-stream' },
    });
    expect(res.status).toBe(405);
    expect(res.headers.get('allow')).toBe('GET, POST, DELETE');
    expect(res.headers.get('x-ratelimit-limit')).toBeTruthy();
  });
});
