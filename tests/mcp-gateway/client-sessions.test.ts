/**
 * Client sessions of the MCP gateway: `initialize` answers an `Mcp-Session-Id` (wms_…), later
 * requests are served in that session (404 session_not_found for an unknown one, another
 * agent's or another endpoint's), DELETE ends it and its upstream sessions, each client session
 * has upstream sessions of its own that declare what the client declared (sampling,
 * elicitation, roots), and the GET stream relays what the upstream sends outside any request.
 * Requests without a session id are still served statelessly. roots/list is relayed as
 * `mcp.roots`; and, on PostgreSQL, an answer POSTed to another Warden process reaches the
 * question it answers.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  type ClientCapabilities,
  ElicitRequestSchema,
  ListRootsRequestSchema,
  LoggingMessageNotificationSchema,
  ResourceListChangedNotificationSchema,
  ResourceUpdatedNotificationSchema,
  ToolListChangedNotificationSchema,
} from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { keyFor, useTestServer } from '../support/server.ts';
import { type SessionsUpstream, startSessionsUpstream, WATCHED } from './client-sessions-upstream.ts';
import { eventually, useSecondProcess } from './support.ts';

const spec = JSON.parse(readFileSync(new URL('../../spec/dist/openapi.json', import.meta.url), 'utf8'));
const ALL: string = spec.components.schemas.Permission.enum.join(',');
const PROTOCOL = '2025-11-25';
/** Visible ASCII after the prefix, at least 22 characters (128 bits as base64url; more as hex). */
const SESSION_ID = /^wms_[\x21-\x7e]{22,}$/;
/** The upstream's own session ids (randomUUID). */
const UPSTREAM_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const MIRRORED = ['elicitation', 'roots', 'sampling'];
const TOOLS_LIST = { jsonrpc: '2.0', id: 2, method: 'tools/list', params: {} };

/** Shared with the second process, as every process of one deployment shares it (question ids carry a MAC under it). */
const MASTER_KEY = randomBytes(32).toString('base64');
/** How often a GET stream's caller is checked again: short, so that an end is seen within a test. */
const STREAM_CHECK_MS = 200;
const server = useTestServer({ egressAllowlist: ['127.0.0.1/32'], masterKey: MASTER_KEY, mcpStreamCheckMs: STREAM_CHECK_MS });
let upstream: SessionsUpstream;
let workspaces = 0;
const clients: Client[] = [];
/** Cancels of SSE streams read by the tests, run in afterAll (a failed test may leave one open). */
const closers: (() => Promise<unknown>)[] = [];

beforeAll(async () => {
  upstream = await startSessionsUpstream();
});
afterAll(async () => {
  for (const close of closers) await close();
  for (const client of clients) await client.close().catch(() => undefined);
  await upstream?.close();
});

const newAgentKey = () => `ak_sessions_${randomBytes(12).toString('hex')}`;

interface Workspace {
  agentKey: string;
  api: (method: string, path: string, body?: unknown) => Promise<{ status: number; body: any }>;
  /** The audit events of an action, newest first. */
  events: (action: string) => Promise<{ result: string; agent: string }[]>;
}

/** A workspace of its own: the upstream registered as `up`, agent `bot` with a key, these policies. */
async function workspace(policies: unknown[] = []): Promise<Workspace> {
  const key = await keyFor(server, ALL, `cs-${++workspaces}`);
  const agentKey = newAgentKey();
  const api = (method: string, path: string, body?: unknown) =>
    server.api(method as 'POST', path as '/agents', { key, body, unchecked: true });
  expect((await api('POST', '/mcp-servers', { name: 'Up', slug: 'up', transport_url: upstream.url })).status).toBe(201);
  expect((await api('POST', '/agents', { name: 'Bot', slug: 'bot', provider: 'local', api_key: agentKey })).status).toBe(201);
  for (const policy of policies) expect((await api('POST', '/policies', policy)).status).toBe(201);
  return {
    agentKey,
    api,
    events: async (action) => (await server.api('GET', '/audit-logs', { key, query: { action, limit: 20 }, unchecked: true })).body.data,
  };
}

interface Target {
  sessionId?: string;
  /** After /mcp: '/up' (default), '/other', or '' for the aggregate. */
  path?: string;
  /** Another Warden's /api/v1. */
  base?: string;
}

