/**
 * What the gateway caches never outlives a change: an agent key sent as the bearer (and a
 * bearer that is nobody's) is served from the key cache, and the registered MCP servers from
 * a registry cached per workspace by its MCP servers version. A change through the API is seen
 * by the next request; a change written to the database by another process is seen once its
 * notification arrives.
 */
import { readFileSync } from 'node:fs';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { keyFor, useTestServer } from '../support/server.ts';
import { type CountingUpstream, eventually, startCountingUpstream } from './support.ts';

const spec = JSON.parse(readFileSync(new URL('../../spec/dist/openapi.json', import.meta.url), 'utf8'));
const ALL: string = spec.components.schemas.Permission.enum.join(',');
const server = useTestServer({ egressAllowlist: ['127.0.0.1/32'] });
let first: CountingUpstream;
let second: CountingUpstream;
let workspaces = 0;

beforeAll(async () => {
  [first, second] = await Promise.all([startCountingUpstream(), startCountingUpstream()]);
});
afterAll(async () => {
  await Promise.all([first?.close(), second?.close()]);
});

/** A raw MCP tools/call on the gateway (stateless: one POST is a whole exchange). */
async function callEcho(bearer: string, text: string, path = '/mcp/tools') {
  const res = await fetch(`${server.url}${path}`, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${bearer}`,
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      'mcp-protocol-version': '2025-06-18',
    },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'echo', arguments: { text } } }),
  });
  return {
    status: res.status,
    body: (await res.json()) as { result?: { content: unknown; isError?: boolean }; error?: { message: string } },
  };
}

async function workspace() {
  const key = await keyFor(server, ALL, `caches-${++workspaces}`);
  const agentKey = `ak_caches_${workspaces}_${Math.random().toString(36).slice(2)}`;
  const api = (method: 'POST' | 'PATCH', path: string, body: unknown) =>
    server.api(method as 'POST', path as '/agents', { key, body, unchecked: true });
  const created = await api('POST', '/mcp-servers', { name: 'tools', slug: 'tools', transport_url: first.url });
  expect(created.status).toBe(201);
  const agent = await api('POST', '/agents', { name: 'Bot', slug: 'bot', provider: 'local', api_key: agentKey });
  expect(agent.status).toBe(201);
  return { key, agentKey, api, serverId: created.body.data.id as string, agentId: agent.body.data.id as string };
}

describe('the agent key as the bearer (key cache)', () => {
  it('stops working at the next request once the key is rotated through the API, and the new key works at once', async () => {
    const ws = await workspace();
    expect((await callEcho(ws.agentKey, 'one')).status).toBe(200);
    expect((await callEcho(ws.agentKey, 'two')).status).toBe(200);
    const rotated = `${ws.agentKey}_rotated`;
    expect((await ws.api('PATCH', `/agents/${ws.agentId}`, { api_key: rotated })).status).toBe(200);
    const old = await callEcho(ws.agentKey, 'three');
    expect(old.status).toBe(401);
    expect(old.body.error?.message).toMatch(/agent key/);
    const fresh = await callEcho(rotated, 'four');
    expect(fresh.status).toBe(200);
    expect(fresh.body.result?.content).toEqual([{ type: 'text', text: 'four' }]);
  });

  it('refuses a bearer that is nobody’s every time (401), and accepts it once an agent is given that key', async () => {
    const ws = await workspace();
    const later = `ak_later_${Math.random().toString(36).slice(2)}`;
    expect((await callEcho(later, 'a')).status).toBe(401);
    expect((await callEcho(later, 'b')).status).toBe(401);
    expect((await ws.api('PATCH', `/agents/${ws.agentId}`, { api_key: later })).status).toBe(200);
    expect((await callEcho(later, 'c')).status).toBe(200);
  });

  it('refuses a suspended agent at its next request', async () => {
    const ws = await workspace();
    expect((await callEcho(ws.agentKey, 'before')).status).toBe(200);
    expect((await ws.api('PATCH', `/agents/${ws.agentId}`, { status: 'suspended' })).status).toBe(200);
    const refused = await callEcho(ws.agentKey, 'after');
    expect(refused.status).toBe(403);
    expect(refused.body.error?.message).toMatch(/suspended/);
  });

  it('sees a key changed in the database by another process once its notification arrives', async () => {
    const ws = await workspace();
    expect((await callEcho(ws.agentKey, 'cached')).status).toBe(200);
    // as another Warden process would: no API call on this one, only the trigger's NOTIFY
    await sql`UPDATE agents SET api_key_hash = NULL WHERE id = ${ws.agentId}`.execute(server.database.db);
    await eventually(async () => ((await callEcho(ws.agentKey, 'gone')).status === 401 ? true : undefined));
  });
});

describe('the registered MCP servers (registry cached by version)', () => {
  it('follows a server disabled, re-enabled and moved to another URL through the API, at the next request', async () => {
    const ws = await workspace();
    expect((await callEcho(ws.agentKey, 'on first')).body.result?.content).toEqual([{ type: 'text', text: 'on first' }]);
    expect((await ws.api('PATCH', `/mcp-servers/${ws.serverId}`, { enabled: false })).status).toBe(200);
    const disabled = await callEcho(ws.agentKey, 'disabled');
    expect(disabled.status).toBe(404);
    expect(disabled.body.error?.message).toMatch(/no enabled MCP server 'tools'/);
    expect((await ws.api('PATCH', `/mcp-servers/${ws.serverId}`, { enabled: true, transport_url: second.url })).status).toBe(200);
    const moved = await callEcho(ws.agentKey, 'on second');
    expect(moved.body.result?.content).toEqual([{ type: 'text', text: 'on second' }]);
    expect(second.calls()).toContain('echo:{"text":"on second"}');
    expect(first.calls()).not.toContain('echo:{"text":"on second"}');
  });

  it('sees a server disabled in the database by another process once its notification arrives', async () => {
    const ws = await workspace();
    expect((await callEcho(ws.agentKey, 'cached')).status).toBe(200);
    await sql`UPDATE mcp_servers SET enabled = false WHERE id = ${ws.serverId}`.execute(server.database.db);
    await eventually(async () => ((await callEcho(ws.agentKey, 'gone')).status === 404 ? true : undefined));
  });

  it('lists a server registered after the first request on the aggregate endpoint', async () => {
    const ws = await workspace();
    const list = async () => {
      const res = await fetch(`${server.url}/mcp`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${ws.agentKey}`,
          'content-type': 'application/json',
          accept: 'application/json, text/event-stream',
          'mcp-protocol-version': '2025-06-18',
        },
        body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
      });
      return ((await res.json()) as { result: { tools: { name: string }[] } }).result.tools.map((t) => t.name);
    };
    expect((await list()).some((n) => n.startsWith('more__'))).toBe(false);
    expect((await ws.api('POST', '/mcp-servers', { name: 'more', slug: 'more', transport_url: second.url })).status).toBe(201);
    expect(await list()).toContain('more__echo');
  });
});
