/**
 * The one connection manager behind the gateway and the REST runtime: upstream sessions are
 * reused across calls (no handshake per call), terminated with DELETE when idle and on
 * shutdown, and re-established transparently when the upstream forgets them (a restart).
 */
import { readFileSync } from 'node:fs';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { keyFor, startTestServer, type TestServer, useTestServer } from '../support/server.ts';
import { type CountingUpstream, connectClient, eventually, startCountingUpstream } from './support.ts';

const spec = JSON.parse(readFileSync(new URL('../../spec/dist/openapi.json', import.meta.url), 'utf8'));
const ALL: string = spec.components.schemas.Permission.enum.join(',');
const IDLE_MS = 500;
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

async function workspace(target: TestServer = server): Promise<{ key: string; agentKey: string; client: () => Promise<Client> }> {
  const key = await keyFor(target, ALL, `us-${++workspaces}`);
  const agentKey = `ak_sessions_${workspaces}_${Math.random().toString(36).slice(2)}`;
  const post = (path: string, body: unknown) => target.api('POST', path as '/agents', { key, body, unchecked: true });
  expect((await post('/mcp-servers', { name: 'tools', slug: 'tools', transport_url: upstream.url })).status).toBe(201);
  expect((await post('/agents', { name: 'Bot', slug: 'bot', provider: 'local', api_key: agentKey })).status).toBe(201);
  return {
    key,
    agentKey,
    client: async () => {
      const client = await connectClient(`${target.url}/mcp/tools`, { authorization: `Bearer ${agentKey}` });
      clients.push(client);
      return client;
    },
  };
}

const restCall = (target: TestServer, key: string, agentKey: string, text: string) =>
  target.api('POST', '/runtime/mcp/call', {
    key,
    headers: { 'x-warden-agent-key': agentKey },
    body: { server: 'tools', tool: 'echo', arguments: { text } },
    unchecked: true,
  });

describe('upstream sessions', () => {
  it("are opened once per owner and reused: a gateway client session's calls share one, the agent's REST calls another", async () => {
    const ws = await workspace();
    const opened = upstream.sessions();
    const client = await ws.client();
    for (let i = 0; i < 5; i++) {
      const result = await client.callTool({ name: 'echo', arguments: { text: `g${i}` } });
      expect(result.isError, JSON.stringify(result.content)).toBeFalsy();
    }
    for (let i = 0; i < 5; i++) {
      const res = await restCall(server, ws.key, ws.agentKey, `r${i}`);
      expect(res.status).toBe(200);
      expect(res.body.data.execution.content).toEqual([{ type: 'text', text: `r${i}` }]);
    }
    // the SDK client keeps a session of its own (its upstream session declares what it declared); the REST calls use the agent's
    expect(upstream.sessions() - opened).toBe(2);
  });

  it('are re-established transparently when the upstream restarts mid-session', async () => {
    const ws = await workspace();
    const client = await ws.client();
    expect((await client.callTool({ name: 'echo', arguments: { text: 'before' } })).content).toEqual([{ type: 'text', text: 'before' }]);
    const opened = upstream.sessions();
    await upstream.restart();
    const after = await client.callTool({ name: 'echo', arguments: { text: 'after' } });
    expect(after.isError).toBeFalsy();
    expect(after.content).toEqual([{ type: 'text', text: 'after' }]);
    expect(upstream.sessions() - opened).toBe(1);
    expect((await restCall(server, ws.key, ws.agentKey, 'rest after')).status).toBe(200);
  });

  // A server of its own (a short idle time, and one to shut down): starting it is slow on a busy machine.
  it('are terminated with DELETE once idle and when Warden shuts down', { timeout: 120_000 }, async () => {
    const own = await startTestServer({ egressAllowlist: ['127.0.0.1/32'], mcpUpstreamIdleMs: IDLE_MS });
    const fresh = await startCountingUpstream();
    try {
      const key = await keyFor(own, ALL);
      const post = (path: string, body: unknown) => own.api('POST', path as '/agents', { key, body, unchecked: true });
      expect((await post('/mcp-servers', { name: 'tools', slug: 'tools', transport_url: fresh.url })).status).toBe(201);
      expect((await post('/agents', { name: 'Bot', slug: 'bot', provider: 'local', api_key: 'ak_shutdown_test_key' })).status).toBe(201);
      const first = await restCall(own, key, 'ak_shutdown_test_key', 'then idle');
      expect(first.status, JSON.stringify(first.body)).toBe(200);
      expect(fresh.sessions()).toBe(1);
      await eventually(() => (fresh.deletes() === 1 && fresh.open() === 0 ? true : undefined), 20_000);
      expect((await restCall(own, key, 'ak_shutdown_test_key', 'before shutdown')).status).toBe(200);
      expect(fresh.sessions()).toBe(2);
      expect(fresh.open()).toBe(1);
      await own.close();
      expect(fresh.deletes()).toBe(2);
      expect(fresh.open()).toBe(0);
    } finally {
      await own.close().catch(() => undefined);
      await fresh.close();
    }
  });
});