const headers = (agentKey: string, sessionId?: string): Record<string, string> => ({
  'content-type': 'application/json',
  accept: 'application/json, text/event-stream',
  authorization: `Bearer ${agentKey}`,
  ...(sessionId ? { 'mcp-session-id': sessionId, 'mcp-protocol-version': PROTOCOL } : {}),
});
const endpoint = ({ path = '/up', base = server.url }: Target) => `${base}/mcp${path}`;
const post = (agentKey: string, message: unknown, target: Target = {}) =>
  fetch(endpoint(target), { method: 'POST', headers: headers(agentKey, target.sessionId), body: JSON.stringify(message) });
const openStream = (agentKey: string, target: Target = {}) =>
  fetch(endpoint(target), { headers: { ...headers(agentKey, target.sessionId), accept: 'text/event-stream' } });

/** A raw initialize, then notifications/initialized in its session: the session id Warden answered with, if any. */
async function initialize(agentKey: string, target: Target = {}, capabilities: ClientCapabilities = {}): Promise<string | undefined> {
  const res = await post(
    agentKey,
    {
      jsonrpc: '2.0',
      id: 1,
      method: 'initialize',
      params: { protocolVersion: PROTOCOL, capabilities, clientInfo: { name: 'raw', version: '1' } },
    },
    target,
  );
  expect(res.status).toBe(200);
  await res.text();
  const sessionId = res.headers.get('mcp-session-id') ?? undefined;
  if (sessionId)
    expect((await post(agentKey, { jsonrpc: '2.0', method: 'notifications/initialized' }, { ...target, sessionId })).status).toBe(202);
  return sessionId;
}

/** The messages of an SSE answer, one by one; each wait bounded. */
function sse(res: Response) {
  const reader = (res.body as ReadableStream<Uint8Array>)
    .pipeThrough(new TextDecoderStream() as unknown as ReadableWritablePair<string, Uint8Array>)
    .getReader();
  let buffer = '';
  // a read that outlived a timeout is the next one's: its chunk must not be lost
  let reading: Promise<ReadableStreamReadResult<string>> | undefined;
  const take = (): unknown => {
    for (let end = buffer.indexOf('\n\n'); end >= 0; end = buffer.indexOf('\n\n')) {
      const lines = buffer.slice(0, end).split('\n');
      buffer = buffer.slice(end + 2);
      const data = lines.filter((line) => line.startsWith('data:')).map((line) => line.slice(5).trimStart());
      if (data.join('')) return JSON.parse(data.join('\n')); // an event without data (priming, a comment) is no message
    }
    return undefined;
  };
  const close = () => reader.cancel().catch(() => undefined);
  closers.push(close);
  return {
    close,
    next: async (ms = 10_000): Promise<any> => {
      const deadline = Date.now() + ms;
      for (;;) {
        const message = take();
        if (message !== undefined) return message;
        reading ??= reader.read();
        let timer: NodeJS.Timeout | undefined;
        const timeout = new Promise<'timeout'>((resolve) => {
          timer = setTimeout(() => resolve('timeout'), Math.max(0, deadline - Date.now()));
        });
        const read = await Promise.race([reading, timeout]);
        clearTimeout(timer);
        if (read === 'timeout') throw new Error(`no message within ${ms} ms`);
        reading = undefined;
        if (read.done) throw new Error('the stream ended');
        buffer += read.value;
      }
    },
  };
}

/** The JSON-RPC response of a POST: its JSON body, or the first response on its SSE stream. */
async function answerOf(res: Response): Promise<any> {
  if (!res.headers.get('content-type')?.startsWith('text/event-stream')) return res.json();
  const events = sse(res);
  try {
    for (;;) {
      const message = await events.next();
      if ('result' in message || 'error' in message) return message;
    }
  } finally {
    await events.close();
  }
}

/** The text of a tool result. */
const text = (result: unknown) => (((result as { content?: unknown }).content ?? []) as { text?: string }[]).map((c) => c.text).join('');

/** A raw tools/call; the text of its result. */
const callTool = async (agentKey: string, name: string, target: Target = {}) =>
  text(
    (await answerOf(await post(agentKey, { jsonrpc: '2.0', id: 3, method: 'tools/call', params: { name, arguments: {} } }, target))).result,
  );

async function expectSessionNotFound(res: Response, what: string): Promise<void> {
  expect(res.status, what).toBe(404);
  expect(await res.json(), what).toMatchObject({ jsonrpc: '2.0', error: { data: { code: 'session_not_found' } } });
}

interface Connected {
  client: Client;
  transport: StreamableHTTPClientTransport;
  /** Each HTTP answer the client got: the GET stream and the DELETE are otherwise invisible to a test. */
  seen: { method: string; status: number; type: string | null }[];
}

