/**
 * Rate limits hold under concurrency and across processes: 100 concurrent callers against a
 * quota of N are admitted exactly N times in the window — in one process, and across two
 * server processes sharing one PostgreSQL database (and, with REDIS_URL-style config, Redis).
 */
import { randomBytes } from 'node:crypto';
import { afterAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../apps/server/src/logger.ts';
import { type RunningServer, startServer } from '../../apps/server/src/server.ts';
import { freshDatabase } from '../support/database.ts';
import { request, startTestServer } from '../support/server.ts';

const QUOTA = 25;
const CALLERS = 100;
const closers: Array<() => Promise<void>> = [];
afterAll(async () => {
  for (const close of closers.reverse()) await close().catch(() => undefined);
});

async function burst(urls: string[], key: string): Promise<number[]> {
  return Promise.all(
    Array.from({ length: CALLERS }, (_, i) =>
      request(urls[i % urls.length] as string, key, 'GET', '/agents?limit=1').then((r) => r.status),
    ),
  );
}

const admitted = (statuses: number[]) => statuses.filter((s) => s === 200).length;

describe('rate limit under 100 concurrent callers', () => {
  it('admits exactly the quota in one process, the rest get 429', async () => {
    const server = await startTestServer({ rateLimitPerMinute: QUOTA });
    closers.push(server.close);
    const statuses = await burst([server.url], server.key);
    expect(admitted(statuses)).toBe(QUOTA);
    expect(statuses.filter((s) => s === 429)).toHaveLength(CALLERS - QUOTA);
  });

  const shared = process.env.DATABASE_URL;
  describe.skipIf(!shared)('across two server processes on one PostgreSQL database (needs DATABASE_URL)', () => {
    async function twoServers(redisUrl?: string): Promise<{ urls: string[]; key: string }> {
      const db = await freshDatabase(shared as string, 'warden_test_rl');
      const key = `wk_rl_${randomBytes(24).toString('base64url')}`;
      const servers: RunningServer[] = [];
      for (let i = 0; i < 2; i++) {
        servers.push(
          await startServer(
            {
              port: 0,
              host: '127.0.0.1',
              databaseUrl: db.url,
              dataDir: 'memory://',
              bootstrapKey: key,
              rateLimitPerMinute: QUOTA,
              redisUrl,
            },
            createLogger(true),
          ),
        );
      }
      closers.push(async () => {
        for (const server of servers) await server.close();
        await db.drop();
      });
      return { urls: servers.map((s) => s.url), key };
    }

    it('admits exactly the quota in total with counters in PostgreSQL', async () => {
      const { urls, key } = await twoServers();
      const statuses = await burst(urls, key);
      expect(admitted(statuses)).toBe(QUOTA);
    });

    it('admits exactly the quota in total with counters in Redis', async () => {
      const { urls, key } = await twoServers('redis://127.0.0.1:6379');
      const statuses = await burst(urls, key);
      expect(admitted(statuses)).toBe(QUOTA);
    });
  });
});
