/**
 * The dashboard API's webhook endpoints (/dashboard/api/webhooks): create, list, get, update,
 * delete, rotate the secret, send a test event, its delivery history and replay, each refusal;
 * and tenant isolation of a session's webhooks and approvals. Shared helpers: ./support/dashboard.ts.
 */
import type { dashboard } from '@warden/contract';
import { describe, expect, it } from 'vitest';
import { useTestServer } from '../support/server.ts';
import { closeReceiversAfterAll, type Received, startReceiver, until, verify } from '../webhooks/support/delivery.ts';
import { dashboardHelpers, thanks, UUID } from './support/dashboard.ts';

const server = useTestServer({ egressAllowlist: ['127.0.0.1/32'] });
closeReceiversAfterAll();
const { login, freshWorkspace, newKey } = dashboardHelpers(server);

describe('webhook endpoints (/webhooks)', () => {
  it('creates, lists, gets, updates and deletes an endpoint; the secret is shown only on creation', async () => {
    const ws = await freshWorkspace('admin');
    const session = await login(ws.key);
    const created = await session.api('POST', '/webhooks', {
      body: {
        url: 'https://hooks.example.com/crud',
        events: ['agent.created', 'billing.updated'],
        description: 'CRUD',
      },
    });
    expect(created.status).toBe(201);
    const { endpoint, secret } = created.body.data;
    expect(secret).toMatch(/^whsec_[A-Za-z0-9+/]+={0,2}$/);
    expect(Buffer.from(secret.slice(6), 'base64').length).toBeGreaterThanOrEqual(24);
    expect(endpoint).toMatchObject({
      url: 'https://hooks.example.com/crud',
      description: 'CRUD',
      events: ['agent.created', 'billing.updated'],
      paused: false,
      disabled: false,
      secret_rotating_until: null,
    });
    expect(endpoint.id).toMatch(UUID);

    const list = await session.api('GET', '/webhooks');
    expect(list.status).toBe(200);
    expect(list.body).toEqual({ data: [endpoint], has_more: false, next_cursor: null });
    expect(JSON.stringify(list.body)).not.toContain(secret);
    const got = await session.api('GET', `/webhooks/${endpoint.id}`);
    expect(got.status).toBe(200);
    expect(got.body.data).toEqual(endpoint);

    const patched = await session.api('PATCH', `/webhooks/${endpoint.id}`, { body: { events: ['*'], description: null, paused: true } });
    expect(patched.status).toBe(200);
    expect(patched.body.data).toMatchObject({ id: endpoint.id, events: ['*'], description: null, paused: true });
    const resumed = await session.api('PATCH', `/webhooks/${endpoint.id}`, { body: { paused: false } });
    expect(resumed.body.data.paused).toBe(false);

    const deleted = await session.api('DELETE', `/webhooks/${endpoint.id}`);
    expect(deleted.status).toBe(200);
    expect(deleted.body).toEqual({ data: { id: endpoint.id, deleted: true } });
    const gone = await session.api('GET', `/webhooks/${endpoint.id}`);
    expect(gone.status).toBe(404);
    expect(gone.body.error.code).toBe('not_found');
    expect((await session.api('DELETE', `/webhooks/${endpoint.id}`)).status).toBe(404);
  });

  it.each([
    ['an unknown event type', { url: 'https://hooks.example.com/x', events: ['agent.deleted'] }],
    ['no events', { url: 'https://hooks.example.com/x', events: [] }],
    ['no url', { events: ['*'] }],
    ['an http url that is not allow-listed', { url: 'http://hooks.example.com/x', events: ['*'] }],
    ['a private address', { url: 'https://192.168.1.10/x', events: ['*'] }],
    ['an unknown field', { url: 'https://hooks.example.com/x', events: ['*'], secret: 'whsec_mine' }],
  ])('answers 400 invalid_request for %s', async (_label, body) => {
    const ws = await freshWorkspace('admin');
    const session = await login(ws.key);
    const res = await session.api('POST', '/webhooks', { body, unchecked: true });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('invalid_request');
    expect((await session.api('GET', '/webhooks')).body.data).toEqual([]);
  });

  it('rotates the secret with a default overlap of 24 hours', async () => {
    const ws = await freshWorkspace('admin');
    const session = await login(ws.key);
    const created = (await session.api('POST', '/webhooks', { body: { url: 'https://hooks.example.com/rotate', events: ['*'] } })).body
      .data;
    const rotated = await session.api('POST', `/webhooks/${created.endpoint.id}/rotate-secret`);
    expect(rotated.status).toBe(200);
    expect(rotated.body.data.secret).toMatch(/^whsec_/);
    expect(rotated.body.data.secret).not.toBe(created.secret);
    const until24h = Date.parse(rotated.body.data.endpoint.secret_rotating_until!) - Date.now();
    expect(until24h).toBeGreaterThan(23.9 * 3_600_000);
    expect(until24h).toBeLessThanOrEqual(24 * 3_600_000);
    const ended = await session.api('POST', `/webhooks/${created.endpoint.id}/rotate-secret`, { body: { overlap_seconds: 0 } });
    expect(ended.status).toBe(200);
    expect(ended.body.data.endpoint.secret_rotating_until).toBeNull();
    const tooLong = await session.api('POST', `/webhooks/${created.endpoint.id}/rotate-secret`, {
      body: { overlap_seconds: 604801 },
      unchecked: true,
    });
    expect(tooLong.status).toBe(400);
  });

  it('sends a signed webhook.test event, shows it in the delivery history, and replays it with the same webhook-id', async () => {
    const ws = await freshWorkspace('admin');
    const session = await login(ws.key);
    const receiver = await startReceiver(thanks);
    // Subscribed to agent.created only: the test event is sent anyway.
    const created = (await session.api('POST', '/webhooks', { body: { url: receiver.url, events: ['agent.created'] } })).body.data;
    const id = created.endpoint.id;

    const test = await session.api('POST', `/webhooks/${id}/test`);
    expect(test.status).toBe(202);
    expect(test.body.data).toMatchObject({ endpoint_id: id, event_type: 'webhook.test', status: 'pending', attempts: 0 });
    const first = await until('the test event', () => receiver.received[0]);
    expect(first.payload).toMatchObject({ type: 'webhook.test', workspace_id: ws.id, id: test.body.data.event_id });
    expect(first.headers['webhook-id']).toBe(test.body.data.event_id);
    expect(verify(first, created.secret)).toEqual(first.payload);

    const history = await until('a succeeded delivery', async () => {
      const res = await session.api('GET', `/webhooks/${id}/deliveries`);
      expect(res.status).toBe(200);
      return res.body.data[0]?.status === 'succeeded' ? res.body : undefined;
    });
    expect(history.data).toHaveLength(1);
    expect(history.data[0]).toMatchObject({
      id: test.body.data.id,
      status: 'succeeded',
      attempts: 1,
      response_status: 200,
      response_body: 'thanks',
      last_error: null,
      next_attempt_at: null,
    });
    expect(history.data[0]?.last_attempt_at).toEqual(expect.any(String));

    const replay = await session.api('POST', `/webhooks/${id}/deliveries/${test.body.data.id}/replay`);
    expect(replay.status).toBe(202);
    expect(replay.body.data).toMatchObject({ status: 'pending', event_id: test.body.data.event_id, event_type: 'webhook.test' });
    const second = await until('the replay', () => receiver.received[1]);
    expect(second.headers['webhook-id']).toBe(first.headers['webhook-id']);
    expect(second.body).toBe(first.body);
    expect(verify(second, created.secret)).toEqual(first.payload);
    const after = await session.api('GET', `/webhooks/${id}/deliveries`);
    expect(after.body.data.map((d: { id: string }) => d.id).sort()).toEqual([test.body.data.id, replay.body.data.id].sort());

    const unknown = await session.api('POST', `/webhooks/${id}/deliveries/00000000-0000-4000-8000-000000000000/replay`);
    expect(unknown.status).toBe(404);
  });

  it('answers 404 not_found for the deliveries, test and rotation of an unknown endpoint', async () => {
    const ws = await freshWorkspace('admin');
    const session = await login(ws.key);
    const missing = '00000000-0000-4000-8000-000000000000';
    for (const [method, path] of [
      ['GET', `/webhooks/${missing}`],
      ['GET', `/webhooks/${missing}/deliveries`],
      ['POST', `/webhooks/${missing}/test`],
      ['POST', `/webhooks/${missing}/rotate-secret`],
      ['PATCH', `/webhooks/${missing}`],
    ] as const) {
      const res = await session.api(method, path, { body: method === 'PATCH' ? { paused: true } : undefined, unchecked: true });
      expect(res.status, `${method} ${path}`).toBe(404);
      expect(res.body.error.code).toBe('not_found');
    }
  });

  it('answers 400 invalid_request, never a 5xx, for a NUL or a lone surrogate in a string, and stores nothing', async () => {
    const ws = await freshWorkspace('admin');
    const session = await login(ws.key);
    for (const body of [
      { url: 'https://hooks.example.com/nul', events: ['agent.created'], description: 'a\u0000b' },
      { url: 'https://hooks.example.com/lone', events: ['agent.created'], description: 'a\ud800b' },
    ] satisfies dashboard.WebhookEndpointCreate[]) {
      const res = await session.api('POST', '/webhooks', { body });
      expect(res.status, body.description).toBe(400);
      expect(res.body.error.code).toBe('invalid_request');
    }
    expect((await session.api('GET', '/webhooks')).body.data).toEqual([]);
    expect(
      (await session.api('POST', '/webhooks', { body: { url: 'https://hooks.example.com/ok', events: ['agent.created'] } })).status,
    ).toBe(201);
  });
});