/** An unmodified SDK client on /mcp/up (or `path`), declaring `capabilities`. */
async function connect(agentKey: string, capabilities: ClientCapabilities = {}, path?: string): Promise<Connected> {
  const seen: Connected['seen'] = [];
  const transport = new StreamableHTTPClientTransport(new URL(endpoint({ path })), {
    requestInit: { headers: { authorization: `Bearer ${agentKey}` } },
    fetch: async (url, init) => {
      const res = await fetch(url, init);
      seen.push({ method: init?.method ?? 'GET', status: res.status, type: res.headers.get('content-type') });
      return res;
    },
  });
  const client = new Client({ name: 'sessions-test', version: '1.0.0' }, { capabilities });
  clients.push(client);
  await client.connect(transport);
  return { client, transport, seen };
}

/** The id of the upstream session a client's calls run on. */
const whoami = async (client: Client) => text(await client.callTool({ name: 'whoami', arguments: {} }));
/** Which of sampling, elicitation and roots the upstream was declared. */
const mirrored = (capabilities: ClientCapabilities | undefined) =>
  Object.keys(capabilities ?? {})
    .filter((name) => MIRRORED.includes(name))
    .sort();

/** Sends with `send` until `got` answers something (at most 10 s): a stream may open just after a send. */
const resendUntil = <T>(send: () => Promise<unknown>, got: () => T | undefined) =>
  eventually(async () => {
    if (got() === undefined) await send();
    await new Promise((resolve) => setTimeout(resolve, 200));
    return got();
  });

describe('client sessions', () => {
  it('answers initialize with an Mcp-Session-Id (wms_…) that serves later requests, and an SDK client keeps it', async () => {
    const ws = await workspace();
    const [first, second] = [await initialize(ws.agentKey), await initialize(ws.agentKey)];
    expect(first).toMatch(SESSION_ID);
    expect(second).toMatch(SESSION_ID);
    expect(second).not.toBe(first);
    expect(await callTool(ws.agentKey, 'whoami', { sessionId: first })).toMatch(UPSTREAM_ID);
    expect((await connect(ws.agentKey)).transport.sessionId).toMatch(SESSION_ID);
  });

  it('answers an unknown session id 404 session_not_found, on POST, GET and DELETE', async () => {
    const ws = await workspace();
    expect(await initialize(ws.agentKey)).toMatch(SESSION_ID); // sessions exist: the 404 is not that of a stateless gateway
    const sessionId = `wms_${randomBytes(16).toString('base64url')}`;
    await expectSessionNotFound(await post(ws.agentKey, TOOLS_LIST, { sessionId }), 'POST');
    await expectSessionNotFound(await openStream(ws.agentKey, { sessionId }), 'GET');
    await expectSessionNotFound(await fetch(endpoint({}), { method: 'DELETE', headers: headers(ws.agentKey, sessionId) }), 'DELETE');
  });

  it('keeps a session to its agent and endpoint: another agent, /mcp/other and /mcp get 404, and it still serves its own', async () => {
    const ws = await workspace();
    const otherKey = newAgentKey();
    expect((await ws.api('POST', '/agents', { name: 'Other', slug: 'other', provider: 'local', api_key: otherKey })).status).toBe(201);
    expect((await ws.api('POST', '/mcp-servers', { name: 'Other', slug: 'other', transport_url: upstream.url })).status).toBe(201);
    const sessionId = await initialize(ws.agentKey);
    expect(sessionId).toMatch(SESSION_ID);
    for (const [key, path, what] of [
      [otherKey, '/up', 'another agent'],
      [ws.agentKey, '/other', 'another server'],
      [ws.agentKey, '', 'the aggregate'],
    ] as const)
      await expectSessionNotFound(await post(key, TOOLS_LIST, { sessionId, path }), what);
    const listed = await answerOf(await post(ws.agentKey, TOOLS_LIST, { sessionId }));
    expect(listed.result.tools.map((tool: { name: string }) => tool.name)).toContain('whoami');
  });

  it('still serves requests without a session id (a raw tools/call, no initialize); a GET without one is 405', async () => {
    const ws = await workspace();
    const res = await post(ws.agentKey, { jsonrpc: '2.0', id: 3, method: 'tools/call', params: { name: 'whoami', arguments: {} } });
    expect(res.status).toBe(200);
    expect(res.headers.get('mcp-session-id')).toBeNull();
    expect(text((await answerOf(res)).result)).toMatch(UPSTREAM_ID);
    const get = await openStream(ws.agentKey);
    expect(get.status).toBe(405);
    await get.body?.cancel();
  });

  it('ends a session on DELETE: 204 to the SDK client, 404 afterwards, and its upstream session is DELETEd', async () => {
    const ws = await workspace();
    const { client, transport, seen } = await connect(ws.agentKey);
    const sessionId = transport.sessionId;
    expect(sessionId).toMatch(SESSION_ID); // without one, terminateSession sends nothing
    const upstreamId = await whoami(client);
    await transport.terminateSession();
    expect(seen.filter((answer) => answer.method === 'DELETE').map((answer) => answer.status)).toEqual([204]);
    await expectSessionNotFound(await post(ws.agentKey, TOOLS_LIST, { sessionId }), 'after DELETE');
    await eventually(() => upstream.deleted().includes(upstreamId) || undefined);
  });
});

