/**
 * Webhook delivery when the receiver fails: retries on the schedule (5xx, timeouts, refused
 * connections, 3xx never followed) until the delivery fails or the endpoint is paused, and a 410
 * Gone that disables the endpoint until it is resumed. Shared helpers: ./support/delivery.ts.
 */
import { describe, expect, it } from 'vitest';
import { useTestServer } from '../support/server.ts';
import {
  closeReceiversAfterAll,
  createAgent,
  deliveries,
  deliveryHelpers,
  ofType,
  QUIET_MS,
  SCHEDULE_LENGTH,
  sleep,
  startReceiver,
  until,
  verify,
} from './support/delivery.ts';

const server = useTestServer({ egressAllowlist: ['127.0.0.1/32'] });
closeReceiversAfterAll();
const { freshWorkspace, addEndpoint } = deliveryHelpers(server);

describe('retries', () => {
  it('delivers on the 3rd attempt after two 500s, with the same webhook-id each time and the schedule’s backoff', async () => {
    const ws = await freshWorkspace();
    const receiver = await startReceiver((n) => (n <= 2 ? { status: 500, body: 'boom' } : { status: 200, body: 'finally' }));
    const { id, secret } = await addEndpoint(ws, receiver, 'agent.created');
    await createAgent(ws, 'Retried');

    const delivery = await until('a succeeded delivery', async () => {
      const [latest] = await deliveries(ws, id);
      return latest?.status === 'succeeded' ? latest : undefined;
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

    const delivery = await until('a failed delivery', async () => {
      const [latest] = await deliveries(ws, id);
      return latest?.status === 'failed' ? latest : undefined;
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
    const endpoint = await ws.dash.api('GET', `/webhooks/${id}`);
    expect(endpoint.body.data).toMatchObject({ disabled: false, paused: false });
  });

  it('retries a receiver that does not answer within the timeout, then marks the delivery failed', async () => {
    const ws = await freshWorkspace();
    const receiver = await startReceiver(() => 'hang');
    const { id } = await addEndpoint(ws, receiver, 'agent.created');
    await createAgent(ws, 'Timed out');

    // Three attempts of 2 s (the harness's webhookTimeoutMs) plus the backoff.
    const delivery = await until(
      'a failed delivery',
      async () => {
        const [latest] = await deliveries(ws, id);
        return latest?.status === 'failed' ? latest : undefined;
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

    const delivery = await until('a failed delivery', async () => {
      const [latest] = await deliveries(ws, id);
      return latest?.status === 'failed' ? latest : undefined;
    });
    expect(delivery).toMatchObject({ status: 'failed', attempts: SCHEDULE_LENGTH, response_status: null, response_body: null });
    expect(delivery.last_error).toEqual(expect.any(String));
    expect(delivery.last_error?.length).toBeGreaterThan(0);
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

    const delivery = await until('a finished delivery', async () => {
      const [latest] = await deliveries(ws, endpointId);
      return latest && latest.status !== 'pending' ? latest : undefined;
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

    const delivery = await until('a failed delivery', async () => {
      const [latest] = await deliveries(ws, id);
      return latest?.status === 'failed' ? latest : undefined;
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

    const delivery = await until('a failed delivery', async () => {
      const [latest] = await deliveries(ws, id);
      return latest?.status === 'failed' ? latest : undefined;
    });
    expect(delivery).toMatchObject({ status: 'failed', attempts: 1, response_status: 410 });
    expect(gone.received).toHaveLength(1);
    const endpoint = await ws.dash.api('GET', `/webhooks/${id}`);
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
    await until('the endpoint disabled', async () => (await ws.dash.api('GET', `/webhooks/${id}`)).body.data.disabled === true);

    gone = false;
    const resumed = await ws.dash.api('PATCH', `/webhooks/${id}`, { body: { paused: false } });
    expect(resumed.status).toBe(200);
    expect(resumed.body.data).toMatchObject({ disabled: false, paused: false });
    const agent = await createAgent(ws, 'After re-enable');
    const got = await until('the event after re-enabling', () => receiver.received.find((r) => r.payload.data.agent.id === agent.id));
    expect(verify(got, secret)).toEqual(got.payload);
  });
});
