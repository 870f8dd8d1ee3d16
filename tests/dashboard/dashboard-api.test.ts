/**
 * The dashboard API (/dashboard/api, spec/dist/dashboard.json) as a browser uses it: login
 * with a workspace key holding `admin`, an HttpOnly SameSite=Strict session cookie, the CSRF
 * token on every change; webhook management, approvals, billing, the served page and
 * tenant isolation. Real HTTP with fetch; cookies carried by hand.
 */
import { createServer, request as httpRequest, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ApiResponse, request, startTestServer, type TestServer } from '../support/server.ts';

let server: TestServer;
let origin: string;
beforeAll(async () => {
  server = await startTestServer({ egressAllowlist: ['127.0.0.1/32'] });
  origin = new URL(server.url).origin;
});
const receivers: Receiver[] = [];
afterAll(async () => {
  await server?.close();
  await Promise.all(receivers.map((r) => r.close()));
});

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

// ---------------------------------------------------------------------------------------
// Helpers

interface Received {
  headers: IncomingHttpHeaders;
  body: string;
  payload: any;
}

interface Receiver {
  url: string;
  received: Received[];
  close(): Promise<void>;
}

async function startReceiver(): Promise<Receiver> {
  const received: Received[] = [];
  const http = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      received.push({ headers: req.headers, body, payload: JSON.parse(body) });
      res.writeHead(200, { 'content-type': 'text/plain' }).end('thanks');
    });
  });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  const receiver = {
    url: `http://127.0.0.1:${(http.address() as AddressInfo).port}/hook`,
    received,
    close: () =>
      new Promise<void>((resolve) => {
        http.close(() => resolve());
        http.closeAllConnections();
      }),
  };
  receivers.push(receiver);
  return receiver;
}

const verify = (r: Received, secret: string): any =>
  new Webhook(secret).verify(r.body, {
    'webhook-id': String(r.headers['webhook-id']),
    'webhook-timestamp': String(r.headers['webhook-timestamp']),
    'webhook-signature': String(r.headers['webhook-signature']),
  });

async function until<T>(what: string, probe: () => T | Promise<T>, timeoutMs = 10_000): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value) return value as NonNullable<T>;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

/** POST /dashboard/api/session, raw. */
const postSession = (apiKey: string) =>
  fetch(`${origin}/dashboard/api/session`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ api_key: apiKey }),
  });

const sessionCookieOf = (res: Response) => res.headers.getSetCookie().find((c) => c.startsWith('warden_session='));

interface Session {
  cookie: string;
  csrf: string;
  /** Calls the dashboard API with the cookie and, unless told otherwise, the CSRF token. */
  call: (method: string, path: string, body?: unknown, headers?: Record<string, string>) => Promise<ApiResponse>;
}

/** Calls the dashboard API with exactly the given headers (no key, no cookie unless given). */
const dashboardCall = (method: string, path: string, options: { body?: unknown; headers?: Record<string, string> } = {}) =>
  request(`${origin}/dashboard/api`, '', method, path, { key: null, ...options });

async function login(apiKey: string): Promise<Session> {
  const res = await postSession(apiKey);
  expect(res.status).toBe(200);
  const setCookie = sessionCookieOf(res);
  expect(setCookie).toBeDefined();
  const cookie = (setCookie as string).split(';')[0] as string;
  const csrf = ((await res.json()) as { data: { csrf_token: string } }).data.csrf_token;
  return {
    cookie,
    csrf,
    call: (method, path, body, headers) => dashboardCall(method, path, { body, headers: { cookie, 'x-csrf-token': csrf, ...headers } }),
  };
}

let workspaceCount = 0;
/** A new workspace and a key of it with the given permissions. */
async function freshWorkspace(permissions = '*') {
  const slug = `dash-${++workspaceCount}`;
  const workspace = await server.admin('workspaces.create', { slug });
  const key = await server.admin('keys.create', { workspace: slug, permissions });
  return { slug, id: workspace.id as string, key: key.key as string, keyId: key.id as string };
}

const newKey = async (workspace: string, permissions: string) =>
  server.admin('keys.create', { workspace, permissions }) as Promise<{ key: string; id: string }>;

// ---------------------------------------------------------------------------------------

