/**
 * Webhook delivery as a receiver sees it: Standard Webhooks signatures (checked with the
 * `standardwebhooks` library and its known-answer vector), the payload of each event type,
 * subscriptions, retries, 3xx/410 handling, paused endpoints and replay, secret rotation,
 * URL rules and the encrypted secret at rest. Receivers are node:http servers on 127.0.0.1,
 * allowed through the egress guard by WARDEN_EGRESS_ALLOWLIST=127.0.0.1/32.
 */
import { createServer, type IncomingHttpHeaders, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { sql } from 'kysely';
import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ApiResponse, type DashboardSession, dashboardLogin, startTestServer, type TestServer } from '../support/server.ts';

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer({ egressAllowlist: ['127.0.0.1/32'] });
});
const receivers: Receiver[] = [];
afterAll(async () => {
  await server?.close();
  await Promise.all(receivers.map((r) => r.close()));
});

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
/** The harness's schedule ('0,100ms,200ms'): three attempts in all. */
const SCHEDULE_LENGTH = 3;

// ---------------------------------------------------------------------------------------
// Receivers

interface Received {
  headers: IncomingHttpHeaders;
  body: string;
  payload: any;
  at: number;
}

interface Answer {
  status: number;
  headers?: Record<string, string>;
  body?: string;
}

interface Receiver {
  url: string;
  received: Received[];
  /** Decides the answer to the n-th request (1-based); 'hang' never answers. */
  answer: (n: number) => Answer | 'hang' | Promise<Answer>;
  close(): Promise<void>;
}

async function startReceiver(answer: Receiver['answer'] = () => ({ status: 200, body: 'ok' })): Promise<Receiver> {
  const received: Received[] = [];
  const receiver: Receiver = { url: '', received, answer, close: async () => undefined };
  const http = createServer((req, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', async () => {
      const body = Buffer.concat(chunks).toString('utf8');
      let payload: unknown;
      try {
        payload = JSON.parse(body);
      } catch {
        payload = undefined;
      }
      received.push({ headers: req.headers, body, payload, at: Date.now() });
      const decided = await receiver.answer(received.length);
      if (decided === 'hang') return; // closed by close()
      const { status, headers, body: answerBody } = decided;
      res.writeHead(status, { 'content-type': 'text/plain', ...headers }).end(answerBody ?? '');
    });
  });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  receiver.url = `http://127.0.0.1:${(http.address() as AddressInfo).port}/hook`;
  receiver.close = () =>
    new Promise<void>((resolve) => {
      http.close(() => resolve());
      http.closeAllConnections();
    });
  receivers.push(receiver);
  return receiver;
}

const webhookHeaders = (r: Received) => ({
  'webhook-id': String(r.headers['webhook-id']),
  'webhook-timestamp': String(r.headers['webhook-timestamp']),
  'webhook-signature': String(r.headers['webhook-signature']),
});

/** Verifies a delivery with the Standard Webhooks library; returns the verified payload. */
function verify(r: Received, secret: string): any {
  return new Webhook(secret).verify(r.body, webhookHeaders(r));
}

/** Polls until `probe` returns something truthy; fails after `timeoutMs`. */
async function until<T>(what: string, probe: () => T | Promise<T>, timeoutMs = 10_000): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value) return value as NonNullable<T>;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(25);
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Enough worker rounds (pollMs 50) for anything due to have been sent. */
const QUIET_MS = 600;

// ---------------------------------------------------------------------------------------
// Workspaces, endpoints and the dashboard API

interface Workspace {
  slug: string;
  id: string;
  key: string;
  dash: DashboardSession;
  api: (method: string, path: string, body?: unknown) => Promise<ApiResponse>;
}

let workspaceCount = 0;
async function freshWorkspace(): Promise<Workspace> {
  const slug = `hooks-${++workspaceCount}`;
  const created = await server.admin('workspaces.create', { slug });
  const { key } = await server.admin('keys.create', { workspace: slug, permissions: '*' });
  return {
    slug,
    id: created.id,
    key,
    dash: await dashboardLogin(new URL(server.url).origin, key),
    api: (method, path, body) => server.api(method, path, { key, body }),
  };
}

async function addEndpoint(ws: Workspace, receiver: Receiver, events = '*'): Promise<{ id: string; secret: string }> {
  const created = await server.admin('webhooks.create', { workspace: ws.slug, url: receiver.url, events });
  expect(created.id).toMatch(UUID);
  expect(created.secret).toMatch(/^whsec_/);
  return { id: created.id, secret: created.secret };
}

