/**
 * Webhook endpoints: paused endpoints (deliveries skipped) and replay, secret rotation with and
 * without overlap, the URL rules (https, egress guard) on create and update, and the endpoint
 * secret encrypted at rest. Shared helpers: ./support/delivery.ts.
 */
import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { dashboardLogin, useTestServer } from '../support/server.ts';
import {
  closeReceiversAfterAll,
  createAgent,
  deliveries,
  deliveryHelpers,
  ofType,
  QUIET_MS,
  type Received,
  sleep,
  startReceiver,
  until,
  verify,
} from './support/delivery.ts';

const server = useTestServer({ egressAllowlist: ['127.0.0.1/32'] });
closeReceiversAfterAll();
const { freshWorkspace, addEndpoint } = deliveryHelpers(server);

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
    const skipped = await until('a skipped delivery', async () => {
      const [latest] = await deliveries(ws, id);
      return latest?.status === 'skipped' ? latest : undefined;
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
    const resumed = await ws.dash.api('PATCH', `/webhooks/${id}`, { body: { paused: false } });
    expect(resumed.status).toBe(200);
    expect(resumed.body.data.paused).toBe(false);
    await sleep(QUIET_MS);
    expect(paused.received).toHaveLength(0);

    // …replaying it does, with the event's webhook-id.
    const replay = await ws.dash.api('POST', `/webhooks/${id}/deliveries/${skipped.id}/replay`);
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

    const rotated = await ws.dash.api('POST', `/webhooks/${id}/rotate-secret`, { body: { overlap_seconds: 3600 } });
    expect(rotated.status).toBe(200);
    const newSecret: string = rotated.body.data.secret;
    expect(newSecret).toMatch(/^whsec_/);
    expect(newSecret).not.toBe(oldSecret);
    expect(Date.parse(rotated.body.data.endpoint.secret_rotating_until!)).toBeGreaterThan(Date.now() + 3500_000);

    const a = await createAgent(ws, 'During overlap');
    const during = await until('a delivery during the overlap', () => receiver.received.find((r) => r.payload.data.agent.id === a.id));
    const signatures = String(during.headers['webhook-signature']).split(' ');
    expect(signatures).toHaveLength(2);
    for (const s of signatures) expect(s).toMatch(/^v1,[A-Za-z0-9+/]+={0,2}$/);
    expect(verify(during, oldSecret)).toEqual(during.payload);
    expect(verify(during, newSecret)).toEqual(during.payload);

    const again = await ws.dash.api('POST', `/webhooks/${id}/rotate-secret`, { body: { overlap_seconds: 0 } });
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
  const strict = useTestServer();

  const strictDashboard = () => dashboardLogin(strict.origin, strict.key);

  it('refuses http:// to a target that is not allow-listed with 400 invalid_request', async () => {
    const dash = await strictDashboard();
    const res = await dash.api('POST', '/webhooks', { body: { url: 'http://127.0.0.1:9/hook', events: ['*'] } });
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
      const res = await dash.api('POST', '/webhooks', { body: { url, events: ['*'] } });
      expect(res.status, url).toBe(400);
      expect(res.body.error.code).toBe('invalid_request');
    }
    await expect(strict.admin('webhooks.create', { workspace: 'default', url: 'https://10.0.0.1/hook', events: '*' })).rejects.toThrow();
    const list = await dash.api('GET', '/webhooks');
    expect(list.body.data).toEqual([]);
  });

  it('applies the same rules when an endpoint’s URL is changed', async () => {
    const dash = await strictDashboard();
    const created = await dash.api('POST', '/webhooks', { body: { url: 'https://hooks.example.com/ok', events: ['agent.created'] } });
    expect(created.status).toBe(201);
    const id = created.body.data.endpoint.id;
    for (const url of ['http://127.0.0.1:9/hook', 'https://10.0.0.1/hook', 'https://[::1]/hook']) {
      const res = await dash.api('PATCH', `/webhooks/${id}`, { body: { url } });
      expect(res.status, url).toBe(400);
      expect(res.body.error.code).toBe('invalid_request');
    }
    expect((await dash.api('GET', `/webhooks/${id}`)).body.data.url).toBe('https://hooks.example.com/ok');
    expect((await dash.api('DELETE', `/webhooks/${id}`)).status).toBe(200);
  });

  it('accepts http:// to an allow-listed loopback target', async () => {
    const ws = await freshWorkspace();
    const res = await ws.dash.api('POST', '/webhooks', { body: { url: 'http://127.0.0.1:9/hook', events: ['agent.created'] } });
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
    const rotated = await ws.dash.api('POST', `/webhooks/${id}/rotate-secret`, { body: { overlap_seconds: 600 } });
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
