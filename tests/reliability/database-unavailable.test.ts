/**
 * What each kind of operation answers while PostgreSQL is unreachable (PostgreSQL only: a TCP
 * proxy between Warden and the database is cut, then restored). Failures before the audit
 * write (the key lookup, the agent lookup, the policy load) are the database being down,
 * not a fault of Warden: 503 `service_unavailable` with Retry-After, never 500, never 401 for
 * a key that could not be checked, and never a success.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freshDatabase } from '../support/database.ts';
import { type ApiResponse, request, startTestServer, type TestServer } from '../support/server.ts';
import { startTcpProxy, type TcpProxy, throughProxy } from './support/tcp-proxy.ts';

const BASE_URL = process.env.DATABASE_URL;

let proxy: TcpProxy;
let server: TestServer;
let drop: (() => Promise<void>) | undefined;
/** A dashboard session opened before the cut. */
let cookie: string;
const dashboard = () => `${new URL(server.url).origin}/dashboard/api`;

const expectUnavailable = (res: ApiResponse, code = 'service_unavailable') => {
  expect(res.status, JSON.stringify(res.body)).toBe(503);
  expect(res.body.error.code).toBe(code);
  expect(Number(res.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
};

describe.skipIf(!BASE_URL)('while the database is unreachable', () => {
  beforeAll(async () => {
    const base = new URL(BASE_URL as string);
    const db = await freshDatabase(BASE_URL as string, 'warden_unavailable');
    drop = db.drop;
    proxy = await startTcpProxy(Number(base.port || 5432), base.hostname);
    server = await startTestServer({ databaseUrl: throughProxy(db.url, proxy) });
    expect((await server.api('POST', '/agents', { body: { name: 'Down Bot', provider: 'local', slug: 'down-bot' } })).status).toBe(201);
    const login = await request(dashboard(), '', 'POST', '/session', { key: null, body: { api_key: server.key } });
    expect(login.status).toBe(200);
    cookie = (login.headers.getSetCookie().find((c) => c.startsWith('warden_session=')) as string).split(';')[0] as string;
    proxy.cut();
  });

  afterAll(async () => {
    await server?.close();
    await proxy?.close();
    await drop?.();
  });

  it('GET /agents answers 503 service_unavailable with Retry-After (the key lookup failed), with the rate-limit headers', async () => {
    const res = await server.api('GET', '/agents');
    expectUnavailable(res);
    // the limiter still counted the request (in its in-memory insurance store)
    expect(res.headers.get('x-ratelimit-limit')).not.toBeNull();
  });

  it('POST /policy/evaluate answers 503 service_unavailable, not 500', async () => {
    const res = await server.api('POST', '/policy/evaluate', { body: { input: { action: 'orders.read', agent: 'down-bot' } } });
    expectUnavailable(res);
  });

  it('POST /agents answers 503 service_unavailable and creates nothing', async () => {
    expectUnavailable(await server.api('POST', '/agents', { body: { name: 'Ghost', provider: 'local', slug: 'ghost-bot' } }));
  });

  it('GET /agents with an unknown key answers 503 (the key could not be checked), never 401 or 2xx', async () => {
    expectUnavailable(await server.api('GET', '/agents', { key: 'wk_test_unknown_key_0000000000000000' }));
  });

  it('GET /agents without any key still answers 401 unauthorized (no lookup was needed)', async () => {
    const res = await server.api('GET', '/agents', { key: null });
    expect(res.status).toBe(401);
    expect(res.body.error.code).toBe('unauthorized');
  });

  it('GET /health with a key answers its own 503 (status degraded, database unreachable)', async () => {
    const res = await server.api('GET', '/health');
    expect(res.status).toBe(503);
    expect(res.body.data).toMatchObject({ status: 'degraded', database: 'unreachable' });
  });

  it('POST /dashboard/api/session (login) answers 503 service_unavailable', async () => {
    expectUnavailable(await request(dashboard(), '', 'POST', '/session', { key: null, body: { api_key: server.key } }));
  });

  it('GET /dashboard/api/session with a session cookie answers 503 service_unavailable, not 401 (the session is not lost)', async () => {
    expectUnavailable(await request(dashboard(), '', 'GET', '/session', { key: null, headers: { cookie } }));
  });

  it('once the database is back, GET /agents answers 200 by itself and the refused POST /agents created nothing', async () => {
    proxy.restore();
    let res: ApiResponse | undefined;
    const deadline = Date.now() + 15_000;
    while (Date.now() < deadline) {
      res = await server.api('GET', '/agents');
      if (res.status === 200) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(res?.status).toBe(200);
    expect(res?.body.data.map((a: { slug: string }) => a.slug)).toEqual(['down-bot']);
  });
});