async function deliveries(ws: Workspace, endpointId: string): Promise<any[]> {
  const res = await ws.dash.call('GET', `/webhooks/${endpointId}/deliveries?limit=100`);
  expect(res.status).toBe(200);
  return res.body.data;
}

const ofType = (receiver: Receiver, type: string) => receiver.received.filter((r) => r.payload?.type === type);

const createAgent = async (ws: Workspace, name: string) => {
  const res = await ws.api('POST', '/agents', { name, provider: 'local' });
  expect(res.status).toBe(201);
  return res.body.data;
};

// ---------------------------------------------------------------------------------------

describe('Standard Webhooks signatures (standardwebhooks library)', () => {
  it('matches the published known-answer vector', () => {
    const secret = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
    const signature = new Webhook(secret).sign('msg_p5jXN8AQM9LWM0D4loKWxJek', new Date(1614265330 * 1000), '{"test": 2432232314}');
    expect(signature).toBe('v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=');
  });

  it('signs every delivery with webhook-id (the payload id), a current webhook-timestamp and a v1 signature that verifies', async () => {
    const ws = await freshWorkspace();
    const receiver = await startReceiver();
    const { secret } = await addEndpoint(ws, receiver);
    const before = Math.floor(Date.now() / 1000);
    await createAgent(ws, 'Signed');
    const [r] = await until('a delivery', () => (receiver.received.length ? receiver.received : undefined));
    const got = r as Received;
    expect(got.headers['content-type']).toMatch(/^application\/json/);
    expect(got.headers['webhook-id']).toBe(got.payload.id);
    expect(got.headers['webhook-id']).toMatch(UUID);
    const timestamp = Number(got.headers['webhook-timestamp']);
    expect(Number.isInteger(timestamp)).toBe(true);
    expect(timestamp).toBeGreaterThanOrEqual(before - 1);
    expect(timestamp).toBeLessThanOrEqual(Math.ceil(Date.now() / 1000) + 1);
    expect(got.headers['webhook-signature']).toMatch(/^v1,[A-Za-z0-9+/]+={0,2}$/);
    expect(verify(got, secret)).toEqual(got.payload);
    // Another secret, or a changed body, does not verify.
    expect(() => new Webhook('whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=').verify(got.body, webhookHeaders(got))).toThrow();
    expect(() => new Webhook(secret).verify(got.body.replace('Signed', 'Forged'), webhookHeaders(got))).toThrow();
  });
});

