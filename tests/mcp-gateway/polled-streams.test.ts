/**
 * Polling passed on (SEP-1699, polled-streams.ts): the reference upstream, serving 2025-11-25
 * only, closes its stream of a `test_reconnection` call mid-call and answers on the resumed
 * stream. Through Warden, a client session of 2025-11-25 sees the same: a priming event (an id
 * and a `retry`) first, its POST stream closed, and the answer on its GET with that
 * `Last-Event-ID`, from this process or another; no other session may resume it (404, as for a
 * stream no process keeps). A client of an
 * older revision (no priming events) gets the answer on its POST stream.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ConformanceUpstream, startConformanceUpstream } from '../support/conformance-upstream.ts';
import { keyFor, useTestServer } from '../support/server.ts';
import { useSecondProcess } from './support.ts';

const spec = JSON.parse(readFileSync(new URL('../../spec/dist/openapi.json', import.meta.url), 'utf8'));
const ALL: string = spec.components.schemas.Permission.enum.join(',');
/** Shared with the second process, as every process of one deployment shares it. */
const MASTER_KEY = randomBytes(32).toString('base64');
const server = useTestServer({ egressAllowlist: ['127.0.0.1/32'], masterKey: MASTER_KEY });
let upstream: ConformanceUpstream;
let workspaces = 0;

beforeAll(async () => {
  upstream = await startConformanceUpstream({ modern: false });
});
afterAll(async () => {
  await upstream?.close();
});

/** A workspace with the upstream registered as `up`, and an agent key. */
async function agentKey(): Promise<string> {
  const key = await keyFor(server, ALL, `polled-${++workspaces}`);
  const api = (path: string, body: unknown) => server.api('POST', path as '/agents', { key, body, unchecked: true });
  expect((await api('/mcp-servers', { name: 'Up', slug: 'up', transport_url: upstream.url })).status).toBe(201);
  const agent = `ak_polled_${workspaces}_${randomBytes(8).toString('hex')}`;
  expect((await api('/agents', { name: 'Bot', slug: 'bot', provider: 'local', api_key: agent })).status).toBe(201);
  return agent;
}

const headers = (agent: string, version: string, session?: string) => ({
  authorization: `Bearer ${agent}`,
  'content-type': 'application/json',
  accept: 'application/json, text/event-stream',
  'mcp-protocol-version': version,
  ...(session ? { 'mcp-session-id': session } : {}),
});

/** A client session of revision `version` (initialize, then initialized). */
async function session(agent: string, version: string, base = server.url): Promise<string> {
  const init = { protocolVersion: version, capabilities: {}, clientInfo: { name: 'polled-test', version: '1.0.0' } };
  const opened = await fetch(`${base}/mcp/up`, {
    method: 'POST',
    headers: headers(agent, version),
    body: JSON.stringify({ jsonrpc: '2.0', id: 0, method: 'initialize', params: init }),
  });
  const id = opened.headers.get('mcp-session-id') as string;
  await opened.text();
  expect(id).toBeTruthy();
  const initialized = await fetch(`${base}/mcp/up`, {
    method: 'POST',
    headers: headers(agent, version, id),
    body: JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }),
  });
  await initialized.text();
  return id;
}

interface SseEvent {
  id?: string;
  retry?: string;
  data: string;
}
/** The events of a whole SSE answer (it ends when the server ends it). */
async function events(res: Response): Promise<SseEvent[]> {
  const text = await res.text();
  return text
    .split('\n\n')
    .filter((block) => block.trim() !== '' && !block.startsWith(':'))
    .map((block) => {
      const event: SseEvent = { data: '' };
      for (const line of block.split('\n')) {
        const [field, ...rest] = line.split(':');
        const value = rest.join(':').replace(/^ /, '');
        if (field === 'id') event.id = value;
        else if (field === 'retry') event.retry = value;
        else if (field === 'data') event.data += value;
      }
      return event;
    });
}

const CALL = { jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name: 'test_reconnection', arguments: {} } };
const ANSWER = 'Reconnection test completed: the answer was replayed on the resumed stream.';
const answerIn = (list: SseEvent[]) =>
  list.map((e) => (e.data ? JSON.parse(e.data) : {})).find((m) => m.id === 7)?.result?.content?.[0]?.text as string | undefined;

