/**
 * Servers cache the identity of API keys (apps/server/src/http/key-cache.ts) and learn of
 * changes by NOTIFY. These tests change keys, workspaces and policies behind the server's back
 * (plain SQL, as another process would) and through a second server process, and check that the
 * next requests see the change: nothing is served from a stale identity.
 */
import { randomBytes } from 'node:crypto';
import { sql } from 'kysely';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../apps/server/src/logger.ts';
import { type RunningServer, startServer } from '../../apps/server/src/server.ts';
import { hashSecret } from '../../apps/server/src/shared/crypto.ts';
import { keyFor, request, startTestServer, type TestServer } from '../support/server.ts';

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer();
});
afterAll(async () => {
  await server?.close();
});

/** Notifications arrive in a few milliseconds; the bound leaves room for a loaded CI machine. */
const NOTIFIED_WITHIN_MS = 500;

let workspaces = 0;
/** A key of a workspace of its own, with an agent `bot` to decide for. */
async function freshWorkspace(): Promise<string> {
  const key = await keyFor(server, 'agents:read,agents:write,policies:write,runtime:evaluate', `key-cache-${++workspaces}`);
  expect((await server.api('POST', '/agents', { key, body: { name: 'Bot', slug: 'bot', provider: 'local' } })).status).toBe(201);
  return key;
}

/** A policy blocking `db.drop` in the key's workspace; its id. */
async function blockDrops(key: string): Promise<string> {
  const created = await server.api('POST', '/policies', {
    key,
    body: { name: 'No drops', rules: [{ match: { action: ['db.drop'] }, effect: 'block' }] },
  });
  expect(created.status).toBe(201);
  return created.body.data.id;
}

/** The decision on `db.drop` by agent `bot`, asked of the server at `url`. */
const decideDrop = async (key: string, url = server.url) =>
  (await request(url, key, 'POST', '/policy/evaluate', { body: { input: { action: 'db.drop', agent: 'bot' } } })).body.data;