describe('event payloads: {id, type, created_at, workspace_id, data}', () => {
  let ws: Workspace;
  let receiver: Receiver;
  let secret: string;
  beforeAll(async () => {
    ws = await freshWorkspace();
    receiver = await startReceiver();
    secret = (await addEndpoint(ws, receiver)).secret;
  });

  /** Waits for the first delivery of `type` matching `match`, checks envelope and signature, returns the payload. */
  async function delivered(type: string, match: (payload: any) => boolean = () => true) {
    const r = await until(`a ${type} delivery`, () => ofType(receiver, type).find((x) => match(x.payload)));
    expect(Object.keys(r.payload).sort()).toEqual(['created_at', 'data', 'id', 'type', 'workspace_id']);
    expect(r.payload).toMatchObject({ type, workspace_id: ws.id });
    expect(r.payload.id).toMatch(UUID);
    expect(r.payload.created_at).toMatch(ISO);
    expect(Math.abs(Date.parse(r.payload.created_at) - Date.now())).toBeLessThan(60_000);
    expect(r.headers['webhook-id']).toBe(r.payload.id);
    expect(verify(r, secret)).toEqual(r.payload);
    return r.payload;
  }

  it('agent.created (POST /agents) carries the agent as the API returns it', async () => {
    const agent = await createAgent(ws, 'Payload Agent');
    const payload = await delivered('agent.created', (p) => p.data?.agent?.id === agent.id);
    expect(payload.data).toEqual({ agent });
  });

  it('policy.updated fires on POST /policies (change created) and PATCH /policies/{id} (change updated)', async () => {
    const created = await ws.api('POST', '/policies', { name: 'Payload policy', rules: [{ match: { action: ['x.*'] }, effect: 'block' }] });
    expect(created.status).toBe(201);
    const onCreate = await delivered('policy.updated', (p) => p.data?.policy?.id === created.body.data.id && p.data.change === 'created');
    expect(onCreate.data).toEqual({ policy: created.body.data, change: 'created' });

    const patched = await ws.api('PATCH', `/policies/${created.body.data.id}`, { description: 'now described' });
    expect(patched.status).toBe(200);
    const onPatch = await delivered('policy.updated', (p) => p.data?.policy?.id === created.body.data.id && p.data.change === 'updated');
    expect(onPatch.data).toEqual({ policy: patched.body.data, change: 'updated' });
    expect(onPatch.data.policy.version).toBe(2);
    expect(onPatch.id).not.toBe(onCreate.id);
  });

  it('audit.created fires on POST /policy/evaluate and on POST /audit, carrying the audit event', async () => {
    const agent = await createAgent(ws, 'Evaluator');
    const evaluated = await ws.api('POST', '/policy/evaluate', {
      input: { action: 'payload.evaluate', resource: 'r/1', agent: agent.slug },
    });
    expect(evaluated.status).toBe(200);
    const fromEvaluate = await delivered('audit.created', (p) => p.data?.event?.action === 'payload.evaluate');
    expect(fromEvaluate.data.event).toMatchObject({
      action: 'payload.evaluate',
      resource: 'r/1',
      agent: agent.slug,
      result: evaluated.body.data.result,
    });
    expect(fromEvaluate.data.event.id).toMatch(UUID);

    const context = { note: 'quote " backslash \\ emoji 😀 line\u2028sep', nested: { n: 1.5, list: [true, null] } };
    const recorded = await ws.api('POST', '/audit', {
      action: 'payload.recorded',
      result: 'blocked',
      severity: 'high',
      resource: 'r/2',
      user: 'alice',
      context,
    });
    expect(recorded.status).toBe(201);
    const fromAudit = await delivered('audit.created', (p) => p.data?.event?.id === recorded.body.data.id);
    // The payload is the event as GET /audit-logs shows it, as it was when created (not sealed yet).
    const logs = await ws.api('GET', '/audit-logs?limit=100');
    expect(logs.status).toBe(200);
    const stored = logs.body.data.find((e: { id: string }) => e.id === recorded.body.data.id);
    expect(fromAudit.data).toEqual({ event: { ...stored, sequence: null, hash: null } });
    expect(fromAudit.data.event).toMatchObject({ action: 'payload.recorded', result: 'blocked', severity: 'high', user: 'alice', context });
    expect(fromAudit.data.event.event_timestamp).toBe(recorded.body.data.event_timestamp);
  });

  it('writes an event only while an endpoint subscribes to its type: none before, none to other types, every one after', async () => {
    const quiet = await freshWorkspace();
    const outboxCount = async (type: string) =>
      Number(
        (
          await sql<{ n: string }>`select count(*) as n from outbox_events where workspace_id = ${quiet.id} and type = ${type}`.execute(
            server.database.db,
          )
        ).rows[0]?.n,
      );
    const unheard = await createAgent(quiet, 'Before any endpoint');
    const evaluate = async (action: string) => {
      const res = await quiet.api('POST', '/policy/evaluate', { input: { action, resource: 'r/q', agent: unheard.slug } });
      expect(res.status).toBe(200);
    };
    await evaluate('before.any.endpoint');
    expect(await outboxCount('agent.created')).toBe(0);
    const receiver = await startReceiver();
    await addEndpoint(quiet, receiver, 'agent.created');
    await evaluate('while.agents.only');
    const agent = await createAgent(quiet, 'Subscribed');
    expect(await outboxCount('audit.created')).toBe(0);
    expect(await outboxCount('agent.created')).toBe(1);

    await addEndpoint(quiet, receiver, 'audit.created');
    await evaluate('after.subscribing');
    expect(await outboxCount('audit.created')).toBe(1);
    await until('both deliveries', () => (receiver.received.length >= 2 ? true : undefined));
    await sleep(QUIET_MS);
    const seen = receiver.received.map((r) => (r.payload.type === 'audit.created' ? r.payload.data.event.action : r.payload.data.agent.id));
    expect(seen.sort()).toEqual([agent.id, 'after.subscribing'].sort());
  });

  it('approval.completed fires on PATCH /approvals/{id}, carrying the decided approval', async () => {
    const approval = await ws.api('POST', '/approvals', { title: 'Payload approval' });
    expect(approval.status).toBe(201);
    expect(ofType(receiver, 'approval.completed')).toHaveLength(0);
    const decided = await ws.api('PATCH', `/approvals/${approval.body.data.id}`, { status: 'rejected', decision_note: 'no' });
    expect(decided.status).toBe(200);
    const payload = await delivered('approval.completed', (p) => p.data?.approval?.id === approval.body.data.id);
    expect(payload.data).toEqual({ approval: decided.body.data });
    expect(payload.data.approval).toMatchObject({ status: 'rejected', decision_note: 'no' });
  });

  it('billing.updated fires when the plan changes (warden billing set-plan), and not when it stays the same', async () => {
    const changed = await server.admin('billing.set-plan', { workspace: ws.slug, plan: 'team' });
    expect(changed).toMatchObject({ plan: 'team', previous_plan: 'free' });
    const payload = await delivered('billing.updated', (p) => p.data?.plan === 'team');
    expect(payload.data).toMatchObject({ plan: 'team', previous_plan: 'free', billing_status: expect.any(String) });

    await server.admin('billing.set-plan', { workspace: ws.slug, plan: 'team' });
    // A later event proves the worker ran past the unchanged plan.
    const marker = await createAgent(ws, 'After same plan');
    await delivered('agent.created', (p) => p.data?.agent?.id === marker.id);
    await sleep(QUIET_MS);
    expect(ofType(receiver, 'billing.updated')).toHaveLength(1);
  });

  it('sends each event once to an endpoint that answers 200', async () => {
    const ids = receiver.received.map((r) => r.headers['webhook-id']);
    expect(ids.length).toBeGreaterThan(5);
    expect(new Set(ids).size).toBe(ids.length);
  });
});

