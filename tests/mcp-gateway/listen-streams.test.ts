/**
 * `subscriptions/listen` through the gateway (revision 2026-07-28): what an upstream announces
 * on Warden's sessions (here: its tool list changed) reaches the listen streams of the
 * endpoints that show that server, in its workspace only. Two workspaces register the same
 * upstream; a change caused through one is told to that workspace's streams and never the other's.
 * A stream whose caller may no longer act (its agent suspended, its key replaced) is ended at
 * the next check, as a session's GET stream is. With two processes on one database, a change
 * one process hears reaches the streams the other serves.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ConformanceUpstream, startConformanceUpstream } from '../support/conformance-upstream.ts';
import { keyFor, useTestServer } from '../support/server.ts';
import { eventually, postMcp, useSecondProcess } from './support.ts';

const spec = JSON.parse(readFileSync(new URL('../../spec/dist/openapi.json', import.meta.url), 'utf8'));
const ALL: string = spec.components.schemas.Permission.enum.join(',');
const MODERN = '2026-07-28';
/** How often a stream's caller is checked again: short, so that an end is seen within a test. */
const STREAM_CHECK_MS = 200;
/** Shared with the second process, as every process of one deployment shares it. */
const MASTER_KEY = randomBytes(32).toString('base64');
const server = useTestServer({ egressAllowlist: ['127.0.0.1/32'], mcpStreamCheckMs: STREAM_CHECK_MS, masterKey: MASTER_KEY });
let upstream: ConformanceUpstream;
const agents: Record<'a' | 'b', string> = { a: '', b: '' };
const streams: AbortController[] = [];

beforeAll(async () => {
  upstream = await startConformanceUpstream();
  for (const name of ['a', 'b'] as const) {
    const key = await keyFor(server, ALL, `listen-${name}`);
    agents[name] = `ak_listen_${name}_${Math.random().toString(36).slice(2)}`;
    const api = (path: string, body: unknown) => server.api('POST', path as '/agents', { key, body, unchecked: true });
    expect((await api('/mcp-servers', { name: 'Up', slug: 'up', transport_url: upstream.url })).status).toBe(201);
    expect((await api('/agents', { name: 'Bot', slug: 'bot', provider: 'local', api_key: agents[name] })).status).toBe(201);
  }
});
afterAll(async () => {
  for (const stream of streams) stream.abort();
  await upstream?.close();
});

const envelope = { 'io.modelcontextprotocol/protocolVersion': MODERN, 'io.modelcontextprotocol/clientCapabilities': {} };
const modern = (method: string, name?: string) => ({
  'mcp-protocol-version': MODERN,
  'mcp-method': method,
  ...(name ? { 'mcp-name': name } : {}),
});

/** Opens a listen stream for `agentKey` on `path`; returns what it has received so far, as text (and whether it ended). */
async function listenOn(agentKey: string, path: string, base = server.url): Promise<(() => string) & { ended: () => boolean }> {
  const stop = new AbortController();
  streams.push(stop);
  const body = {
    jsonrpc: '2.0',
    id: 1,
    method: 'subscriptions/listen',
    params: { notifications: { toolsListChanged: true }, _meta: envelope },
  };
  const res = await fetch(`${base}/mcp${path}`, {
    method: 'POST',
    signal: stop.signal,
    headers: {
      authorization: `Bearer ${agentKey}`,
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      ...modern('subscriptions/listen'),
    },
    body: JSON.stringify(body),
  });
  expect(res.status).toBe(200);
  let received = '';
  let ended = false;
  const reader = res.body?.getReader() as ReadableStreamDefaultReader<Uint8Array>;
  void (async () => {
    for (;;) {
      const { done, value } = await reader.read().catch(() => ({ done: true, value: undefined }));
      if (done) {
        ended = true;
        return;
      }
      received += Buffer.from(value as Uint8Array).toString('utf8');
    }
  })();
  // the stream is acknowledged once it is subscribed
  await eventually(() => (received.includes('notifications/subscriptions/acknowledged') ? true : undefined));
  return Object.assign(() => received, { ended: () => ended });
}

it("tells a server's tool list change to its workspace's listen streams (its endpoint and the aggregate), not another's", async () => {
  const [own, aggregate] = [await listenOn(agents.a, '/up'), await listenOn(agents.a, '')];
  const others = [await listenOn(agents.b, '/up'), await listenOn(agents.b, '')];
  await changeToolsHeard(own, aggregate, others);
});

/**
 * Agent a calls the upstream's tool that changes its tool list, through this process (so this
 * process's upstream session hears the change): its own endpoint's stream and the aggregate's
 * are told, the others not.
 */
async function changeToolsHeard(...[own, aggregate, others]: [() => string, () => string, (() => string)[]]) {
  const call = {
    jsonrpc: '2.0',
    id: 2,
    method: 'tools/call',
    params: { name: 'test_trigger_tool_change', arguments: {}, _meta: envelope },
  };
  const called = await postMcp(`${server.url}/mcp/up`, agents.a, call, modern('tools/call', 'test_trigger_tool_change'));
  expect(called.status).toBe(200);
  await eventually(() => (own().includes('notifications/tools/list_changed') ? true : undefined));
  await eventually(() => (aggregate().includes('notifications/tools/list_changed') ? true : undefined));
  // delivered to every stream in one pass: had the other workspace's been told, it would have been by now
  await new Promise((resolve) => setTimeout(resolve, 300));
  for (const other of others) expect(other()).not.toContain('notifications/tools/list_changed');
}

it.each([
  ['its agent is suspended', { status: 'suspended' }],
  ['its key is replaced', { api_key: `ak_listen_new_${Math.random().toString(36).slice(2)}` }],
])('ends a listen stream once %s (checked again as a GET stream is)', async (_what, change) => {
  const key = await keyFor(server, ALL, `listen-end-${Object.keys(change)[0]?.replace('_', '-')}`);
  const agentKey = `ak_listen_end_${Math.random().toString(36).slice(2)}`;
  const api = (method: 'POST' | 'PATCH', path: string, body: unknown) =>
    server.api(method, path as '/agents', { key, body, unchecked: true });
  expect((await api('POST', '/mcp-servers', { name: 'Up', slug: 'up', transport_url: upstream.url })).status).toBe(201);
  expect((await api('POST', '/agents', { name: 'Bot', slug: 'bot', provider: 'local', api_key: agentKey })).status).toBe(201);
  const stream = await listenOn(agentKey, '/up');
  // open while allowed
  await new Promise((resolve) => setTimeout(resolve, 3 * STREAM_CHECK_MS));
  expect(stream.ended()).toBe(false);
  expect((await api('PATCH', '/agents/bot', change)).status).toBe(200);
  await eventually(() => (stream.ended() ? true : undefined), 30_000);
});

describe.skipIf(!process.env.DATABASE_URL)('listen streams across two Warden processes (needs DATABASE_URL)', () => {
  const other = useSecondProcess(server, MASTER_KEY);

  it("tells a change heard by one process to the streams another serves, in the server's workspace only", async () => {
    const elsewhere = other().url;
    const [own, aggregate] = [await listenOn(agents.a, '/up', elsewhere), await listenOn(agents.a, '', elsewhere)];
    const stranger = await listenOn(agents.b, '/up', elsewhere);
    await changeToolsHeard(own, aggregate, [stranger]);
  });
});
