/**
 * The dashboard API's API keys (/dashboard/api/keys): listing (never a secret), issuing with
 * chosen permissions (the secret shown once; the CLI's rules; no permission the session's key
 * lacks), revoking (at once, audited), and what a session may not do: grant more than it holds,
 * revoke its own key, touch another workspace's keys. Shared helpers: ./support/dashboard.ts.
 */
import { describe, expect, it } from 'vitest';
import { useTestServer } from '../support/server.ts';
import { dashboardHelpers, UUID } from './support/dashboard.ts';

const server = useTestServer();
const { login, freshWorkspace, newKey, dashboardCall } = dashboardHelpers(server);

/** The configuration audit events of `action` about `resource`, read through v1 with `key`. */
async function configurationEvents(key: string, action: string, resource: string) {
  const page = await server.api('GET', '/audit-logs', { key, query: { action, limit: 100 } });
  expect(page.status).toBe(200);
  return page.body.data.filter((e) => e.resource === resource && e.source === 'configuration');
}

describe('issuing a key (POST /keys)', () => {
  it('answers the secret once; the key works on v1 with exactly its permissions; listings never show it', async () => {
    const ws = await freshWorkspace('*');
    const session = await login(ws.key);
    const created = await session.api('POST', '/keys', {
      body: { name: 'CI reader', permissions: ['agents:read', 'agents:read', 'audit:read'] },
    });
    expect(created.status).toBe(201);
    const { key, secret } = created.body.data;
    expect(secret).toMatch(/^wk_[A-Za-z0-9_-]{43}$/);
    expect(key).toEqual({
      id: expect.stringMatching(UUID),
      name: 'CI reader',
      prefix: secret.slice(0, 7),
      permissions: ['agents:read', 'audit:read'],
      created_at: expect.any(String),
      revoked_at: null,
    });

    expect((await server.api('GET', '/agents', { key: secret })).status).toBe(200);
    const refused = await server.api('POST', '/agents', { key: secret, body: { name: 'Nope', provider: 'local' } });
    expect(refused.status).toBe(403);
    expect(refused.body.error.code).toBe('insufficient_permission');

    const list = await session.api('GET', '/keys');
    expect(list.status).toBe(200);
    expect(list.body.data[0]).toEqual(key);
    expect(list.body.data.map((k) => k.id)).toContain(ws.keyId);
    expect(JSON.stringify(list.body)).not.toContain(secret);
    expect(JSON.stringify(list.body)).not.toContain(ws.key);
    expect(Object.keys(list.body.data[0] ?? {}).sort()).toEqual(['created_at', 'id', 'name', 'permissions', 'prefix', 'revoked_at']);

    const [event] = await configurationEvents(ws.key, 'api_key.created', key.id);
    expect(event).toMatchObject({ user: expect.stringMatching(/^dashboard:[0-9a-f-]{36}$/), result: 'allowed' });
    expect(event?.context).toEqual({ name: 'CI reader', permissions: ['agents:read', 'audit:read'] });
    expect(JSON.stringify(event)).not.toContain(secret);
  });

  it('pages through keys newest first', async () => {
    const ws = await freshWorkspace('*');
    const session = await login(ws.key);
    for (const name of ['one', 'two', 'three']) {
      expect((await session.api('POST', '/keys', { body: { name, permissions: ['audit:read'] } })).status).toBe(201);
    }
    const first = await session.api('GET', '/keys', { query: { limit: 2 } });
    expect(first.body.data.map((k) => k.name)).toEqual(['three', 'two']);
    expect(first.body.has_more).toBe(true);
    const second = await session.api('GET', '/keys', { query: { limit: 2, cursor: first.body.next_cursor as string } });
    expect(second.body.data.map((k) => k.name)).toEqual(['one', expect.any(String)]);
    expect(second.body.has_more).toBe(false);
  });

  it('answers 400 invalid_request naming cursor for a cursor it did not write, on every new list', async () => {
    const ws = await freshWorkspace('*');
    const session = await login(ws.key);
    const crafted = Buffer.from(JSON.stringify(['2024-02-30T00:00:00.000Z', 'x'])).toString('base64url');
    for (const path of ['/keys', '/policies', '/mcp-servers'] as const) {
      const res = await session.api('GET', path, { query: { cursor: crafted } });
      expect(res.status, path).toBe(400);
      expect(res.body.error.code).toBe('invalid_request');
      expect(res.body.error.message).toMatch(/cursor/);
    }
  });

  it('refuses a permission the session’s key lacks (403), so approvals:decide is never reached through admin', async () => {
    const ws = await freshWorkspace('*');
    const adminOnly = await login((await newKey(ws.slug, 'admin,agents:read')).key);
    for (const permissions of [['approvals:decide'], ['agents:read', 'agents:write'], ['admin', 'audit:read']] as const) {
      const res = await adminOnly.api('POST', '/keys', { body: { name: 'escalate', permissions: [...permissions] } });
      expect(res.status, permissions.join()).toBe(403);
      expect(res.body.error.code).toBe('insufficient_permission');
    }
    expect((await adminOnly.api('POST', '/keys', { body: { name: 'fine', permissions: ['agents:read', 'admin'] } })).status).toBe(201);
    const names = (await adminOnly.api('GET', '/keys')).body.data.map((k) => k.name);
    expect(names).not.toContain('escalate');
  });

  it('answers 400 for no permission, an unknown one, or no name; and 403 without the CSRF token', async () => {
    const ws = await freshWorkspace('*');
    const session = await login(ws.key);
    for (const body of [
      { name: 'none', permissions: [] },
      { name: 'unknown', permissions: ['root'] },
      { name: 'star', permissions: ['*'] },
      { name: '', permissions: ['audit:read'] },
      { permissions: ['audit:read'] },
    ]) {
      const res = await session.api('POST', '/keys', { body, unchecked: true });
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.body.error.code).toBe('invalid_request');
    }
    const forged = await dashboardCall('POST', '/keys', {
      body: { name: 'csrf', permissions: ['audit:read'] },
      headers: { cookie: session.cookie },
    });
    expect(forged.status).toBe(403);
    expect((await session.api('GET', '/keys')).body.data.map((k) => k.name)).toEqual([expect.any(String)]);
  });
});

