/**
 * Webhook delivery as a receiver sees it: the Standard Webhooks signature of every delivery
 * (checked with the `standardwebhooks` library and its known-answer vector), the payload of each
 * event type, subscriptions and workspaces. Receivers are node:http servers on 127.0.0.1, allowed
 * through the egress guard by the allowlist 127.0.0.1/32. Shared helpers: ./support/delivery.ts.
 */
import { sql } from 'kysely';
import { Webhook } from 'standardwebhooks';
import { beforeAll, describe, expect, it } from 'vitest';
import { useTestServer } from '../support/server.ts';
import {
  closeReceiversAfterAll,
  createAgent,
  deliveryHelpers,
  ISO,
  ofType,
  QUIET_MS,
  type Received,
  type Receiver,
  sleep,
  startReceiver,
  UUID,
  until,
  verify,
  type Workspace,
  webhookHeaders,
} from './support/delivery.ts';

const server = useTestServer({ egressAllowlist: ['127.0.0.1/32'] });
closeReceiversAfterAll();
const { freshWorkspace, addEndpoint } = deliveryHelpers(server);

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
    // The agent's delivery: the endpoint's creation is itself audited (audit.* events may come first).
    const got = await until('the agent.created delivery', () =>
      receiver.received.find((r: Received) => r.payload.type === 'agent.created'),
    );
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
    // all of it but the key Warden generated, which only the create answers
    const { api_key: generated, ...stored } = agent;
    expect(generated).toMatch(/^wak_/);
    expect(payload.data).toEqual({ agent: stored });
  });

  it('policy.updated fires on POST /policies (change created) and PATCH /policies/{id} (change updated)', async () => {
    const created = await ws.api('POST', '/policies', {
      body: { name: 'Payload policy', rules: [{ match: { action: ['x.*'] }, effect: 'block' }] },
    });
    expect(created.status).toBe(201);
    const onCreate = await delivered('policy.updated', (p) => p.data?.policy?.id === created.body.data.id && p.data.change === 'created');
    expect(onCreate.data).toEqual({ policy: created.body.data, change: 'created' });

    const patched = await ws.api('PATCH', `/policies/${created.body.data.id}`, { body: { description: 'now described' } });
    expect(patched.status).toBe(200);
    const onPatch = await delivered('policy.updated', (p) => p.data?.policy?.id === created.body.data.id && p.data.change === 'updated');
    expect(onPatch.data).toEqual({ policy: patched.body.data, change: 'updated' });
    expect(onPatch.data.policy.version).toBe(2);
    expect(onPatch.id).not.toBe(onCreate.id);
  });

  it('audit.created fires on POST /policy/evaluate and on POST /audit, carrying the audit event', async () => {
    const agent = await createAgent(ws, 'Evaluator');
    const evaluated = await ws.api('POST', '/policy/evaluate', {
      body: {
        input: { action: 'payload.evaluate', resource: 'r/1', agent: agent.slug },
      },
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
      body: {
        action: 'payload.recorded',
        result: 'blocked',
        severity: 'high',
        resource: 'r/2',
        user: 'alice',
        context,
      },
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
      const res = await quiet.api('POST', '/policy/evaluate', { body: { input: { action, resource: 'r/q', agent: unheard.slug } } });
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
    const approval = await ws.api('POST', '/approvals', { body: { title: 'Payload approval' } });
    expect(approval.status).toBe(201);
    expect(ofType(receiver, 'approval.completed')).toHaveLength(0);
    const decided = await ws.api('PATCH', `/approvals/${approval.body.data.id}`, { body: { status: 'rejected', decision_note: 'no' } });
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
    expect((await ws.api('POST', '/policies', { body: { name: 'Subscribed policy' } })).status).toBe(201);
    expect((await ws.api('POST', '/audit', { body: { action: 'sub.audit', result: 'blocked' } })).status).toBe(201);
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
    await until('both events', () => ofType(atA, 'agent.created').length >= 1 && ofType(atB, 'agent.created').length >= 1);
    await sleep(QUIET_MS);
    expect(ofType(atA, 'agent.created').map((r) => r.payload.data.agent.id)).toEqual([agentA.id]);
    expect(ofType(atB, 'agent.created').map((r) => r.payload.data.agent.id)).toEqual([agentB.id]);
    // every event (the audit log's too: the agents' creation is audited) is of the endpoint's own workspace
    for (const r of atA.received) expect(r.payload.workspace_id).toBe(a.id);
    for (const r of atB.received) expect(r.payload.workspace_id).toBe(b.id);
  });
});
