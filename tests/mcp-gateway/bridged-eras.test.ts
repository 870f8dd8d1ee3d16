/**
 * Clients of one MCP era in front of upstreams of the other, through Warden (record 0030).
 * Warden probes `server/discover`: it speaks 2026-07-28 to an upstream that answers it and
 * 2025-11-25 to one that does not (also to one that answers the probe with a 500 page), and
 * keeps the verdict, so a server is probed once for many sessions. A 2025 client (the v1 SDK's)
 * in front of a 2026-07-28 upstream (the reference upstream, v2 SDK): the upstream's
 * `input_required` questions reach it as requests on its call's stream, each decided as an act;
 * the resources it subscribes to and list changes reach its GET stream, from the upstream
 * session's listen stream. (A 2026-07-28 client in front of a 2025 upstream: conformance.test.ts.)
 */
import { readFileSync } from 'node:fs';
import { createServer, request as httpRequest, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  CreateTaskResultSchema,
  ElicitRequestSchema,
  ResourceUpdatedNotificationSchema,
  ToolListChangedNotificationSchema,
} from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ConformanceUpstream, startConformanceUpstream } from '../support/conformance-upstream.ts';
import { keyFor, useTestServer } from '../support/server.ts';
import { eventually } from './support.ts';

const spec = JSON.parse(readFileSync(new URL('../../spec/dist/openapi.json', import.meta.url), 'utf8'));
const ALL: string = spec.components.schemas.Permission.enum.join(',');
const server = useTestServer({ egressAllowlist: ['127.0.0.1/32'] });
/** Long enough for a slow machine: what is awaited arrives in milliseconds on a quiet one. */
const WAIT_MS = 30_000;
let modern: ConformanceUpstream;
let legacy: ConformanceUpstream;
let workspaces = 0;
const clients: Client[] = [];
const servers: Server[] = [];

beforeAll(async () => {
  modern = await startConformanceUpstream();
  legacy = await startConformanceUpstream({ modern: false });
});
afterAll(async () => {
  for (const client of clients) await client.close().catch(() => undefined);
  for (const http of servers) {
    http.closeAllConnections();
    await new Promise<void>((resolve) => http.close(() => resolve()));
  }
  await modern?.close();
  await legacy?.close();
});

/** A workspace of its own with `url` registered as `up`, and a key per agent asked for. */
async function workspace(url: string, policies: unknown[] = []) {
  const key = await keyFor(server, ALL, `bridge-${++workspaces}`);
  const api = (method: string, path: string, body?: unknown, query?: Record<string, unknown>) =>
    server.api(method as 'POST', path as '/agents', { key, body, query, unchecked: true });
  expect((await api('POST', '/mcp-servers', { name: 'Up', slug: 'up', transport_url: url })).status).toBe(201);
  for (const policy of policies) expect((await api('POST', '/policies', policy)).status).toBe(201);
  let agents = 0;
  return {
    agentKey: async () => {
      const agentKey = `ak_bridge_${workspaces}_${++agents}_${Math.random().toString(36).slice(2)}`;
      const slug = `bot-${agents}`;
      expect((await api('POST', '/agents', { name: slug, slug, provider: 'local', api_key: agentKey })).status).toBe(201);
      return agentKey;
    },
    events: async (action: string) =>
      (await api('GET', '/audit-logs', undefined, { action, limit: 20 })).body.data as {
        result: string;
        context: Record<string, unknown>;
      }[],
  };
}

/** A 2025 client (the v1 SDK's) on Warden's `/mcp/up`, able to elicit (answering `answer`). */
async function legacyClient(agentKey: string, answer = (_message: string) => ({ action: 'accept', content: { name: 'Ada' } })) {
  const client = new Client({ name: 'bridge-test', version: '1.0.0' }, { capabilities: { elicitation: {} } });
  client.setRequestHandler(ElicitRequestSchema, async (request) => answer(request.params.message) as never);
  await client.connect(
    new StreamableHTTPClientTransport(new URL(`${server.url}/mcp/up`), {
      requestInit: { headers: { authorization: `Bearer ${agentKey}` } },
    }),
  );
  clients.push(client);
  return client;
}

const text = (result: unknown) => (((result as { content?: unknown }).content ?? []) as { text?: string }[]).map((c) => c.text).join('');
const count = (methods: string[], method: string) => methods.filter((m) => m === method).length;

describe('the upstream era, probed', () => {
  it('speaks 2026-07-28 to an upstream that answers server/discover, and probes it once for many sessions', async () => {
    const ws = await workspace(modern.url);
    const before = modern.methods();
    for (const agentKey of [await ws.agentKey(), await ws.agentKey()]) {
      const client = await legacyClient(agentKey);
      expect(text(await client.callTool({ name: 'test_simple_text', arguments: {} }))).toContain('This is a simple text response');
    }
    const sent = modern.methods().slice(before.length);
    expect(count(sent, 'server/discover')).toBe(1);
    expect(count(sent, 'initialize')).toBe(0);
    expect(count(sent, 'tools/call')).toBe(2);
  });

  it('speaks 2025-11-25 to an upstream that does not, or that answers the probe with a 500 page', async () => {
    // in front of the 2025-only upstream: server/discover answered 500 with HTML, as some servers do for a method they do not know
    let probes = 0;
    const awkward = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (chunk: Buffer) => chunks.push(chunk));
      req.on('end', () => {
        const body = Buffer.concat(chunks);
        if (body.includes('"server/discover"')) {
          probes += 1;
          res.writeHead(500, { 'content-type': 'text/html' }).end('<h1>Internal Server Error</h1>');
          return;
        }
        const to = new URL(legacy.url);
        const forwarded = httpRequest(
          { host: to.hostname, port: to.port, path: to.pathname, method: req.method, headers: req.headers },
          (answer) => {
            res.writeHead(answer.statusCode ?? 502, answer.headers);
            answer.pipe(res);
          },
        );
        forwarded.on('error', () => res.destroy());
        forwarded.end(body);
      });
    });
    servers.push(awkward);
    await new Promise<void>((resolve) => awkward.listen(0, '127.0.0.1', resolve));
    for (const url of [legacy.url, `http://127.0.0.1:${(awkward.address() as AddressInfo).port}/mcp`]) {
      const ws = await workspace(url);
      const before = legacy.methods();
      for (const agentKey of [await ws.agentKey(), await ws.agentKey()]) {
        const client = await legacyClient(agentKey);
        expect(text(await client.callTool({ name: 'test_simple_text', arguments: {} }))).toContain('This is a simple text response');
      }
      const sent = legacy.methods().slice(before.length);
      // two sessions, and one probe where the answer was a 2025 server's own: that verdict is kept
      expect(count(sent, 'initialize')).toBe(2);
      if (url === legacy.url) expect(count(sent, 'server/discover')).toBe(1);
    }
    // a 500 is no verdict to keep (a proxy's during a deploy reads the same): each session probes again
    expect(probes).toBe(2);
  });
});