describe('subscriptions', () => {
  it("sends an endpoint subscribed to ['agent.created'] only those, and a '*' endpoint every event", async () => {
    const ws = await freshWorkspace();
    const onlyAgents = await startReceiver();
    const everything = await startReceiver();
    const only = await addEndpoint(ws, onlyAgents, 'agent.created');
    const all = await addEndpoint(ws, everything, '*');

    const agent = await createAgent(ws, 'Subscribed');
    expect((await ws.api('POST', '/policies', { name: 'Subscribed policy' })).status).toBe(201);
    expect((await ws.api('POST', '/audit', { action: 'sub.audit', result: 'blocked' })).status).toBe(201);
    await server.admin('billing.set-plan', { workspace: ws.slug, plan: 'business' });

    await until('all four event types at the * endpoint', () =>
      ['agent.created', 'policy.updated', 'audit.created', 'billing.updated'].every((t) => ofType(everything, t).length > 0),
    );
    await sleep(QUIET_MS);
    expect(onlyAgents.received.map((r) => r.payload.type)).toEqual(['agent.created']);
    expect(onlyAgents.received[0]?.payload.data.agent.id).toBe(agent.id);
    expect(verify(onlyAgents.received[0] as Received, only.secret).type).toBe('agent.created');
    for (const r of everything.received) expect(verify(r, all.secret)).toEqual(r.payload);
    // The same event reaches both endpoints with the same webhook-id.
    expect(ofType(everything, 'agent.created')[0]?.headers['webhook-id']).toBe(onlyAgents.received[0]?.headers['webhook-id']);
  });
});

describe('workspaces', () => {
  it("never sends one workspace's events to another workspace's endpoint", async () => {
    const a = await freshWorkspace();
    const b = await freshWorkspace();
    const atA = await startReceiver();
    const atB = await startReceiver();
    await addEndpoint(a, atA);
    await addEndpoint(b, atB);
    const agentA = await createAgent(a, 'Of A');
    const agentB = await createAgent(b, 'Of B');
    await until('both events', () => atA.received.length >= 1 && atB.received.length >= 1);
    await sleep(QUIET_MS);
    expect(atA.received.map((r) => r.payload.data.agent.id)).toEqual([agentA.id]);
    expect(atB.received.map((r) => r.payload.data.agent.id)).toEqual([agentB.id]);
    expect(atA.received[0]?.payload.workspace_id).toBe(a.id);
    expect(atB.received[0]?.payload.workspace_id).toBe(b.id);
  });
});

