/**
 * Standard Webhooks verification (https://www.standardwebhooks.com), on Web Crypto only so it
 * runs unchanged in Node 20+, browsers, Deno, Bun and edge runtimes.
 */

import type { WebhookEvent as ContractWebhookEvent } from './generated/types.gen.js';

/**
 * The body of every Warden webhook delivery, `{id, type, created_at, workspace_id, data}`: a
 * union discriminated by `type` (`agent.created`, `policy.updated`, `audit.created`,
 * `audit.checkpoint`, `approval.requested`, `approval.completed`, `billing.updated`,
 * `webhook.test`), generated from the spec's `webhooks`. Switch on `type` to get `data`
 * typed; ignore types you do not know, since new ones may be added. `id` equals the
 * `webhook-id` header and is stable across redeliveries (deduplicate on it).
 */
export type WebhookEvent = ContractWebhookEvent;
/** Every event type a delivery may carry. */
export type WebhookEventType = WebhookEvent['type'];
/** The event of one type, e.g. `WebhookEventOf<'approval.requested'>`. */
export type WebhookEventOf<K extends WebhookEventType> = Extract<WebhookEvent, { type: K }>;

export interface VerifyWebhookOptions {
  /**
   * Largest accepted distance, in seconds, between `webhook-timestamp` and now, in either
   * direction; it bounds replays of a captured delivery. Default 300. `Infinity` disables the
   * check (only for tests of recorded deliveries).
   */
  toleranceSeconds?: number;
  /** The clock to check against. Default: now. */
  now?: Date;
}

/** Thrown by {@link verifyWebhook} when a delivery is not authentic (or not fresh). Answer it with 400. */
export class WebhookVerificationError extends Error {
  override readonly name = 'WebhookVerificationError';
}

export type WebhookHeaders = Headers | Record<string, string | string[] | undefined>;

const SECRET_PREFIX = 'whsec_';
const encoder = new TextEncoder();

function header(headers: WebhookHeaders, name: string): string | undefined {
  if (typeof Headers !== 'undefined' && headers instanceof Headers) return headers.get(name) ?? undefined;
  for (const [key, value] of Object.entries(headers as Record<string, string | string[] | undefined>)) {
    if (key.toLowerCase() === name) return Array.isArray(value) ? value.join(' ') : value;
  }
  return undefined;
}

function base64ToBytes(text: string): Uint8Array<ArrayBuffer> {
  const binary = atob(text);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

function concat(...parts: Uint8Array[]): Uint8Array<ArrayBuffer> {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let offset = 0;
  for (const part of parts) {
    out.set(part, offset);
    offset += part.length;
  }
  return out;
}

/**
 * Verifies a webhook delivery and returns its parsed body, typed as the {@link WebhookEvent}
 * union (narrow it by `type`). The body is checked for authenticity, not against the schema.
 *
 * @param payload the raw request body, exactly as received (do not parse and re-serialise it).
 * @param headers the request headers (a `Headers`, or a plain object such as Node's `req.headers`).
 * @param secret the endpoint's signing secret from the dashboard, `whsec_…`.
 * @throws WebhookVerificationError when a header is missing, the timestamp is outside the
 *   tolerance, or no `v1` signature matches (during a secret rotation Warden signs with both
 *   secrets, so either verifies).
 * @throws TypeError when `secret` is not a valid `whsec_` secret.
 */
export async function verifyWebhook<T = WebhookEvent>(
  payload: string | Uint8Array,
  headers: WebhookHeaders,
  secret: string,
  { toleranceSeconds = 300, now = new Date() }: VerifyWebhookOptions = {},
): Promise<T> {
  const id = header(headers, 'webhook-id');
  const timestamp = header(headers, 'webhook-timestamp');
  const signatures = header(headers, 'webhook-signature');
  if (!id || !timestamp || !signatures)
    throw new WebhookVerificationError('missing webhook-id, webhook-timestamp or webhook-signature header');

  if (!/^\d+$/.test(timestamp)) throw new WebhookVerificationError('invalid webhook-timestamp');
  const drift = Math.floor(now.getTime() / 1000) - Number(timestamp);
  if (drift > toleranceSeconds) throw new WebhookVerificationError('webhook-timestamp is too old');
  if (-drift > toleranceSeconds) throw new WebhookVerificationError('webhook-timestamp is in the future');

  let keyBytes: Uint8Array<ArrayBuffer>;
  try {
    keyBytes = base64ToBytes(secret.startsWith(SECRET_PREFIX) ? secret.slice(SECRET_PREFIX.length) : secret);
  } catch {
    throw new TypeError('verifyWebhook: the secret must be the `whsec_…` value shown in the dashboard');
  }
  if (keyBytes.length === 0) throw new TypeError('verifyWebhook: empty secret');
  const key = await crypto.subtle.importKey('raw', keyBytes, { name: 'HMAC', hash: 'SHA-256' }, false, ['verify']);
  const body = typeof payload === 'string' ? encoder.encode(payload) : payload;
  const signed = concat(encoder.encode(`${id}.${timestamp}.`), body);

  for (const entry of signatures.split(' ')) {
    const comma = entry.indexOf(',');
    if (comma < 0 || entry.slice(0, comma) !== 'v1') continue;
    let signature: Uint8Array<ArrayBuffer>;
    try {
      signature = base64ToBytes(entry.slice(comma + 1));
    } catch {
      continue;
    }
    // subtle.verify compares in constant time.
    if (await crypto.subtle.verify('HMAC', key, signature, signed)) {
      const text = typeof payload === 'string' ? payload : new TextDecoder().decode(payload);
      try {
        return JSON.parse(text) as T;
      } catch {
        throw new WebhookVerificationError('the signed payload is not JSON');
      }
    }
  }
  throw new WebhookVerificationError('no matching webhook signature');
}