/** Polls `probe` until it returns true, for at most `ms`; returns how long it took, or -1. */
async function within(ms: number, probe: () => Promise<boolean>): Promise<number> {
  const started = performance.now();
  while (performance.now() - started < ms) {
    if (await probe()) return performance.now() - started;
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  return -1;
}

/** A wait from `within` that ended in time for a notification (not -1, the wait that never ended). */
function expectNotified(tookMs: number): void {
  expect(tookMs).toBeGreaterThanOrEqual(0);
  expect(tookMs).toBeLessThan(NOTIFIED_WITHIN_MS);
}

const workspaceOf = async (key: string) =>
  (await sql<{ workspace_id: string }>`SELECT workspace_id FROM api_keys WHERE key_hash = ${hashSecret(key)}`.execute(server.database.db))
    .rows[0]?.workspace_id;

describe('key identities cached by the server', () => {
  it('refuses a key revoked by another process with 401 at once (GET /agents)', async () => {
    const key = await freshWorkspace();
    expect((await server.api('GET', '/agents', { key })).status).toBe(200); // now cached
    await sql`UPDATE api_keys SET revoked_at = now() WHERE key_hash = ${hashSecret(key)}`.execute(server.database.db);
    const took = await within(2_000, async () => (await server.api('GET', '/agents', { key })).status === 401);
    expect(took).toBeGreaterThanOrEqual(0);
    expect(took).toBeLessThan(NOTIFIED_WITHIN_MS);
  });

  it('applies a rate limit changed by another process to the next answers (X-RateLimit-Limit)', async () => {
    const key = await freshWorkspace();
    const before = await server.api('GET', '/agents', { key });
    expect(before.headers.get('x-ratelimit-limit')).not.toBe('7');
    await sql`UPDATE workspaces SET rate_limit_per_minute = 7 WHERE id = ${await workspaceOf(key)}`.execute(server.database.db);
    const took = await within(2_000, async () => (await server.api('GET', '/agents', { key })).headers.get('x-ratelimit-limit') === '7');
    expect(took).toBeGreaterThanOrEqual(0);
    expect(took).toBeLessThan(NOTIFIED_WITHIN_MS);
  });

  it('applies a policy disabled by another process to the next decision (POST /policy/evaluate)', async () => {
    const key = await freshWorkspace();
    const policyId = await blockDrops(key);
    const decide = () => decideDrop(key);
    expect(await decide()).toMatchObject({ action: 'block' });
    await sql`UPDATE policies SET enabled = false WHERE id = ${policyId}`.execute(server.database.db);
    const took = await within(2_000, async () => (await decide()).action === 'allow');
    expect(took).toBeGreaterThanOrEqual(0);
    expect(took).toBeLessThan(NOTIFIED_WITHIN_MS);
  });

  it('applies a policy change made through this server to its very next decision', async () => {
    const key = await freshWorkspace();
    const policyId = await blockDrops(key);
    const decide = () => decideDrop(key);
    for (let round = 0; round < 5; round++) {
      expect(await decide()).toMatchObject({ action: 'block' });
      expect((await server.api('PATCH', `/policies/${policyId}`, { key, body: { enabled: false } })).status).toBe(200);
      expect(await decide()).toMatchObject({ action: 'allow' });
      expect((await server.api('PATCH', `/policies/${policyId}`, { key, body: { enabled: true } })).status).toBe(200);
    }
  });

  const shared = process.env.DATABASE_URL;
  describe.skipIf(!shared)('on PostgreSQL (needs DATABASE_URL)', () => {
    const databaseUrl = () => String((server.database.pool?.options as { connectionString?: string } | undefined)?.connectionString);

    it('serves nothing from the cache while its notification connection is down, and recovers', async () => {
      const key = await freshWorkspace();
      expect((await server.api('GET', '/agents', { key })).status).toBe(200); // cached
      const admin = new pg.Client({ connectionString: databaseUrl() });
      await admin.connect();
      try {
        const listeners = async () =>
          (
            await admin.query(
              `SELECT pid FROM pg_stat_activity WHERE application_name = 'warden-listener' AND datname = current_database()`,
            )
          ).rows;
        expect(await listeners()).toHaveLength(1);
        await admin.query(
          `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'warden-listener' AND datname = current_database()`,
        );
        // The revocation's notification has nobody to reach: the server must not rely on it.
        await admin.query(`UPDATE api_keys SET revoked_at = now() WHERE key_hash = $1`, [hashSecret(key)]);
        await new Promise((resolve) => setTimeout(resolve, 50));
        expect((await server.api('GET', '/agents', { key })).status).toBe(401);
        // It listens again by itself (backoff starts at 0.5 s) and keys keep working meanwhile.
        const other = await freshWorkspace();
        expect((await server.api('GET', '/agents', { key: other })).status).toBe(200);
        expect(await within(5_000, async () => (await listeners()).length === 1)).toBeGreaterThanOrEqual(0);
        expect((await server.api('GET', '/agents', { key })).status).toBe(401);
        expect((await server.api('GET', '/agents', { key: other })).status).toBe(200);
      } finally {
        await admin.end();
      }
    });

    describe('two server processes on one database', () => {
      let second: RunningServer;
      beforeAll(async () => {
        second = await startServer(
          {
            port: 0,
            host: '127.0.0.1',
            databaseUrl: databaseUrl(),
            dataDir: 'memory://',
            bootstrapKey: `wk_${randomBytes(24).toString('base64url')}`,
          },
          createLogger(true),
        );
      });
      afterAll(async () => {
        await second?.close();
      });

      it('a policy changed through one process decides the other process’s next evaluation', async () => {
        const key = await freshWorkspace();
        const policyId = await blockDrops(key);
        const decideOnSecond = () => decideDrop(key, second.url);
        const waits: number[] = [];
        for (let round = 0; round < 5; round++) {
          expect(await decideOnSecond()).toMatchObject({ action: 'block' });
          expect((await server.api('PATCH', `/policies/${policyId}`, { key, body: { enabled: false } })).status).toBe(200);
          waits.push(await within(2_000, async () => (await decideOnSecond()).action === 'allow'));
          expect((await server.api('PATCH', `/policies/${policyId}`, { key, body: { enabled: true } })).status).toBe(200);
          expect(await within(2_000, async () => (await decideOnSecond()).action === 'block')).toBeGreaterThanOrEqual(0);
        }
        for (const wait of waits) expectNotified(wait);
      });

      it('a key revoked by the CLI path is refused by both processes', async () => {
        const key = await freshWorkspace();
        expect((await request(second.url, key, 'GET', '/agents', {})).status).toBe(200);
        expect((await server.api('GET', '/agents', { key })).status).toBe(200);
        const listed = await server.admin('keys.list', { workspace: `key-cache-${workspaces}` });
        const id = (listed as Array<{ id: string; prefix: string }>).find((k) => key.startsWith(k.prefix))?.id;
        expect(id).toBeDefined();
        // Revoked in the database (as the CLI does), so both processes learn of it by notification.
        await server.admin('keys.revoke', { id });
        expectNotified(await within(2_000, async () => (await request(second.url, key, 'GET', '/agents', {})).status === 401));
        expectNotified(await within(2_000, async () => (await server.api('GET', '/agents', { key })).status === 401));
      });
    });
  });
});