describe('upstream sessions of a client session', () => {
  it.each([
    [{ sampling: {} }, ['sampling']],
    [{}, []],
    [{ sampling: {}, elicitation: {}, roots: {} }, MIRRORED],
  ] as [ClientCapabilities, string[]][])(
    'declares to the upstream exactly what the client declared: %j',
    async (capabilities, expected) => {
      const ws = await workspace();
      const { client } = await connect(ws.agentKey, capabilities);
      const declared = upstream.capabilities(await whoami(client));
      expect(declared).toBeDefined();
      expect(mirrored(declared)).toEqual(expected);
    },
  );

  it('declares none of sampling, elicitation, roots for a request without a session', async () => {
    const ws = await workspace();
    const upstreamId = await callTool(ws.agentKey, 'whoami');
    expect(upstreamId).toMatch(UPSTREAM_ID);
    expect(upstream.capabilities(upstreamId)).toBeDefined();
    expect(mirrored(upstream.capabilities(upstreamId))).toEqual([]);
  });

  it('gives two SDK clients of one agent an upstream session each: a note kept in one is not seen in the other', async () => {
    const ws = await workspace();
    const [a, b] = [await connect(ws.agentKey), await connect(ws.agentKey)];
    const [idA, idB] = [await whoami(a.client), await whoami(b.client)];
    expect(idA).not.toBe(idB);
    expect(upstream.sessions()).toEqual(expect.arrayContaining([idA, idB]));
    await a.client.callTool({ name: 'set_note', arguments: { note: 'from a' } });
    expect(text(await b.client.callTool({ name: 'get_note', arguments: {} }))).toBe('(none)');
    expect(text(await a.client.callTool({ name: 'get_note', arguments: {} }))).toBe('from a');
    expect(await whoami(a.client)).toBe(idA); // a client session keeps its upstream session
  });
});