describe('revoking a key (DELETE /keys/{id})', () => {
  it('revokes at once (v1 answers 401), records api_key.revoked, and a second revoke is 404', async () => {
    const ws = await freshWorkspace('*');
    const session = await login(ws.key);
    const { key, secret } = (await session.api('POST', '/keys', { body: { name: 'short-lived', permissions: ['agents:read'] } })).body.data;
    expect((await server.api('GET', '/agents', { key: secret })).status).toBe(200);

    const revoked = await session.api('DELETE', `/keys/${key.id}`);
    expect(revoked.status).toBe(200);
    expect(revoked.body.data).toMatchObject({ id: key.id, name: 'short-lived', revoked_at: expect.any(String) });
    const after = await server.api('GET', '/agents', { key: secret });
    expect(after.status).toBe(401);
    expect((await session.api('GET', '/keys')).body.data.find((k) => k.id === key.id)?.revoked_at).toEqual(expect.any(String));

    const [event] = await configurationEvents(ws.key, 'api_key.revoked', key.id);
    expect(event).toMatchObject({ severity: 'medium', user: expect.stringMatching(/^dashboard:/), context: { name: 'short-lived' } });

    const again = await session.api('DELETE', `/keys/${key.id}`);
    expect(again.status).toBe(404);
    expect(again.body.error.code).toBe('not_found');
  });

  it('ends the dashboard sessions of the revoked key', async () => {
    const ws = await freshWorkspace('*');
    const session = await login(ws.key);
    const other = await newKey(ws.slug, 'admin');
    const otherSession = await login(other.key);
    expect((await otherSession.api('GET', '/session')).status).toBe(200);
    expect((await session.api('DELETE', `/keys/${other.id}`)).status).toBe(200);
    expect((await otherSession.api('GET', '/session')).status).toBe(401);
  });

  it('refuses to revoke the key the session signed in with (409)', async () => {
    const ws = await freshWorkspace('*');
    const session = await login(ws.key);
    const res = await session.api('DELETE', `/keys/${ws.keyId}`);
    expect(res.status).toBe(409);
    expect(res.body.error.code).toBe('conflict');
    expect((await session.api('GET', '/session')).status).toBe(200);
  });

  it('cannot see or revoke another workspace’s keys (404), which keep working', async () => {
    const mine = await freshWorkspace('*');
    const theirs = await freshWorkspace('*');
    const session = await login(mine.key);
    const res = await session.api('DELETE', `/keys/${theirs.keyId}`);
    expect(res.status).toBe(404);
    expect(res.body.error.code).toBe('not_found');
    expect((await server.api('GET', '/agents', { key: theirs.key })).status).toBe(200);
    expect((await session.api('GET', '/keys')).body.data.map((k) => k.id)).not.toContain(theirs.keyId);
    expect(await configurationEvents(theirs.key, 'api_key.revoked', theirs.keyId)).toEqual([]);
  });
});