/** POSTs the call in `sessionId` and returns what its POST stream carried. */
async function call(agent: string, sessionId: string, version = '2025-11-25', base = server.url) {
  const res = await fetch(`${base}/mcp/up`, { method: 'POST', headers: headers(agent, version, sessionId), body: JSON.stringify(CALL) });
  // an answer with nothing before it may come as JSON: one event of it
  if (res.headers.get('content-type')?.startsWith('application/json')) return [{ data: await res.text() }];
  return events(res);
}

/** GETs the session's stream resuming after `lastEventId`; the events read until `stop` (an AbortSignal) or the stream ends. */
async function resume(agent: string, sessionId: string, lastEventId: string, base = server.url, signal?: AbortSignal) {
  const res = await fetch(`${base}/mcp/up`, {
    headers: { ...headers(agent, '2025-11-25', sessionId), accept: 'text/event-stream', 'last-event-id': lastEventId },
    signal,
  });
  expect(res.status).toBe(200);
  return events(res).catch(() => [] as SseEvent[]);
}

describe("an upstream's polling, passed on to the client", () => {
  it('primes the POST stream, closes it, and answers on the GET that resumes it', async () => {
    const agent = await agentKey();
    const sessionId = await session(agent, '2025-11-25');
    const posted = await call(agent, sessionId);
    expect(posted.length).toBeGreaterThan(0);
    expect(posted[0]).toMatchObject({ id: expect.stringMatching(/^poll_[A-Za-z0-9_-]{22}_0$/), retry: '1000', data: '' });
    expect(answerIn(posted)).toBeUndefined();
    const resumed = await resume(agent, sessionId, posted[0]?.id as string);
    expect(answerIn(resumed)).toBe(ANSWER);
    // resumed again from the same event (a client whose connection dropped): the answer again
    expect(answerIn(await resume(agent, sessionId, posted[0]?.id as string))).toBe(ANSWER);
  });

  it('is resumed only by the session and agent the call belongs to', async () => {
    const agent = await agentKey();
    const [mine, theirs] = [await session(agent, '2025-11-25'), await session(agent, '2025-11-25')];
    const posted = await call(agent, mine);
    const primed = posted[0]?.id as string;
    // another session of the same agent naming the event is refused: no stream of its own has it
    const foreign = await fetch(`${server.url}/mcp/up`, {
      headers: { ...headers(agent, '2025-11-25', theirs), accept: 'text/event-stream', 'last-event-id': primed },
    });
    expect(foreign.status).toBe(404);
    await foreign.text();
    expect(answerIn(await resume(agent, mine, primed))).toBe(ANSWER);
  });

  it('answers 404 to a GET resuming a stream no process keeps (its answer is not coming)', async () => {
    const agent = await agentKey();
    const sessionId = await session(agent, '2025-11-25');
    const res = await fetch(`${server.url}/mcp/up`, {
      headers: { ...headers(agent, '2025-11-25', sessionId), accept: 'text/event-stream', 'last-event-id': `poll_${'A'.repeat(22)}_0` },
    });
    expect(res.status).toBe(404);
    expect(await res.text()).toMatch(/gone/);
  });

  it('answers a client of an older revision on its POST stream: it cannot resume, so it is not told to', async () => {
    const agent = await agentKey();
    const sessionId = await session(agent, '2025-06-18');
    const posted = await call(agent, sessionId, '2025-06-18');
    expect(posted.some((e) => e.id?.startsWith('poll_'))).toBe(false);
    expect(answerIn(posted)).toBe(ANSWER);
  });
});

describe.skipIf(!process.env.DATABASE_URL)('polling across two Warden processes (needs DATABASE_URL)', () => {
  const other = useSecondProcess(server, MASTER_KEY);

  it('answers on a GET to another process than the one running the call', async () => {
    const agent = await agentKey();
    const sessionId = await session(agent, '2025-11-25');
    const posted = await call(agent, sessionId);
    const resumed = await resume(agent, sessionId, posted[0]?.id as string, other().url);
    expect(answerIn(resumed)).toBe(ANSWER);
  });
});