describe('tenant isolation', () => {
  it("a session of workspace B can neither see nor change workspace A's webhooks or approvals (404)", async () => {
    const a = await freshWorkspace('admin');
    const b = await freshWorkspace('admin');
    const sessionA = await login(a.key);
    const sessionB = await login(b.key);
    const receiver = await startReceiver(thanks);
    const created = (await sessionA.api('POST', '/webhooks', { body: { url: receiver.url, events: ['*'], description: 'A only' } })).body
      .data;
    const id = created.endpoint.id;
    const test = await sessionA.api('POST', `/webhooks/${id}/test`);
    await until('A’s test delivery', () => receiver.received[0]);
    const deliveryId = test.body.data.id;

    for (const [method, path, body] of [
      ['GET', `/webhooks/${id}`, undefined],
      ['PATCH', `/webhooks/${id}`, { paused: true, url: 'https://attacker.example.com/x' }],
      ['POST', `/webhooks/${id}/rotate-secret`, {}],
      ['POST', `/webhooks/${id}/test`, undefined],
      ['GET', `/webhooks/${id}/deliveries`, undefined],
      ['POST', `/webhooks/${id}/deliveries/${deliveryId}/replay`, undefined],
      ['DELETE', `/webhooks/${id}`, undefined],
    ] as const) {
      const res = await sessionB.api(method, path, { body, unchecked: true });
      expect(res.status, `${method} ${path}`).toBe(404);
      expect(res.body.error.code).toBe('not_found');
    }
    expect((await sessionB.api('GET', '/webhooks')).body.data).toEqual([]);

    // Nor decide its approvals.
    const approval = await server.api('POST', '/approvals', {
      key: (await newKey(a.slug, 'approvals:write')).key,
      body: { title: 'A only' },
    });
    expect(approval.status).toBe(201);
    const deciderB = await login((await newKey(b.slug, 'admin,approvals:decide')).key);
    const decided = await deciderB.api('PATCH', `/approvals/${approval.body.data.id}`, { body: { status: 'approved' } });
    expect(decided.status).toBe(404);
    expect((await deciderB.api('GET', '/approvals')).body.data).toEqual([]);

    // B's own endpoint cannot replay A's delivery either.
    const own = (await sessionB.api('POST', '/webhooks', { body: { url: 'https://hooks.example.com/b', events: ['*'] } })).body.data;
    expect((await sessionB.api('POST', `/webhooks/${own.endpoint.id}/deliveries/${deliveryId}/replay`)).status).toBe(404);

    const still = await sessionA.api('GET', `/webhooks/${id}`);
    expect(still.status).toBe(200);
    expect(still.body.data).toEqual(created.endpoint);
    await until('A’s approval.requested', () => receiver.received.find((r) => r.payload?.type === 'approval.requested'));
    await new Promise((resolve) => setTimeout(resolve, 400));
    // A's own audit log grows with A's configuration changes (the key created above): audit.* aside,
    // only A's own events came — the test event and the approval A asked for, none of B's doing.
    const notAudit = receiver.received.filter((r) => !String(r.payload?.type).startsWith('audit.'));
    expect(notAudit.map((r) => verify(r as Received, created.secret).type).sort()).toEqual(['approval.requested', 'webhook.test']);
    const requested = notAudit.find((r) => r.payload.type === 'approval.requested');
    expect(requested?.payload.data.approval.id).toBe(approval.body.data.id);
  });
});