describe('retries', () => {
  it('delivers on the 3rd attempt after two 500s, with the same webhook-id each time and the schedule’s backoff', async () => {
    const ws = await freshWorkspace();
    const receiver = await startReceiver((n) => (n <= 2 ? { status: 500, body: 'boom' } : { status: 200, body: 'finally' }));
    const { id, secret } = await addEndpoint(ws, receiver, 'agent.created');
    await createAgent(ws, 'Retried');

    const [delivery] = await until('a succeeded delivery', async () => {
      const list = await deliveries(ws, id);
      return list[0]?.status === 'succeeded' ? list : undefined;
    });
    expect(delivery).toMatchObject({
      status: 'succeeded',
      attempts: 3,
      response_status: 200,
      response_body: 'finally',
      last_error: null,
      next_attempt_at: null,
    });
    expect(receiver.received).toHaveLength(3);
    const ids = receiver.received.map((r) => r.headers['webhook-id']);
    expect(new Set(ids)).toEqual(new Set([delivery.event_id]));
    for (const r of receiver.received) expect(verify(r, secret)).toEqual(r.payload);
    const [first, second, third] = receiver.received.map((r) => r.at) as [number, number, number];
    expect(second - first).toBeGreaterThanOrEqual(95);
    expect(third - second).toBeGreaterThanOrEqual(195);
  });

  it('marks the delivery failed after the schedule is exhausted for a receiver that always answers 500, keeping the first KiB of its answer', async () => {
    const ws = await freshWorkspace();
    const longAnswer = `always down ${'x'.repeat(5000)}`;
    const receiver = await startReceiver(() => ({ status: 500, body: longAnswer }));
    const { id } = await addEndpoint(ws, receiver, 'agent.created');
    await createAgent(ws, 'Never delivered');

    const [delivery] = await until('a failed delivery', async () => {
      const list = await deliveries(ws, id);
      return list[0]?.status === 'failed' ? list : undefined;
    });
    expect(delivery).toMatchObject({
      status: 'failed',
      attempts: SCHEDULE_LENGTH,
      response_status: 500,
      response_body: longAnswer.slice(0, 1024),
      next_attempt_at: null,
    });
    expect(delivery.last_error).toEqual(expect.any(String));
    await sleep(QUIET_MS);
    expect(receiver.received).toHaveLength(SCHEDULE_LENGTH);
    // A failed endpoint is not disabled: later events are still sent.
    const endpoint = await ws.dash.call('GET', `/webhooks/${id}`);
    expect(endpoint.body.data).toMatchObject({ disabled: false, paused: false });
  });

  it('retries a receiver that does not answer within the timeout, then marks the delivery failed', async () => {
    const ws = await freshWorkspace();
    const receiver = await startReceiver(() => 'hang');
    const { id } = await addEndpoint(ws, receiver, 'agent.created');
    await createAgent(ws, 'Timed out');

    // Three attempts of 2 s (the harness's webhookTimeoutMs) plus the backoff.
    const [delivery] = await until(
      'a failed delivery',
      async () => {
        const list = await deliveries(ws, id);
        return list[0]?.status === 'failed' ? list : undefined;
      },
      20_000,
    );
    expect(delivery).toMatchObject({ status: 'failed', attempts: SCHEDULE_LENGTH, response_status: null });
    expect(delivery.last_error).toMatch(/2000 ms|time/i);
    expect(receiver.received).toHaveLength(SCHEDULE_LENGTH);
    expect(new Set(receiver.received.map((r) => r.headers['webhook-id'])).size).toBe(1);
  });

  it('retries on a network error (connection refused), then marks the delivery failed', async () => {
    const ws = await freshWorkspace();
    const closed = await startReceiver();
    await closed.close(); // nothing listens on its port any more
    const { id } = await addEndpoint(ws, closed, 'agent.created');
    await createAgent(ws, 'Refused');

    const [delivery] = await until('a failed delivery', async () => {
      const list = await deliveries(ws, id);
      return list[0]?.status === 'failed' ? list : undefined;
    });
    expect(delivery).toMatchObject({ status: 'failed', attempts: SCHEDULE_LENGTH, response_status: null, response_body: null });
    expect(delivery.last_error).toEqual(expect.any(String));
    expect(delivery.last_error.length).toBeGreaterThan(0);
  });

  it('stops retrying once the endpoint is paused: the pending delivery becomes skipped', async () => {
    const ws = await freshWorkspace();
    let endpointId = '';
    // The first attempt is answered 503 only once the endpoint is paused, so the retry finds it paused.
    const receiver = await startReceiver(async (n) => {
      if (n === 1) await server.admin('webhooks.pause', { workspace: ws.slug, id: endpointId });
      return { status: 503 };
    });
    endpointId = (await addEndpoint(ws, receiver, 'agent.created')).id;
    await createAgent(ws, 'Paused mid-retry');

    const [delivery] = await until('a finished delivery', async () => {
      const list = await deliveries(ws, endpointId);
      return list[0] && list[0].status !== 'pending' ? list : undefined;
    });
    expect(delivery).toMatchObject({ status: 'skipped', attempts: 1, response_status: 503 });
    await sleep(QUIET_MS);
    expect(receiver.received).toHaveLength(1);
  });

  it('treats a 3xx as a failure and never follows it', async () => {
    const ws = await freshWorkspace();
    const target = await startReceiver();
    const redirecting = await startReceiver(() => ({ status: 302, headers: { location: target.url } }));
    const { id } = await addEndpoint(ws, redirecting, 'agent.created');
    await createAgent(ws, 'Redirected');

    const [delivery] = await until('a failed delivery', async () => {
      const list = await deliveries(ws, id);
      return list[0]?.status === 'failed' ? list : undefined;
    });
    expect(delivery).toMatchObject({ status: 'failed', attempts: SCHEDULE_LENGTH, response_status: 302 });
    await sleep(QUIET_MS);
    expect(redirecting.received).toHaveLength(SCHEDULE_LENGTH);
    expect(target.received).toHaveLength(0);
  });
});