describe('POST /dashboard/api/session (login)', () => {
  it('sets an HttpOnly, SameSite=Strict session cookie on Path=/dashboard, without Secure on 127.0.0.1, and returns the CSRF token', async () => {
    const ws = await freshWorkspace('admin,agents:read');
    const res = await postSession(ws.key);
    expect(res.status).toBe(200);
    const setCookie = sessionCookieOf(res) as string;
    expect(setCookie).toBeDefined();
    const [pair, ...attributes] = setCookie.split(';').map((part) => part.trim());
    const value = (pair as string).slice('warden_session='.length);
    expect(value.length).toBeGreaterThanOrEqual(32);
    expect(value).not.toContain(ws.key);
    const lower = attributes.map((a) => a.toLowerCase());
    expect(lower).toContain('httponly');
    expect(lower).toContain('samesite=strict');
    expect(lower).toContain('path=/dashboard');
    expect(lower).not.toContain('secure');

    const body = (await res.json()) as any;
    expect(body.data).toMatchObject({
      workspace: { id: ws.id, slug: ws.slug },
      permissions: ['admin', 'agents:read'],
      csrf_token: expect.any(String),
    });
    expect(body.data.csrf_token.length).toBeGreaterThanOrEqual(16);
    expect(JSON.stringify(body)).not.toContain(ws.key);
    const hours = (Date.parse(body.data.expires_at) - Date.now()) / 3_600_000;
    expect(hours).toBeGreaterThan(7.9);
    expect(hours).toBeLessThanOrEqual(8.01);
  });

  it('marks the cookie Secure when the dashboard is reached under a name other than localhost', async () => {
    const ws = await freshWorkspace('admin');
    const { port } = new URL(origin);
    const setCookie = await new Promise<string[]>((resolve, reject) => {
      const req = httpRequest(
        {
          host: '127.0.0.1',
          port,
          method: 'POST',
          path: '/dashboard/api/session',
          headers: { host: 'warden.example.com', 'content-type': 'application/json' },
        },
        (res) => {
          res.resume();
          res.on('end', () => resolve(res.statusCode === 200 ? (res.headers['set-cookie'] ?? []) : [`status ${res.statusCode}`]));
        },
      );
      req.on('error', reject);
      req.end(JSON.stringify({ api_key: ws.key }));
    });
    const cookie = setCookie.find((c) => c.startsWith('warden_session='));
    expect(cookie, setCookie.join('\n')).toBeDefined();
    const attributes = (cookie as string).split(';').map((a) => a.trim().toLowerCase());
    expect(attributes).toContain('secure');
    expect(attributes).toContain('httponly');
    expect(attributes).toContain('samesite=strict');
  });

  it('GET /session with the cookie describes the session with the same CSRF token', async () => {
    const ws = await freshWorkspace('admin');
    const session = await login(ws.key);
    const res = await session.call('GET', '/session');
    expect(res.status).toBe(200);
    expect(res.body.data).toMatchObject({ workspace: { id: ws.id, slug: ws.slug }, permissions: ['admin'], csrf_token: session.csrf });
  });

  it('answers 403 insufficient_permission for a key without admin, setting no cookie', async () => {
    const ws = await freshWorkspace('agents:read,agents:write,approvals:decide,audit:read');
    const res = await postSession(ws.key);
    expect(res.status).toBe(403);
    expect(((await res.json()) as any).error.code).toBe('insufficient_permission');
    expect(sessionCookieOf(res)).toBeUndefined();
  });

  it('answers 401 unauthorized for an unknown key and for a revoked one', async () => {
    const unknown = await postSession('wk_not_a_real_key_0123456789abcdefghij');
    expect(unknown.status).toBe(401);
    expect(((await unknown.json()) as any).error.code).toBe('unauthorized');
    expect(sessionCookieOf(unknown)).toBeUndefined();

    const ws = await freshWorkspace('admin');
    await server.admin('keys.revoke', { id: ws.keyId });
    const revoked = await postSession(ws.key);
    expect(revoked.status).toBe(401);
  });

  it('answers 400 invalid_request for a body without api_key', async () => {
    const res = await dashboardCall('POST', '/session', { body: {} });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('invalid_request');
  });
});

