/**
 * The dashboard API (/dashboard/api, spec/dist/dashboard.json) as a browser signs in: login with a
 * workspace key holding `admin` (an HttpOnly SameSite=Strict session cookie, Secure off loopback),
 * the session, the CSRF token every change needs, revocation and logout. Real HTTP with fetch;
 * cookies carried by hand. Shared helpers: ./support/dashboard.ts.
 */
import { request as httpRequest } from 'node:http';
import type { dashboard } from '@warden/contract';
import { describe, expect, it } from 'vitest';
import { request, useTestServer } from '../support/server.ts';
import { dashboardHelpers, sessionCookieOf } from './support/dashboard.ts';

const server = useTestServer({ egressAllowlist: ['127.0.0.1/32'] });
const { postSession, dashboardCall, login, freshWorkspace } = dashboardHelpers(server);

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
    const { port } = new URL(server.origin);
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
    const res = await session.api('GET', '/session');
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
    const res = await request(`${server.origin}/dashboard/api`, server.key, 'GET', '/webhooks');
    expect(res.status).toBe(401);
  });

  it('answers 403 csrf_token_invalid to a change without X-CSRF-Token or with a wrong one, and changes nothing', async () => {
    const ws = await freshWorkspace('admin');
    const session = await login(ws.key);
    const other = await login(ws.key);
    const body: dashboard.WebhookEndpointCreate = { url: 'https://hooks.example.com/csrf', events: ['*'] };
    const attempts: Record<string, string>[] = [
      { cookie: session.cookie },
      { cookie: session.cookie, 'x-csrf-token': 'wrong' },
      { cookie: session.cookie, 'x-csrf-token': other.csrf },
    ];
    for (const headers of attempts) {
      const res = await dashboardCall('POST', '/webhooks', { body, headers });
      expect(res.status).toBe(403);
      expect(res.body.error.code).toBe('csrf_token_invalid');
    }
    const created = await session.api('POST', '/webhooks', { body });
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
      expect(res.body.error.code).toBe('csrf_token_invalid');
    }
    const list = await session.api('GET', '/webhooks');
    expect(list.body.data).toHaveLength(1);
    expect(list.body.data[0]).toMatchObject({ id, paused: false });
    expect((await session.api('GET', '/billing')).body.data.plan).toBe('free');
    expect((await session.api('GET', '/session')).status).toBe(200);
  });

  it('ends the session when its key is revoked', async () => {
    const ws = await freshWorkspace('admin');
    const session = await login(ws.key);
    expect((await session.api('GET', '/webhooks')).status).toBe(200);
    await server.admin('keys.revoke', { id: ws.keyId });
    const res = await session.api('GET', '/webhooks');
    expect(res.status).toBe(401);
    expect(res.body.error.code).toBe('unauthorized');
    expect((await session.api('POST', '/webhooks', { body: { url: 'https://hooks.example.com/x', events: ['*'] } })).status).toBe(401);
  });

  it('logout (DELETE /session) ends the session and clears the cookie', async () => {
    const ws = await freshWorkspace('admin');
    const session = await login(ws.key);
    const res = await fetch(`${server.origin}/dashboard/api/session`, {
      method: 'DELETE',
      headers: { cookie: session.cookie, 'x-csrf-token': session.csrf },
    });
    expect(res.status).toBe(200);
    const cleared = sessionCookieOf(res) as string;
    expect(cleared).toBeDefined();
    expect(cleared).toMatch(/^warden_session=;/);
    expect(cleared.toLowerCase()).toMatch(/max-age=0|expires=thu, 01 jan 1970/);
    expect(cleared.toLowerCase()).toContain('path=/dashboard');
    const after = await session.api('GET', '/webhooks');
    expect(after.status).toBe(401);
    // Another session of the same key is not affected.
    const second = await login(ws.key);
    expect((await second.api('GET', '/webhooks')).status).toBe(200);
  });
});