describe('410 Gone', () => {
  it('fails the delivery, disables the endpoint and sends it no later event', async () => {
    const ws = await freshWorkspace();
    const gone = await startReceiver(() => ({ status: 410, body: 'gone' }));
    const witness = await startReceiver();
    const { id } = await addEndpoint(ws, gone, 'agent.created');
    await addEndpoint(ws, witness, 'agent.created');
    await createAgent(ws, 'First');

    const [delivery] = await until('a failed delivery', async () => {
      const list = await deliveries(ws, id);
      return list[0]?.status === 'failed' ? list : undefined;
    });
    expect(delivery).toMatchObject({ status: 'failed', attempts: 1, response_status: 410 });
    expect(gone.received).toHaveLength(1);
    const endpoint = await ws.dash.call('GET', `/webhooks/${id}`);
    expect(endpoint.status).toBe(200);
    expect(endpoint.body.data.disabled).toBe(true);

    const later = await createAgent(ws, 'Second');
    await until('the later event at the witness', () => ofType(witness, 'agent.created').find((r) => r.payload.data.agent.id === later.id));
    await sleep(QUIET_MS);
    expect(gone.received).toHaveLength(1);
    expect((await deliveries(ws, id)).filter((d) => d.status !== 'failed' && d.status !== 'skipped')).toEqual([]);
  });

  it('resuming (PATCH paused: false) re-enables an endpoint disabled by a 410', async () => {
    const ws = await freshWorkspace();
    let gone = true;
    const receiver = await startReceiver(() => (gone ? { status: 410 } : { status: 200 }));
    const { id, secret } = await addEndpoint(ws, receiver, 'agent.created');
    await createAgent(ws, 'Before re-enable');
    await until('the endpoint disabled', async () => (await ws.dash.call('GET', `/webhooks/${id}`)).body.data.disabled === true);

    gone = false;
    const resumed = await ws.dash.call('PATCH', `/webhooks/${id}`, { paused: false });
    expect(resumed.status).toBe(200);
    expect(resumed.body.data).toMatchObject({ disabled: false, paused: false });
    const agent = await createAgent(ws, 'After re-enable');
    const got = await until('the event after re-enabling', () => receiver.received.find((r) => r.payload.data.agent.id === agent.id));
    expect(verify(got, secret)).toEqual(got.payload);
  });
});