describe('session cookie and CSRF token', () => {
  it('answers 401 unauthorized without a cookie, and with a forged one', async () => {
    for (const [method, path] of [
      ['GET', '/session'],
      ['GET', '/webhooks'],
      ['POST', '/webhooks'],
      ['GET', '/billing'],
      ['GET', '/approvals'],
    ] as const) {
      const res = await dashboardCall(
        method,
        path,
        method === 'POST' ? { body: { url: 'https://hooks.example.com/x', events: ['*'] } } : {},
      );
      expect(res.status, `${method} ${path}`).toBe(401);
      expect(res.body.error.code).toBe('unauthorized');
    }
    const forged = await dashboardCall('GET', '/webhooks', { headers: { cookie: 'warden_session=forged-session-token-0123456789' } });
    expect(forged.status).toBe(401);
  });

  it('does not accept an API key as a bearer token instead of the session', async () => {
    const res = await request(`${origin}/dashboard/api`, server.key, 'GET', '/webhooks');
    expect(res.status).toBe(401);
  });

  it('answers 403 insufficient_permission to a change without X-CSRF-Token or with a wrong one, and changes nothing', async () => {
    const ws = await freshWorkspace('admin');
    const session = await login(ws.key);
    const other = await login(ws.key);
    const body = { url: 'https://hooks.example.com/csrf', events: ['*'] };
    const attempts: Record<string, string>[] = [
      { cookie: session.cookie },
      { cookie: session.cookie, 'x-csrf-token': 'wrong' },
      { cookie: session.cookie, 'x-csrf-token': other.csrf },
    ];
    for (const headers of attempts) {
      const res = await dashboardCall('POST', '/webhooks', { body, headers });
      expect(res.status).toBe(403);
      expect(res.body.error.code).toBe('insufficient_permission');
    }
    const created = await session.call('POST', '/webhooks', body);
    expect(created.status).toBe(201);
    const id = created.body.data.endpoint.id;
    for (const [method, path, payload] of [
      ['PATCH', `/webhooks/${id}`, { paused: true }],
      ['DELETE', `/webhooks/${id}`, undefined],
      ['POST', `/webhooks/${id}/rotate-secret`, {}],
      ['PUT', '/billing', { plan: 'team' }],
      ['DELETE', '/session', undefined],
    ] as const) {
      const res = await dashboardCall(method, path, { body: payload, headers: { cookie: session.cookie } });
      expect(res.status, `${method} ${path}`).toBe(403);
      expect(res.body.error.code).toBe('insufficient_permission');
    }
    const list = await session.call('GET', '/webhooks');
    expect(list.body.data).toHaveLength(1);
    expect(list.body.data[0]).toMatchObject({ id, paused: false });
    expect((await session.call('GET', '/billing')).body.data.plan).toBe('free');
    expect((await session.call('GET', '/session')).status).toBe(200);
  });

  it('ends the session when its key is revoked', async () => {
    const ws = await freshWorkspace('admin');
    const session = await login(ws.key);
    expect((await session.call('GET', '/webhooks')).status).toBe(200);
    await server.admin('keys.revoke', { id: ws.keyId });
    const res = await session.call('GET', '/webhooks');
    expect(res.status).toBe(401);
    expect(res.body.error.code).toBe('unauthorized');
    expect((await session.call('POST', '/webhooks', { url: 'https://hooks.example.com/x', events: ['*'] })).status).toBe(401);
  });

  it('logout (DELETE /session) ends the session and clears the cookie', async () => {
    const ws = await freshWorkspace('admin');
    const session = await login(ws.key);
    const res = await fetch(`${origin}/dashboard/api/session`, {
      method: 'DELETE',
      headers: { cookie: session.cookie, 'x-csrf-token': session.csrf },
    });
    expect(res.status).toBe(200);
    const cleared = sessionCookieOf(res) as string;
    expect(cleared).toBeDefined();
    expect(cleared).toMatch(/^warden_session=;/);
    expect(cleared.toLowerCase()).toMatch(/max-age=0|expires=thu, 01 jan 1970/);
    expect(cleared.toLowerCase()).toContain('path=/dashboard');
    const after = await session.call('GET', '/webhooks');
    expect(after.status).toBe(401);
    // Another session of the same key is not affected.
    const second = await login(ws.key);
    expect((await second.call('GET', '/webhooks')).status).toBe(200);
  });
});

