/**
 * verifyWebhook: the Standard Webhooks known-answer vector, signatures made by the
 * `standardwebhooks` library (what the server signs with), and every rejection.
 */
import { Webhook } from 'standardwebhooks';
import { describe, expect, it } from 'vitest';
import { verifyWebhook, WebhookVerificationError } from '../../packages/sdk/src/index.ts';

// The Standard Webhooks specification's reference vector.
const SECRET = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
const ID = 'msg_p5jXN8AQM9LWM0D4loKWxJek';
const TIMESTAMP = 1614265330;
const PAYLOAD = '{"test": 2432232314}';
const SIGNATURE = 'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=';
const headers = { 'webhook-id': ID, 'webhook-timestamp': String(TIMESTAMP), 'webhook-signature': SIGNATURE };
const atVectorTime = new Date(TIMESTAMP * 1000);

const rejection = (promise: Promise<unknown>) => expect(promise).rejects.toBeInstanceOf(WebhookVerificationError);

describe('verifyWebhook: the Standard Webhooks known-answer vector', () => {
  it('verifies with the tolerance disabled and returns the parsed payload', async () => {
    expect(await verifyWebhook(PAYLOAD, headers, SECRET, { toleranceSeconds: Number.POSITIVE_INFINITY })).toEqual({ test: 2432232314 });
  });

  it('verifies at the vector’s own time with the default tolerance', async () => {
    expect(await verifyWebhook(PAYLOAD, headers, SECRET, { now: atVectorTime })).toEqual({ test: 2432232314 });
  });

  it('accepts a Headers object, mixed-case names, bytes and one of several signatures', async () => {
    const h = new Headers({
      'Webhook-Id': ID,
      'Webhook-Timestamp': String(TIMESTAMP),
      'Webhook-Signature': `v1,AAAA v1a,xyz ${SIGNATURE}`,
    });
    expect(await verifyWebhook(new TextEncoder().encode(PAYLOAD), h, SECRET, { now: atVectorTime })).toEqual({ test: 2432232314 });
    const upper = { 'WEBHOOK-ID': ID, 'Webhook-Timestamp': String(TIMESTAMP), 'webhook-signature': SIGNATURE };
    expect(await verifyWebhook(PAYLOAD, upper, SECRET, { now: atVectorTime })).toEqual({ test: 2432232314 });
  });

  it('rejects the vector today: its timestamp is years old', async () => {
    await expect(verifyWebhook(PAYLOAD, headers, SECRET)).rejects.toThrow(/too old/);
  });

  it('rejects a tampered payload, id or timestamp', async () => {
    const opts = { toleranceSeconds: Number.POSITIVE_INFINITY };
    await rejection(verifyWebhook('{"test": 2432232315}', headers, SECRET, opts));
    await rejection(verifyWebhook(`${PAYLOAD} `, headers, SECRET, opts));
    await rejection(verifyWebhook(PAYLOAD, { ...headers, 'webhook-id': 'msg_other' }, SECRET, opts));
    await rejection(verifyWebhook(PAYLOAD, { ...headers, 'webhook-timestamp': String(TIMESTAMP + 1) }, SECRET, opts));
  });

  it('rejects another secret, a signature of another version, garbage and missing headers', async () => {
    const opts = { now: atVectorTime };
    await rejection(verifyWebhook(PAYLOAD, headers, 'whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA', opts));
    await rejection(verifyWebhook(PAYLOAD, { ...headers, 'webhook-signature': SIGNATURE.replace('v1,', 'v2,') }, SECRET, opts));
    await rejection(verifyWebhook(PAYLOAD, { ...headers, 'webhook-signature': 'v1,%%%not-base64%%%' }, SECRET, opts));
    await rejection(verifyWebhook(PAYLOAD, { 'webhook-id': ID, 'webhook-timestamp': String(TIMESTAMP) }, SECRET, opts));
    await rejection(verifyWebhook(PAYLOAD, { ...headers, 'webhook-timestamp': 'yesterday' }, SECRET, opts));
  });

  it('rejects a timestamp outside the tolerance in either direction', async () => {
    const sixMinutes = 6 * 60 * 1000;
    await expect(verifyWebhook(PAYLOAD, headers, SECRET, { now: new Date(atVectorTime.getTime() + sixMinutes) })).rejects.toThrow(
      /too old/,
    );
    await expect(verifyWebhook(PAYLOAD, headers, SECRET, { now: new Date(atVectorTime.getTime() - sixMinutes) })).rejects.toThrow(/future/);
    expect(
      await verifyWebhook(PAYLOAD, headers, SECRET, { now: new Date(atVectorTime.getTime() + sixMinutes), toleranceSeconds: 600 }),
    ).toBeTruthy();
  });

  it('refuses a secret that is not base64 with a TypeError', async () => {
    await expect(verifyWebhook(PAYLOAD, headers, 'whsec_%%%', { now: atVectorTime })).rejects.toBeInstanceOf(TypeError);
  });
});

describe('verifyWebhook: deliveries signed as the server signs them', () => {
  it('verifies a fresh delivery signed by the standardwebhooks library, and during a secret rotation', async () => {
    const secret = `whsec_${btoa(String.fromCharCode(...crypto.getRandomValues(new Uint8Array(24))))}`;
    const previous = `whsec_${btoa('previous-secret-bytes-32-long!!!')}`;
    const body = JSON.stringify({
      id: 'evt_1',
      type: 'agent.created',
      created_at: new Date().toISOString(),
      workspace_id: 'w',
      data: { id: 'a' },
    });
    const now = new Date();
    const ts = Math.floor(now.getTime() / 1000);
    const sign = (s: string) => new Webhook(s).sign('evt_1', now, body);
    const delivered = { 'webhook-id': 'evt_1', 'webhook-timestamp': String(ts), 'webhook-signature': `${sign(previous)} ${sign(secret)}` };
    const event = await verifyWebhook(body, delivered, secret);
    expect(event).toMatchObject({ id: 'evt_1', type: 'agent.created', data: { id: 'a' } });
    expect(await verifyWebhook(body, delivered, previous)).toMatchObject({ id: 'evt_1' });
    await rejection(verifyWebhook(body, delivered, `whsec_${btoa('an-unrelated-secret-of-32-bytes!')}`));
  });
});