describe('paused endpoints and replay', () => {
  it('sends a paused endpoint nothing, records its deliveries as skipped, and replays one after resuming with the same webhook-id', async () => {
    const ws = await freshWorkspace();
    const paused = await startReceiver();
    const witness = await startReceiver();
    const { id, secret } = await addEndpoint(ws, paused, 'agent.created');
    await addEndpoint(ws, witness, 'agent.created');
    const pausedView = await server.admin('webhooks.pause', { workspace: ws.slug, id });
    expect(pausedView).toMatchObject({ id, paused: true });

    const agent = await createAgent(ws, 'While paused');
    const atWitness = await until('the event at the witness', () =>
      ofType(witness, 'agent.created').find((r) => r.payload.data.agent.id === agent.id),
    );
    const [skipped] = await until('a skipped delivery', async () => {
      const list = await deliveries(ws, id);
      return list[0]?.status === 'skipped' ? list : undefined;
    });
    expect(skipped).toMatchObject({
      status: 'skipped',
      attempts: 0,
      event_type: 'agent.created',
      event_id: atWitness.headers['webhook-id'],
    });
    await sleep(QUIET_MS);
    expect(paused.received).toHaveLength(0);

    // Resuming does not send what was skipped…
    const resumed = await ws.dash.call('PATCH', `/webhooks/${id}`, { paused: false });
    expect(resumed.status).toBe(200);
    expect(resumed.body.data.paused).toBe(false);
    await sleep(QUIET_MS);
    expect(paused.received).toHaveLength(0);

    // …replaying it does, with the event's webhook-id.
    const replay = await ws.dash.call('POST', `/webhooks/${id}/deliveries/${skipped.id}/replay`);
    expect(replay.status).toBe(202);
    expect(replay.body.data).toMatchObject({ status: 'pending', event_id: skipped.event_id, endpoint_id: id });
    expect(replay.body.data.id).not.toBe(skipped.id);
    const [sent] = await until('the replayed delivery', () => (paused.received.length ? paused.received : undefined));
    expect((sent as Received).headers['webhook-id']).toBe(skipped.event_id);
    expect(verify(sent as Received, secret)).toEqual((sent as Received).payload);
    expect((sent as Received).payload.data.agent.id).toBe(agent.id);
    await until('the replay recorded as succeeded', async () =>
      (await deliveries(ws, id)).find((d) => d.id === replay.body.data.id && d.status === 'succeeded'),
    );

    // After resuming, new events are sent again.
    const next = await createAgent(ws, 'After resume');
    await until('a new event after resuming', () => ofType(paused, 'agent.created').find((r) => r.payload.data.agent.id === next.id));
  });
});

describe('secret rotation', () => {
  it('signs with both the old and the new secret during the overlap, and with the new one only after a rotation with overlap_seconds 0', async () => {
    const ws = await freshWorkspace();
    const receiver = await startReceiver();
    const { id, secret: oldSecret } = await addEndpoint(ws, receiver, 'agent.created');

    const rotated = await ws.dash.call('POST', `/webhooks/${id}/rotate-secret`, { overlap_seconds: 3600 });
    expect(rotated.status).toBe(200);
    const newSecret: string = rotated.body.data.secret;
    expect(newSecret).toMatch(/^whsec_/);
    expect(newSecret).not.toBe(oldSecret);
    expect(Date.parse(rotated.body.data.endpoint.secret_rotating_until)).toBeGreaterThan(Date.now() + 3500_000);

    const a = await createAgent(ws, 'During overlap');
    const during = await until('a delivery during the overlap', () => receiver.received.find((r) => r.payload.data.agent.id === a.id));
    const signatures = String(during.headers['webhook-signature']).split(' ');
    expect(signatures).toHaveLength(2);
    for (const s of signatures) expect(s).toMatch(/^v1,[A-Za-z0-9+/]+={0,2}$/);
    expect(verify(during, oldSecret)).toEqual(during.payload);
    expect(verify(during, newSecret)).toEqual(during.payload);

    const again = await ws.dash.call('POST', `/webhooks/${id}/rotate-secret`, { overlap_seconds: 0 });
    expect(again.status).toBe(200);
    const latest: string = again.body.data.secret;
    expect(again.body.data.endpoint.secret_rotating_until).toBeNull();
    const b = await createAgent(ws, 'After overlap');
    const after = await until('a delivery after the overlap', () => receiver.received.find((r) => r.payload.data.agent.id === b.id));
    expect(String(after.headers['webhook-signature']).split(' ')).toHaveLength(1);
    expect(verify(after, latest)).toEqual(after.payload);
    expect(() => verify(after, newSecret)).toThrow();
    expect(() => verify(after, oldSecret)).toThrow();
  });
});