describe('webhook endpoints (/webhooks)', () => {
  it('creates, lists, gets, updates and deletes an endpoint; the secret is shown only on creation', async () => {
    const ws = await freshWorkspace('admin');
    const session = await login(ws.key);
    const created = await session.call('POST', '/webhooks', {
      url: 'https://hooks.example.com/crud',
      events: ['agent.created', 'billing.updated'],
      description: 'CRUD',
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

    const list = await session.call('GET', '/webhooks');
    expect(list.status).toBe(200);
    expect(list.body).toEqual({ data: [endpoint], has_more: false, next_cursor: null });
    expect(JSON.stringify(list.body)).not.toContain(secret);
    const got = await session.call('GET', `/webhooks/${endpoint.id}`);
    expect(got.status).toBe(200);
    expect(got.body.data).toEqual(endpoint);

    const patched = await session.call('PATCH', `/webhooks/${endpoint.id}`, { events: ['*'], description: null, paused: true });
    expect(patched.status).toBe(200);
    expect(patched.body.data).toMatchObject({ id: endpoint.id, events: ['*'], description: null, paused: true });
    const resumed = await session.call('PATCH', `/webhooks/${endpoint.id}`, { paused: false });
    expect(resumed.body.data.paused).toBe(false);

    const deleted = await session.call('DELETE', `/webhooks/${endpoint.id}`);
    expect(deleted.status).toBe(200);
    expect(deleted.body).toEqual({ data: { id: endpoint.id, deleted: true } });
    const gone = await session.call('GET', `/webhooks/${endpoint.id}`);
    expect(gone.status).toBe(404);
    expect(gone.body.error.code).toBe('not_found');
    expect((await session.call('DELETE', `/webhooks/${endpoint.id}`)).status).toBe(404);
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
    const res = await session.call('POST', '/webhooks', body);
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('invalid_request');
    expect((await session.call('GET', '/webhooks')).body.data).toEqual([]);
  });

  it('rotates the secret with a default overlap of 24 hours', async () => {
    const ws = await freshWorkspace('admin');
    const session = await login(ws.key);
    const created = (await session.call('POST', '/webhooks', { url: 'https://hooks.example.com/rotate', events: ['*'] })).body.data;
    const rotated = await session.call('POST', `/webhooks/${created.endpoint.id}/rotate-secret`);
    expect(rotated.status).toBe(200);
    expect(rotated.body.data.secret).toMatch(/^whsec_/);
    expect(rotated.body.data.secret).not.toBe(created.secret);
    const until24h = Date.parse(rotated.body.data.endpoint.secret_rotating_until) - Date.now();
    expect(until24h).toBeGreaterThan(23.9 * 3_600_000);
    expect(until24h).toBeLessThanOrEqual(24 * 3_600_000);
    const ended = await session.call('POST', `/webhooks/${created.endpoint.id}/rotate-secret`, { overlap_seconds: 0 });
    expect(ended.status).toBe(200);
    expect(ended.body.data.endpoint.secret_rotating_until).toBeNull();
    const tooLong = await session.call('POST', `/webhooks/${created.endpoint.id}/rotate-secret`, { overlap_seconds: 604801 });
    expect(tooLong.status).toBe(400);
  });

  it('sends a signed webhook.test event, shows it in the delivery history, and replays it with the same webhook-id', async () => {
    const ws = await freshWorkspace('admin');
    const session = await login(ws.key);
    const receiver = await startReceiver();
    // Subscribed to agent.created only: the test event is sent anyway.
    const created = (await session.call('POST', '/webhooks', { url: receiver.url, events: ['agent.created'] })).body.data;
    const id = created.endpoint.id;

    const test = await session.call('POST', `/webhooks/${id}/test`);
    expect(test.status).toBe(202);
    expect(test.body.data).toMatchObject({ endpoint_id: id, event_type: 'webhook.test', status: 'pending', attempts: 0 });
    const first = await until('the test event', () => receiver.received[0]);
    expect(first.payload).toMatchObject({ type: 'webhook.test', workspace_id: ws.id, id: test.body.data.event_id });
    expect(first.headers['webhook-id']).toBe(test.body.data.event_id);
    expect(verify(first, created.secret)).toEqual(first.payload);

    const history = await until('a succeeded delivery', async () => {
      const res = await session.call('GET', `/webhooks/${id}/deliveries`);
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
    expect(history.data[0].last_attempt_at).toEqual(expect.any(String));

    const replay = await session.call('POST', `/webhooks/${id}/deliveries/${test.body.data.id}/replay`);
    expect(replay.status).toBe(202);
    expect(replay.body.data).toMatchObject({ status: 'pending', event_id: test.body.data.event_id, event_type: 'webhook.test' });
    const second = await until('the replay', () => receiver.received[1]);
    expect(second.headers['webhook-id']).toBe(first.headers['webhook-id']);
    expect(second.body).toBe(first.body);
    expect(verify(second, created.secret)).toEqual(first.payload);
    const after = await session.call('GET', `/webhooks/${id}/deliveries`);
    expect(after.body.data.map((d: { id: string }) => d.id).sort()).toEqual([test.body.data.id, replay.body.data.id].sort());

    const unknown = await session.call('POST', `/webhooks/${id}/deliveries/00000000-0000-4000-8000-000000000000/replay`);
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
      const res = await session.call(method, path, method === 'PATCH' ? { paused: true } : undefined);
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
    ]) {
      const res = await session.call('POST', '/webhooks', body);
      expect(res.status, body.description).toBe(400);
      expect(res.body.error.code).toBe('invalid_request');
    }
    expect((await session.call('GET', '/webhooks')).body.data).toEqual([]);
    expect((await session.call('POST', '/webhooks', { url: 'https://hooks.example.com/ok', events: ['agent.created'] })).status).toBe(201);
  });
});

describe('approvals (/approvals)', () => {
  it('deciding needs approvals:decide: a key with admin only gets 403, one with both approves', async () => {
    const ws = await freshWorkspace('*');
    const approval = await server.api('POST', '/approvals', { key: ws.key, body: { title: 'Refund 250 EUR' } });
    expect(approval.status).toBe(201);
    const id = approval.body.data.id;

    const adminOnly = await login((await newKey(ws.slug, 'admin')).key);
    const listed = await adminOnly.call('GET', '/approvals');
    expect(listed.status).toBe(200);
    expect(listed.body.data.map((a: { id: string }) => a.id)).toContain(id);
    const refused = await adminOnly.call('PATCH', `/approvals/${id}`, { status: 'approved' });
    expect(refused.status).toBe(403);
    expect(refused.body.error.code).toBe('insufficient_permission');
    expect((await server.api('GET', `/approvals/${id}`, { key: ws.key })).body.data.status).toBe('pending');

    const decider = await login((await newKey(ws.slug, 'admin,approvals:decide')).key);
    const rejectedWithoutNote = await decider.call('PATCH', `/approvals/${id}`, { status: 'rejected' });
    expect(rejectedWithoutNote.status).toBe(400);
    expect(rejectedWithoutNote.body.error.code).toBe('decision_note_required');
    const approved = await decider.call('PATCH', `/approvals/${id}`, { status: 'approved', decision_note: 'ok' });
    expect(approved.status).toBe(200);
    expect(approved.body.data).toMatchObject({ id, status: 'approved', decision_note: 'ok' });
    expect(approved.body.data.decided_by).toEqual(expect.any(String));
    const again = await decider.call('PATCH', `/approvals/${id}`, { status: 'rejected', decision_note: 'changed my mind' });
    expect(again.status).toBe(409);
  });

  it('reading audit, agents and compliance needs their own permission besides admin', async () => {
    const ws = await freshWorkspace('*');
    const adminOnly = await login((await newKey(ws.slug, 'admin')).key);
    for (const path of ['/audit-logs', '/audit/verify', '/agents', '/compliance']) {
      const res = await adminOnly.call('GET', path);
      expect(res.status, path).toBe(403);
      expect(res.body.error.code).toBe('insufficient_permission');
    }
    const reader = await login((await newKey(ws.slug, 'admin,audit:read,agents:read,compliance:read')).key);
    for (const path of ['/audit-logs', '/audit/verify', '/agents', '/compliance']) {
      expect((await reader.call('GET', path)).status, path).toBe(200);
    }
  });
});

describe('billing (/billing)', () => {
  it('changing the plan fires billing.updated; setting the same plan again does not', async () => {
    const ws = await freshWorkspace('admin');
    const session = await login(ws.key);
    const receiver = await startReceiver();
    const created = (await session.call('POST', '/webhooks', { url: receiver.url, events: ['billing.updated'] })).body.data;

    expect((await session.call('GET', '/billing')).body.data).toMatchObject({ plan: 'free', billing_status: expect.any(String) });
    const changed = await session.call('PUT', '/billing', { plan: 'team' });
    expect(changed.status).toBe(200);
    expect(changed.body.data.plan).toBe('team');
    expect((await session.call('GET', '/billing')).body.data.plan).toBe('team');
    expect((await session.call('GET', '/session')).body.data.workspace.plan).toBe('team');

    const event = await until('billing.updated', () => receiver.received[0]);
    expect(event.payload).toMatchObject({ type: 'billing.updated', workspace_id: ws.id, data: { plan: 'team', previous_plan: 'free' } });
    expect(verify(event, created.secret)).toEqual(event.payload);

    expect((await session.call('PUT', '/billing', { plan: 'team' })).status).toBe(200);
    expect((await session.call('PUT', '/billing', { plan: 'enterprise' })).status).toBe(200);
    const second = await until('the second billing.updated', () => receiver.received[1]);
    expect(second.payload.data).toMatchObject({ plan: 'enterprise', previous_plan: 'team' });
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(receiver.received).toHaveLength(2);
  });

  it('answers 400 invalid_request for an unknown plan', async () => {
    const ws = await freshWorkspace('admin');
    const session = await login(ws.key);
    const res = await session.call('PUT', '/billing', { plan: 'platinum' });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('invalid_request');
    expect((await session.call('GET', '/billing')).body.data.plan).toBe('free');
  });
});

describe('GET /dashboard/ (the web app)', () => {
  it("serves the HTML page with Content-Security-Policy default-src 'self'", async () => {
    const res = await fetch(`${origin}/dashboard/`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/html/);
    const csp = res.headers.get('content-security-policy') ?? '';
    expect(csp.split(';').map((d) => d.trim())).toContain("default-src 'self'");
    expect(csp).not.toMatch(/unsafe-inline|unsafe-eval/);
    const html = await res.text();
    expect(html).toMatch(/<html/i);
    expect(html).not.toMatch(/<script(?![^>]*\bsrc=)[^>]*>/i);
  });

  it('redirects /dashboard to /dashboard/', async () => {
    const res = await fetch(`${origin}/dashboard`, { redirect: 'manual' });
    expect([301, 302, 308]).toContain(res.status);
    expect(new URL(res.headers.get('location') ?? '', origin).pathname).toBe('/dashboard/');
  });
});

describe('tenant isolation', () => {
  it("a session of workspace B can neither see nor change workspace A's webhooks or approvals (404)", async () => {
    const a = await freshWorkspace('admin');
    const b = await freshWorkspace('admin');
    const sessionA = await login(a.key);
    const sessionB = await login(b.key);
    const receiver = await startReceiver();
    const created = (await sessionA.call('POST', '/webhooks', { url: receiver.url, events: ['*'], description: 'A only' })).body.data;
    const id = created.endpoint.id;
    const test = await sessionA.call('POST', `/webhooks/${id}/test`);
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
      const res = await sessionB.call(method, path, body);
      expect(res.status, `${method} ${path}`).toBe(404);
      expect(res.body.error.code).toBe('not_found');
    }
    expect((await sessionB.call('GET', '/webhooks')).body.data).toEqual([]);

    // Nor decide its approvals.
    const approval = await server.api('POST', '/approvals', {
      key: (await newKey(a.slug, 'approvals:write')).key,
      body: { title: 'A only' },
    });
    expect(approval.status).toBe(201);
    const deciderB = await login((await newKey(b.slug, 'admin,approvals:decide')).key);
    const decided = await deciderB.call('PATCH', `/approvals/${approval.body.data.id}`, { status: 'approved' });
    expect(decided.status).toBe(404);
    expect((await deciderB.call('GET', '/approvals')).body.data).toEqual([]);

    // B's own endpoint cannot replay A's delivery either.
    const own = (await sessionB.call('POST', '/webhooks', { url: 'https://hooks.example.com/b', events: ['*'] })).body.data;
    expect((await sessionB.call('POST', `/webhooks/${own.endpoint.id}/deliveries/${deliveryId}/replay`)).status).toBe(404);

    const still = await sessionA.call('GET', `/webhooks/${id}`);
    expect(still.status).toBe(200);
    expect(still.body.data).toEqual(created.endpoint);
    await new Promise((resolve) => setTimeout(resolve, 400));
    expect(receiver.received).toHaveLength(1);
    expect(verify(receiver.received[0] as Received, created.secret).type).toBe('webhook.test');
  });
});
