/**
 * Dashboard sessions over their life: a login replaces the session it was sent with (new
 * token, new CSRF token), clears expired sessions and keeps a key's newest few; failed logins
 * are limited per client address and per key prefix (the `wk_` + 4 characters listings show).
 * Client addresses are other loopback addresses (127.0.0.x), bound by the client.
 */
import { sql } from 'kysely';
import { Agent, fetch } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_FAILED_LOGINS, MAX_SESSIONS_PER_KEY } from '../../apps/server/src/features/identity/sessions.service.ts';
import { hashSecret } from '../../apps/server/src/shared/crypto.ts';
import { startTestServer, type TestServer } from '../support/server.ts';

let server: TestServer;
let origin: string;
beforeAll(async () => {
  server = await startTestServer();
  origin = new URL(server.url).origin;
});
const agents = new Map<string, Agent>();
afterAll(async () => {
  await Promise.all([...agents.values()].map((a) => a.close()));
  await server?.close();
});

/** An HTTP client whose connections come from `address`. */
function from(address: string): Agent {
  let agent = agents.get(address);
  if (!agent) {
    agent = new Agent({ localAddress: address });
    agents.set(address, agent);
  }
  return agent;
}

interface Login {
  status: number;
  retryAfter: string | null;
  code?: string;
  /** `warden_session=…` */
  cookie?: string;
  csrf?: string;
}

async function login(apiKey: string, options: { address?: string; cookie?: string } = {}): Promise<Login> {
  const res = await fetch(`${origin}/dashboard/api/session`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(options.cookie ? { cookie: options.cookie } : {}) },
    body: JSON.stringify({ api_key: apiKey }),
    dispatcher: from(options.address ?? '127.0.0.1'),
  });
  const body = (await res.json()) as { data?: { csrf_token: string }; error?: { code: string } };
  const cookie = res.headers
    .getSetCookie()
    .map((c) => c.split(';')[0] as string)
    .find((c) => c.startsWith('warden_session='));
  return { status: res.status, retryAfter: res.headers.get('retry-after'), code: body.error?.code, cookie, csrf: body.data?.csrf_token };
}

const sessionStatus = async (cookie: string | undefined) =>
  (await fetch(`${origin}/dashboard/api/session`, { headers: { cookie: cookie as string } })).status;

const tokenOf = (cookie: string | undefined) => (cookie as string).slice('warden_session='.length);

const sessionRows = async (keyId: string) =>
  Number(
    (await sql<{ n: string }>`select count(*) as n from dashboard_sessions where key_id = ${keyId}`.execute(server.database.db)).rows[0]?.n,
  );

let workspaces = 0;
async function adminKey(): Promise<{ key: string; id: string }> {
  const slug = `sessions-${++workspaces}`;
  await server.admin('workspaces.create', { slug });
  return server.admin('keys.create', { workspace: slug, permissions: '*' });
}

/** A key that was never issued, starting with `prefix`. */
const wrongKey = (prefix: string, n: number) => `${prefix}${'z'.repeat(30)}${n}`;

describe('dashboard login: sessions', () => {
  it('POST /session sent with a session cookie ends that session and answers a new token and CSRF token', async () => {
    const { key } = await adminKey();
    const first = await login(key);
    expect(first.status).toBe(200);
    const second = await login(key, { cookie: first.cookie });
    expect(second.status).toBe(200);
    expect(second.cookie).not.toBe(first.cookie);
    expect(second.csrf).not.toBe(first.csrf);
    expect(await sessionStatus(first.cookie)).toBe(401);
    expect(await sessionStatus(second.cookie)).toBe(200);
  });

  it('POST /session deletes expired sessions', async () => {
    const { key } = await adminKey();
    const old = await login(key);
    await sql`update dashboard_sessions set expires_at = now() - interval '1 minute' where token_hash = ${hashSecret(tokenOf(old.cookie))}`.execute(
      server.database.db,
    );
    expect((await login(key)).status).toBe(200);
    const left = await sql`select 1 from dashboard_sessions where token_hash = ${hashSecret(tokenOf(old.cookie))}`.execute(
      server.database.db,
    );
    expect(left.rows).toHaveLength(0);
  });

  it(`POST /session keeps a key's newest ${MAX_SESSIONS_PER_KEY} sessions and ends older ones`, async () => {
    const { key, id } = await adminKey();
    const logins: Login[] = [];
    for (let i = 0; i < MAX_SESSIONS_PER_KEY + 2; i++) logins.push(await login(key));
    expect(logins.map((l) => l.status)).toEqual(logins.map(() => 200));
    expect(await sessionRows(id)).toBe(MAX_SESSIONS_PER_KEY);
    const statuses = await Promise.all(logins.map((l) => sessionStatus(l.cookie)));
    expect(statuses).toEqual([401, 401, ...Array(MAX_SESSIONS_PER_KEY).fill(200)]);
  });
});

describe('dashboard login: failed attempts', () => {
  it(`POST /session answers 429 with Retry-After after ${MAX_FAILED_LOGINS} failed logins with one key prefix from ${MAX_FAILED_LOGINS} addresses, even to the right key`, async () => {
    const target = await adminKey();
    const prefix = target.key.slice(0, 7);
    for (let i = 0; i < MAX_FAILED_LOGINS; i++) {
      expect((await login(wrongKey(prefix, i), { address: `127.0.0.${10 + i}` })).status).toBe(401);
    }
    const refused = await login(wrongKey(prefix, 99), { address: '127.0.0.40' });
    expect(refused).toMatchObject({ status: 429, code: 'rate_limited' });
    expect(Number(refused.retryAfter)).toBeGreaterThan(0);
    expect(Number(refused.retryAfter)).toBeLessThanOrEqual(15 * 60);
    expect((await login(target.key, { address: '127.0.0.41' })).status).toBe(429);
    // Another key, from the same addresses, is not affected.
    let other = await adminKey();
    while (other.key.startsWith(prefix)) other = await adminKey();
    expect((await login(other.key, { address: '127.0.0.40' })).status).toBe(200);
  });

  it(`POST /session answers 429 with Retry-After after ${MAX_FAILED_LOGINS} failed logins from one address, whatever the key, and not to other addresses`, async () => {
    const { key } = await adminKey();
    for (let i = 0; i < MAX_FAILED_LOGINS; i++) {
      expect((await login(wrongKey(`wk_${i}ab`, i), { address: '127.0.0.50' })).status).toBe(401);
    }
    const refused = await login(key, { address: '127.0.0.50' });
    expect(refused).toMatchObject({ status: 429, code: 'rate_limited' });
    expect(Number(refused.retryAfter)).toBeGreaterThan(0);
    expect((await login(key, { address: '127.0.0.51' })).status).toBe(200);
  });

  it('POST /session does not count successful logins or keys without admin as failures', async () => {
    const { key } = await adminKey();
    const reader = await server.admin('keys.create', { workspace: 'default', permissions: 'agents:read' });
    for (let i = 0; i < MAX_FAILED_LOGINS + 2; i++) {
      expect((await login(key, { address: '127.0.0.60' })).status).toBe(200);
      expect((await login(reader.key, { address: '127.0.0.60' })).status).toBe(403);
    }
  });
});