describe('the GET stream: what the upstream sends outside any request', () => {
  it('answers a GET with the session id with a text/event-stream that stays open', async () => {
    const ws = await workspace();
    const sessionId = await initialize(ws.agentKey);
    expect(sessionId).toMatch(SESSION_ID);
    const res = await openStream(ws.agentKey, { sessionId });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const events = sse(res);
    await expect(events.next(500)).rejects.toThrow(/no message within/); // neither ended nor sent anything
    await events.close();
  });

  it.each([
    ['its agent is suspended', (ws: Workspace) => ws.api('PATCH', '/agents/bot', { status: 'suspended' })],
    ['its key is replaced', (ws: Workspace) => ws.api('PATCH', '/agents/bot', { api_key: newAgentKey() })],
    [
      'its session is ended by DELETE',
      (ws: Workspace, sessionId: string) => fetch(endpoint({}), { method: 'DELETE', headers: headers(ws.agentKey, sessionId) }),
    ],
  ])('ends the GET stream once %s (checked again at every keep-alive)', async (_what, change) => {
    const ws = await workspace();
    const sessionId = (await initialize(ws.agentKey)) as string;
    const events = sse(await openStream(ws.agentKey, { sessionId }));
    await expect(events.next(3 * STREAM_CHECK_MS)).rejects.toThrow(/no message within/); // open while allowed, keep-alives and all
    expect((await change(ws, sessionId)).status).toBeLessThan(300);
    await expect(events.next(20 * STREAM_CHECK_MS)).rejects.toThrow('the stream ended');
  });

  it("relays resources/updated to the client that subscribed, on the SDK client's own GET stream, and not to another", async () => {
    const ws = await workspace();
    const [a, b] = [await connect(ws.agentKey), await connect(ws.agentKey)];
    const updates = { a: [] as string[], b: [] as string[] };
    a.client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => void updates.a.push(n.params.uri));
    b.client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => void updates.b.push(n.params.uri));
    await a.client.subscribeResource({ uri: WATCHED });
    const idA = await whoami(a.client);
    await whoami(b.client); // b has an upstream session too, not subscribed
    await eventually(() => a.seen.find((s) => s.method === 'GET' && s.status === 200 && s.type?.startsWith('text/event-stream')));
    await eventually(() => upstream.streaming().includes(idA) || undefined); // Warden listens on the upstream session's GET stream
    await resendUntil(
      () => upstream.resourceUpdated(WATCHED),
      () => updates.a[0],
    );
    expect(new Set(updates.a)).toEqual(new Set([WATCHED]));
    expect(await upstream.resourceUpdated(WATCHED)).toEqual([idA]);
    await new Promise((resolve) => setTimeout(resolve, 300)); // what b would get arrives as fast as a's
    expect(updates.b).toEqual([]);
  });

  it('names the resource of an update as the aggregate /mcp names it (its server prefix)', async () => {
    const ws = await workspace();
    const { client } = await connect(ws.agentKey, {}, '');
    const updates: string[] = [];
    client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => void updates.push(n.params.uri));
    await client.subscribeResource({ uri: `up__${WATCHED}` });
    await resendUntil(
      () => upstream.resourceUpdated(WATCHED),
      () => updates[0],
    );
    expect(new Set(updates)).toEqual(new Set([`up__${WATCHED}`]));
  });

  it('relays tools/list_changed, resources/list_changed and log messages sent outside any request', async () => {
    const ws = await workspace();
    const { client } = await connect(ws.agentKey);
    const got = new Set<string>();
    client.setNotificationHandler(ToolListChangedNotificationSchema, () => void got.add('tools'));
    client.setNotificationHandler(ResourceListChangedNotificationSchema, () => void got.add('resources'));
    client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => void got.add(`log:${n.params.data}`));
    const upstreamId = await whoami(client);
    const expected = ['tools', 'resources', 'log:between calls'];
    await resendUntil(
      async () => {
        await upstream.notify(upstreamId, { method: 'notifications/tools/list_changed' });
        await upstream.notify(upstreamId, { method: 'notifications/resources/list_changed' });
        await upstream.notify(upstreamId, { method: 'notifications/message', params: { level: 'info', data: 'between calls' } });
      },
      () => (expected.every((name) => got.has(name)) ? true : undefined),
    );
    expect([...got].sort()).toEqual([...expected].sort());
  });
});

describe('questions an upstream asks outside any request (on its GET stream)', () => {
  /** An SDK client declaring elicitation, answering with `name`, counting the times it is asked. */
  async function elicitingClient(ws: Workspace, name = 'ada') {
    const asked = { count: 0 };
    const { client } = await connect(ws.agentKey, { elicitation: {} });
    client.setRequestHandler(ElicitRequestSchema, async () => {
      asked.count++;
      return { action: 'accept', content: { name } };
    });
    const upstreamId = await whoami(client);
    // Warden listens on the upstream session's GET stream, the client on its own
    await eventually(() => upstream.streaming().includes(upstreamId) || undefined);
    return { client, asked, upstreamId };
  }

  it('reaches the client that owns the upstream session, decided as mcp.elicitation, and the upstream gets its answer', async () => {
    const ws = await workspace();
    const { asked, upstreamId } = await elicitingClient(ws);
    const other = await elicitingClient(ws, 'not me');
    const answer = await eventually(async () => {
      const got = await upstream.ask(upstreamId, 'between calls: who?', 3_000);
      return 'action' in got ? got : undefined; // the client's GET stream may open just after
    });
    expect(answer).toEqual({ action: 'accept', content: { name: 'ada' } });
    expect(asked.count).toBeGreaterThanOrEqual(1);
    expect(other.asked.count).toBe(0);
    const events = await ws.events('mcp.elicitation');
    expect(events.some((e) => e.result === 'allowed' && e.agent === 'bot')).toBe(true);
  });

  it('a question asked on the stream of a request that cannot carry it (prompts/get) is refused at once, not sent to the GET stream', async () => {
    const ws = await workspace();
    const { client, asked } = await elicitingClient(ws);
    const started = Date.now();
    const prompt = await client.getPrompt({ name: 'ask_in_prompt' });
    expect(JSON.stringify(prompt.messages)).toMatch(/refused: .*cannot relay elicitation\/create/);
    expect(Date.now() - started).toBeLessThan(4_000); // not left waiting for an answer
    expect(asked.count).toBe(0);
    expect(await ws.events('mcp.elicitation')).toEqual([]);
  });

  it('a policy blocks mcp.elicitation: the upstream gets a JSON-RPC error naming it, the client is never asked', async () => {
    const ws = await workspace([{ name: 'No questions', rules: [{ match: { action: ['mcp.elicitation'] }, effect: 'block' }] }]);
    const { asked, upstreamId } = await elicitingClient(ws);
    const answer = await upstream.ask(upstreamId, 'who?', 5_000);
    expect(answer).toMatchObject({ error: expect.stringMatching(/No questions/) });
    expect(asked.count).toBe(0);
    expect((await ws.events('mcp.elicitation')).some((e) => e.result === 'blocked')).toBe(true);
  });
});