describe('a 2025 client in front of a 2026-07-28 upstream', () => {
  it('calls a tool whose arguments the upstream wants mirrored in Mcp-Param-* headers, with no listing first', async () => {
    const ws = await workspace(modern.url);
    const client = await legacyClient(await ws.agentKey());
    const args = { region: 'eu-west', priority: 3, verbose: true, query: 'q' };
    const result = await client.callTool({ name: 'test_custom_headers', arguments: args });
    expect(result.isError, text(result)).toBeFalsy();
    expect(text(result)).toBe(`custom headers: ${JSON.stringify(args)}`);
  });

  it('asking for a task gets a refusal that says why, and the tool does not run', async () => {
    const ws = await workspace(modern.url);
    const client = await legacyClient(await ws.agentKey());
    const asked = client.request(
      { method: 'tools/call', params: { name: 'test_simple_text', arguments: {}, task: { ttl: 60_000 } } },
      CreateTaskResultSchema,
    );
    await expect(asked).rejects.toThrow(/speaks 2026-07-28 \(where a task is the server's choice/);
    // the call was decided (allowed), and its outcome says it did not run
    const outcomes = (await ws.events('mcp.call')).filter((e) => e.context.outcome !== undefined);
    expect(outcomes.map((e) => e.context.outcome)).toEqual(['failed']);
  });

  it("gets the upstream's input_required question as a request on its call's stream, decided as mcp.elicitation", async () => {
    const ws = await workspace(modern.url);
    const asked: string[] = [];
    const client = await legacyClient(await ws.agentKey(), (message) => {
      asked.push(message);
      return { action: 'accept', content: { name: 'Ada' } };
    });
    const result = await client.callTool({ name: 'test_input_required_result_elicitation', arguments: {} });
    expect(text(result)).toBe('Hello, Ada!');
    expect(asked).toEqual(['What is your name?']);
    // the decision, and the outcome with the client's answer
    const events = await ws.events('mcp.elicitation');
    expect(events.map((e) => e.result)).toEqual(['allowed', 'allowed']);
    expect(events.some((e) => e.context.elicitation_action === 'accept')).toBe(true);
  });

  it('is never asked a question policy blocks, and the call fails without the upstream getting an answer', async () => {
    const ws = await workspace(modern.url, [
      { name: 'No questions', rules: [{ match: { action: ['mcp.elicitation'] }, effect: 'block' }] },
    ]);
    const asked: string[] = [];
    const client = await legacyClient(await ws.agentKey(), (message) => {
      asked.push(message);
      return { action: 'accept', content: { name: 'Ada' } };
    });
    const before = modern.methods();
    const result = await client.callTool({ name: 'test_input_required_result_elicitation', arguments: {} });
    expect(result.isError).toBe(true);
    expect(text(result)).toContain('No questions');
    expect(asked).toEqual([]);
    // the first leg only: no retry carried an answer
    expect(count(modern.methods().slice(before.length), 'tools/call')).toBe(1);
    expect((await ws.events('mcp.elicitation')).map((e) => e.result)).toEqual(['blocked']);
  });

  it('gets updates of the resources it subscribed to, and list changes, on its GET stream', async () => {
    const ws = await workspace(modern.url);
    const client = await legacyClient(await ws.agentKey());
    const updated: string[] = [];
    let toolsChanged = 0;
    client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => void updated.push(n.params.uri));
    client.setNotificationHandler(ToolListChangedNotificationSchema, () => {
      toolsChanged += 1;
    });
    const [watched, other] = ['test://watched-resource', `test://other-${workspaces}`];
    await client.subscribeResource({ uri: watched });
    await client.subscribeResource({ uri: other });
    await client.unsubscribeResource({ uri: watched });
    // the client's GET stream and the upstream's listen stream are open once an update arrives
    await eventually(async () => {
      await modern.resourceUpdated(other);
      return updated.includes(other) || undefined;
    }, WAIT_MS);
    const seen = updated.length;
    // on one stream in order: the unsubscribed URI's update would arrive before the next one's
    await modern.resourceUpdated(watched);
    await modern.resourceUpdated(other);
    await eventually(() => updated.length > seen || undefined, WAIT_MS);
    expect(updated.slice(seen)[0]).toBe(other);
    expect(updated).not.toContain(watched);
    await client.callTool({ name: 'test_trigger_tool_change', arguments: {} });
    await eventually(() => toolsChanged > 0 || undefined, WAIT_MS);
  });
});
