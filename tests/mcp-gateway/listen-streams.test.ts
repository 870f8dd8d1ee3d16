/**
 * `subscriptions/listen` through the gateway (revision 2026-07-28): what an upstream announces
 * on Warden's sessions (here: its tool list changed) reaches the listen streams of the
 * endpoints that show that server, in its workspace only. Two workspaces register the same
 * upstream; a change caused through one is told to that workspace's streams and never the other's.
 */
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { type ConformanceUpstream, startConformanceUpstream } from '../support/conformance-upstream.ts';
import { keyFor, useTestServer } from '../support/server.ts';
import { eventually, postMcp } from './support.ts';

const spec = JSON.parse(readFileSync(new URL('../../spec/dist/openapi.json', import.meta.url), 'utf8'));
const ALL: string = spec.components.schemas.Permission.enum.join(',');
const MODERN = '2026-07-28';
const server = useTestServer({ egressAllowlist: ['127.0.0.1/32'] });
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

/** Opens a listen stream for `agentKey` on `path`; returns what it has received so far, as text. */
async function listenOn(agentKey: string, path: string): Promise<() => string> {
  const stop = new AbortController();
  streams.push(stop);
  const body = {
    jsonrpc: '2.0',
    id: 1,
    method: 'subscriptions/listen',
    params: { notifications: { toolsListChanged: true }, _meta: envelope },
  };
  const res = await fetch(`${server.url}/mcp${path}`, {
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
  const reader = res.body?.getReader() as ReadableStreamDefaultReader<Uint8Array>;
  void (async () => {
    for (;;) {
      const { done, value } = await reader.read().catch(() => ({ done: true, value: undefined }));
      if (done) return;
      received += Buffer.from(value as Uint8Array).toString('utf8');
    }
  })();
  // the stream is acknowledged once it is subscribed
  await eventually(() => (received.includes('notifications/subscriptions/acknowledged') ? true : undefined));
  return () => received;
}

it("tells a server's tool list change to its workspace's listen streams (its endpoint and the aggregate), not another's", async () => {
  const [own, aggregate] = [await listenOn(agents.a, '/up'), await listenOn(agents.a, '')];
  const others = [await listenOn(agents.b, '/up'), await listenOn(agents.b, '')];
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
});