describe('endpoint URLs', () => {
  let strict: TestServer;
  beforeAll(async () => {
    strict = await startTestServer();
  });
  afterAll(async () => {
    await strict?.close();
  });

  const strictDashboard = () => dashboardLogin(new URL(strict.url).origin, strict.key);

  it('refuses http:// to a target that is not allow-listed with 400 invalid_request', async () => {
    const dash = await strictDashboard();
    const res = await dash.call('POST', '/webhooks', { url: 'http://127.0.0.1:9/hook', events: ['*'] });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('invalid_request');
    expect(res.body.error.message).toMatch(/https/);
    await expect(strict.admin('webhooks.create', { workspace: 'default', url: 'http://127.0.0.1:9/hook', events: '*' })).rejects.toThrow(
      /https/,
    );
  });

  it('refuses https:// to a private address (egress guard) with 400 invalid_request', async () => {
    const dash = await strictDashboard();
    for (const url of ['https://10.0.0.1/hook', 'https://169.254.169.254/latest', 'https://127.0.0.1/hook']) {
      const res = await dash.call('POST', '/webhooks', { url, events: ['*'] });
      expect(res.status, url).toBe(400);
      expect(res.body.error.code).toBe('invalid_request');
    }
    await expect(strict.admin('webhooks.create', { workspace: 'default', url: 'https://10.0.0.1/hook', events: '*' })).rejects.toThrow();
    const list = await dash.call('GET', '/webhooks');
    expect(list.body.data).toEqual([]);
  });

  it('applies the same rules when an endpoint’s URL is changed', async () => {
    const dash = await strictDashboard();
    const created = await dash.call('POST', '/webhooks', { url: 'https://hooks.example.com/ok', events: ['agent.created'] });
    expect(created.status).toBe(201);
    const id = created.body.data.endpoint.id;
    for (const url of ['http://127.0.0.1:9/hook', 'https://10.0.0.1/hook', 'https://[::1]/hook']) {
      const res = await dash.call('PATCH', `/webhooks/${id}`, { url });
      expect(res.status, url).toBe(400);
      expect(res.body.error.code).toBe('invalid_request');
    }
    expect((await dash.call('GET', `/webhooks/${id}`)).body.data.url).toBe('https://hooks.example.com/ok');
    expect((await dash.call('DELETE', `/webhooks/${id}`)).status).toBe(200);
  });

  it('accepts http:// to an allow-listed loopback target', async () => {
    const ws = await freshWorkspace();
    const res = await ws.dash.call('POST', '/webhooks', { url: 'http://127.0.0.1:9/hook', events: ['agent.created'] });
    expect(res.status).toBe(201);
    expect(res.body.data.endpoint).toMatchObject({
      url: 'http://127.0.0.1:9/hook',
      events: ['agent.created'],
      paused: false,
      disabled: false,
    });
    expect(res.body.data.secret).toMatch(/^whsec_/);
  });
});

describe('secrets at rest', () => {
  it('stores the endpoint secret encrypted, never in plaintext', async () => {
    const ws = await freshWorkspace();
    const receiver = await startReceiver();
    const { id, secret } = await addEndpoint(ws, receiver);
    // whsec_ + base64 of at least 24 random bytes
    expect(Buffer.from(secret.slice('whsec_'.length), 'base64').length).toBeGreaterThanOrEqual(24);
    const rotated = await ws.dash.call('POST', `/webhooks/${id}/rotate-secret`, { overlap_seconds: 600 });
    const newSecret: string = rotated.body.data.secret;

    const { rows } = await sql<{ secret_encrypted: string }>`select secret_encrypted from webhook_endpoints where id = ${id}`.execute(
      server.database.db,
    );
    expect(rows).toHaveLength(1);
    const stored = String(rows[0]?.secret_encrypted);
    expect(stored.length).toBeGreaterThan(0);
    const { rows: all } = await sql<Record<string, unknown>>`select * from webhook_endpoints where id = ${id}`.execute(server.database.db);
    const row = JSON.stringify(all);
    for (const plain of [secret, newSecret]) {
      const raw = plain.slice('whsec_'.length);
      expect(stored).not.toContain(raw);
      expect(row).not.toContain(raw);
      expect(row).not.toContain(Buffer.from(raw, 'base64').toString('hex'));
      expect(row).not.toContain(Buffer.from(raw, 'base64').toString('base64url'));
    }
  });
});
