/**
 * Retries: 429 and 503 are retried for idempotent methods, honouring Retry-After; a POST carries
 * a generated Idempotency-Key, the same on every attempt, and is retried like them (and on 409
 * idempotency_key_in_progress); PATCH is retried only when the request never reached the server;
 * retries are bounded.
 * A loopback stub scripts the answers; one test uses the real server's rate limit.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createWarden, WardenError } from '../../packages/sdk/src/index.ts';
import { useTestServer } from '../support/server.ts';

type Script = (req: IncomingMessage, res: ServerResponse, n: number) => void;

let stub: Server;
let baseUrl: string;
let script: Script;
let hits: { method: string; url: string; at: number; key: string | undefined }[];

const json = (res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) =>
  res.writeHead(status, { 'content-type': 'application/json', ...headers }).end(JSON.stringify(body));
const health = { data: { status: 'ok', version: 'stub', database: 'ok', time: '2026-01-01T00:00:00.000Z' } };
const rateLimited = { error: { code: 'rate_limited', message: 'slow down' } };
const unavailable = { error: { code: 'audit_persist_failed', message: 'The audit record could not be stored' } };

beforeAll(async () => {
  stub = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      const key = req.headers['idempotency-key'];
      hits.push({ method: req.method ?? '', url: req.url ?? '', at: Date.now(), key: typeof key === 'string' ? key : undefined });
      script(req, res, hits.length);
    });
  });
  await new Promise<void>((resolve) => stub.listen(0, '127.0.0.1', resolve));
  baseUrl = `http://127.0.0.1:${(stub.address() as AddressInfo).port}/api/v1`;
});
afterAll(async () => {
  stub.closeAllConnections();
  await new Promise((resolve) => stub.close(resolve));
});
beforeEach(() => {
  hits = [];
});

const fast = { initialDelayMs: 10, maxDelayMs: 40 };

describe('retries on 429 and 503', () => {
  it('GET: waits Retry-After (seconds) after a 429, then succeeds', async () => {
    script = (_req, res, n) => (n === 1 ? json(res, 429, rateLimited, { 'Retry-After': '1' }) : json(res, 200, health));
    const warden = createWarden({ apiKey: 'wk_x', baseUrl, retry: fast });
    const started = Date.now();
    expect(await warden.health()).toMatchObject({ status: 'ok' });
    expect(hits).toHaveLength(2);
    const waited = (hits[1]?.at ?? 0) - (hits[0]?.at ?? 0);
    expect(waited).toBeGreaterThanOrEqual(950);
    expect(waited).toBeLessThan(5_000);
    expect(Date.now() - started).toBeLessThan(5_000);
  });

  it('GET: retries a 503 with backoff, at most maxRetries times, then throws the last answer', async () => {
    script = (_req, res) => json(res, 503, { error: { code: 'service_unavailable', message: 'down' } });
    const warden = createWarden({ apiKey: 'wk_x', baseUrl, maxRetries: 3, retry: fast });
    const error = await warden.agents.list().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(WardenError);
    expect(error).toMatchObject({ status: 503, code: 'service_unavailable' });
    expect(hits).toHaveLength(4);
  });

  it('maxRetries 0 (or per call) disables retries', async () => {
    script = (_req, res) => json(res, 429, rateLimited, { 'Retry-After': '1' });
    const none = createWarden({ apiKey: 'wk_x', baseUrl, maxRetries: 0 });
    await expect(none.agents.list()).rejects.toMatchObject({ status: 429, code: 'rate_limited', retryAfter: 1 });
    expect(hits).toHaveLength(1);
    const warden = createWarden({ apiKey: 'wk_x', baseUrl });
    await expect(warden.agents.list(undefined, { maxRetries: 0 })).rejects.toMatchObject({ status: 429 });
    expect(hits).toHaveLength(2);
  });

  it('does not wait out a Retry-After longer than maxRetryAfterMs', async () => {
    script = (_req, res) => json(res, 429, rateLimited, { 'Retry-After': '120' });
    const warden = createWarden({ apiKey: 'wk_x', baseUrl });
    const started = Date.now();
    const error = (await warden.agents.list().catch((e: unknown) => e)) as WardenError;
    expect(error.retryAfter).toBe(120);
    expect(hits).toHaveLength(1);
    expect(Date.now() - started).toBeLessThan(3_000);
  });

  it('DELETE is retried like GET', async () => {
    script = (_req, res, n) => (n === 1 ? json(res, 503, unavailable) : json(res, 200, { data: { id: 'a', deleted: true } }));
    const warden = createWarden({ apiKey: 'wk_x', baseUrl, retry: fast });
    expect(await warden.agents.delete('a')).toEqual({ id: 'a', deleted: true });
    expect(hits.map((h) => h.method)).toEqual(['DELETE', 'DELETE']);
  });
});

const created = { data: { id: 'e', event_timestamp: '2026-01-01T00:00:00.000Z', result: 'blocked', severity: 'low' } };
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

describe('POST: retried under one generated Idempotency-Key', () => {
  it('POST after a 503: retried with the same generated key, then succeeds', async () => {
    script = (_req, res, n) => (n === 1 ? json(res, 503, unavailable, { 'Retry-After': '0' }) : json(res, 201, created));
    const warden = createWarden({ apiKey: 'wk_x', baseUrl, retry: fast });
    expect(await warden.audit.record({ action: 'x', result: 'blocked' })).toMatchObject({ id: 'e' });
    expect(hits).toHaveLength(2);
    expect(hits[0]?.key).toMatch(UUID);
    expect(hits[1]?.key).toBe(hits[0]?.key);
  });

  it('POST after the connection dropped mid-request: retried with the same key (the server replays if it was applied)', async () => {
    script = (req, res, n) => (n === 1 ? req.socket.destroy() : json(res, 201, created));
    const warden = createWarden({ apiKey: 'wk_x', baseUrl, retry: fast });
    expect(await warden.audit.record({ action: 'x', result: 'blocked' })).toMatchObject({ id: 'e' });
    expect(hits.map((h) => h.key)).toEqual([hits[0]?.key, hits[0]?.key]);
  });

  it('POST answered 409 idempotency_key_in_progress: waits and retries; 409 idempotency_key_reused is thrown at once', async () => {
    const inProgress = { error: { code: 'idempotency_key_in_progress', message: 'still running' } };
    script = (_req, res, n) => (n === 1 ? json(res, 409, inProgress, { 'Retry-After': '1' }) : json(res, 201, created));
    const warden = createWarden({ apiKey: 'wk_x', baseUrl, retry: fast });
    expect(await warden.audit.record({ action: 'x', result: 'blocked' })).toMatchObject({ id: 'e' });
    expect(hits).toHaveLength(2);
    script = (_req, res) => json(res, 409, { error: { code: 'idempotency_key_reused', message: 'other request' } });
    await expect(warden.audit.record({ action: 'x', result: 'blocked' })).rejects.toMatchObject({
      status: 409,
      code: 'idempotency_key_reused',
    });
    expect(hits).toHaveLength(3);
  });

  it("keeps the caller's own Idempotency-Key; each call gets a new generated key; none without retries", async () => {
    script = (_req, res) => json(res, 201, created);
    const warden = createWarden({ apiKey: 'wk_x', baseUrl, retry: fast });
    await warden.audit.record({ action: 'x', result: 'blocked' }, { headers: { 'Idempotency-Key': 'order-42-refund' } });
    await warden.audit.record({ action: 'x', result: 'blocked' });
    await warden.audit.record({ action: 'x', result: 'blocked' });
    await warden.audit.record({ action: 'x', result: 'blocked' }, { maxRetries: 0 });
    expect(hits[0]?.key).toBe('order-42-refund');
    expect(hits[1]?.key).toMatch(UUID);
    expect(hits[2]?.key).toMatch(UUID);
    expect(hits[2]?.key).not.toBe(hits[1]?.key);
    expect(hits[3]?.key).toBeUndefined();
  });
});

describe('no retry of a non-idempotent call that reached the server', () => {
  it('PATCH after a 503 or a 429: one request each, the answer thrown', async () => {
    script = (_req, res) => json(res, 503, unavailable);
    const warden = createWarden({ apiKey: 'wk_x', baseUrl, maxRetries: 5, retry: fast });
    await expect(warden.approvals.decide('00000000-0000-4000-8000-000000000000', { status: 'approved' })).rejects.toMatchObject({
      status: 503,
    });
    script = (_req, res) => json(res, 429, rateLimited, { 'Retry-After': '1' });
    await expect(warden.policies.update('p', { enabled: false })).rejects.toMatchObject({ status: 429 });
    expect(hits.map((h) => h.method)).toEqual(['PATCH', 'PATCH']);
    expect(hits.every((h) => h.key === undefined)).toBe(true);
  });

  it('PATCH after the connection dropped mid-request: not retried (it may have been applied)', async () => {
    script = (req) => req.socket.destroy();
    const warden = createWarden({ apiKey: 'wk_x', baseUrl, retry: fast });
    await expect(warden.agents.update('a', { description: 'x' })).rejects.toMatchObject({ status: 0, code: 'network_error' });
    expect(hits).toHaveLength(1);
  });

  it('GET after the connection dropped: retried', async () => {
    script = (req, res, n) => (n === 1 ? req.socket.destroy() : json(res, 200, health));
    const warden = createWarden({ apiKey: 'wk_x', baseUrl, retry: fast });
    expect(await warden.health()).toMatchObject({ status: 'ok' });
    expect(hits).toHaveLength(2);
  });
});

describe('retry of a POST that never reached the server', () => {
  it('connection refused: retried up to maxRetries, then network_error', async () => {
    const closed = createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const port = (closed.address() as AddressInfo).port;
    await new Promise((resolve) => closed.close(resolve));
    let attempts = 0;
    const warden = createWarden({
      apiKey: 'wk_x',
      baseUrl: `http://127.0.0.1:${port}/api/v1`,
      maxRetries: 2,
      retry: fast,
      fetch: (input, init) => {
        attempts++;
        return fetch(input, init);
      },
    });
    await expect(warden.agents.create({ name: 'x', provider: 'local' })).rejects.toMatchObject({ status: 0, code: 'network_error' });
    expect(attempts).toBe(3);
  });

  it('connection refused, then the server is up: the POST goes through once', async () => {
    let attempts = 0;
    script = (_req, res) =>
      json(res, 201, { data: { id: 'e', event_timestamp: '2026-01-01T00:00:00.000Z', result: 'blocked', severity: 'low' } });
    const refused = Object.assign(new TypeError('fetch failed'), {
      cause: Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }),
    });
    const warden = createWarden({
      apiKey: 'wk_x',
      baseUrl,
      retry: fast,
      fetch: (input, init) => (++attempts === 1 ? Promise.reject(refused) : fetch(input, init)),
    });
    expect(await warden.audit.record({ action: 'x', result: 'blocked' })).toMatchObject({ id: 'e' });
    expect(attempts).toBe(2);
    expect(hits).toHaveLength(1);
  });
});

describe('against the real server’s rate limit', () => {
  const server = useTestServer({ rateLimitPerMinute: 3 });

  it('a 429 from Warden carries rate_limited, Retry-After and the X-RateLimit headers', async () => {
    // Retry-After here is up to a minute: above a 5 s maxRetryAfterMs, so the SDK gives up at once.
    const warden = createWarden({ apiKey: server.key, baseUrl: server.url, retry: { maxRetryAfterMs: 5_000 } });
    for (let i = 0; i < 3; i++) await warden.agents.list();
    const error = (await warden.agents.list().catch((e: unknown) => e)) as WardenError;
    expect(error).toBeInstanceOf(WardenError);
    expect(error).toMatchObject({ status: 429, code: 'rate_limited' });
    expect(error.retryAfter).toBeGreaterThan(5);
    expect(error.headers.get('x-ratelimit-limit')).toBe('3');
    expect(error.headers.get('x-ratelimit-remaining')).toBe('0');
  });
});