describe('roots/list, relayed as mcp.roots', () => {
  const NO_ROOTS = { name: 'No roots', rules: [{ match: { action: ['mcp.roots'] }, effect: 'block' }] };

  /** An SDK client declaring roots, counting the times it is asked. */
  async function rootsClient(ws: Workspace) {
    const asked = { count: 0 };
    const { client } = await connect(ws.agentKey, { roots: {} });
    client.setRequestHandler(ListRootsRequestSchema, async () => {
      asked.count++;
      return { roots: [{ uri: 'file:///home/ada/project', name: 'project' }] };
    });
    return { client, asked };
  }

  it('asks the client that declared roots during a call, answers the upstream its roots, and audits it', async () => {
    const ws = await workspace();
    const { client, asked } = await rootsClient(ws);
    expect(text(await client.callTool({ name: 'list_roots', arguments: {} }))).toBe('file:///home/ada/project');
    expect(asked.count).toBe(1);
    expect((await ws.events('mcp.roots')).some((e) => e.result === 'allowed')).toBe(true);
  });

  it("tells the session's upstream when the client's roots change (notifications/roots/list_changed), and no other session", async () => {
    const ws = await workspace();
    const { client } = await connect(ws.agentKey, { roots: { listChanged: true } });
    const other = (await connect(ws.agentKey, { roots: { listChanged: true } })).client;
    // each client's upstream session exists once it made a request
    const mine = await whoami(client);
    const theirs = await whoami(other);
    await client.sendRootsListChanged();
    expect(await eventually(() => (upstream.rootsChanged().includes(mine) ? true : undefined))).toBe(true);
    expect(upstream.rootsChanged()).not.toContain(theirs);
  });

  it('a policy blocks mcp.roots: the upstream receives a JSON-RPC error, the client is never asked', async () => {
    const ws = await workspace([NO_ROOTS]);
    const { client, asked } = await rootsClient(ws);
    expect(text(await client.callTool({ name: 'list_roots', arguments: {} }))).toMatch(/^roots\/list failed: .*No roots/);
    expect(asked.count).toBe(0);
    expect((await ws.events('mcp.roots')).some((e) => e.result === 'blocked')).toBe(true);
  });
});

describe.skipIf(!process.env.DATABASE_URL)('two Warden processes on one PostgreSQL database (needs DATABASE_URL)', () => {
  const other = useSecondProcess(server, MASTER_KEY);

  it('routes an answer POSTed to the other process back to the question this one relayed, and the call completes', async () => {
    const ws = await workspace();
    // a session declaring elicitation when there are sessions (not asserted: this test is about the answer's route)
    const sessionId = await initialize(ws.agentKey, {}, { elicitation: {} });
    const call = await post(
      ws.agentKey,
      { jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name: 'elicit', arguments: { message: 'who?' } } },
      { sessionId },
    );
    expect(call.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const events = sse(call);
    const question = await events.next();
    expect(question).toMatchObject({ method: 'elicitation/create', id: expect.stringMatching(/^warden-/), params: { message: 'who?' } });
    // no session header: the answer is found by its id and agent, whichever process holds the session
    const answer = { jsonrpc: '2.0', id: question.id, result: { action: 'accept', content: { name: 'ada' } } };
    expect((await post(ws.agentKey, answer, { base: other().url })).status).toBe(202);
    expect(await events.next(15_000)).toMatchObject({ id: 7, result: { content: [{ text: 'action=accept; content={"name":"ada"}' }] } });
  });
});
