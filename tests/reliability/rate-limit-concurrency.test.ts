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

async function burst(urls: string[], key: string, callers = CALLERS): Promise<number[]> {
  return Promise.all(
    Array.from({ length: callers }, (_, i) =>
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
    async function twoServers(redisUrl?: string, quota = QUOTA): Promise<{ urls: string[]; key: string }> {
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
              rateLimitPerMinute: quota,
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

    // A process leases quota from the store in blocks (QuotaLeases): the total must still be exact.
    it('admits exactly a quota of 600 to 1,000 concurrent callers over both processes, leased in blocks', async () => {
      const { urls, key } = await twoServers('redis://127.0.0.1:6379', 600);
      const statuses = await burst(urls, key, 1_000);
      expect(admitted(statuses)).toBe(600);
      expect(statuses.filter((s) => s !== 200 && s !== 429)).toEqual([]);
    });

    it('never admits more than the quota when one process holds a lease it does not use, and refuses early by at most 1/16 of it', async () => {
      const { urls, key } = await twoServers('redis://127.0.0.1:6379', 1_000);
      const [first, second] = urls as [string, string];
      let admittedFirst = 0;
      for (let i = 0; i < 100; i++) if ((await request(first, key, 'GET', '/agents?limit=1')).status === 200) admittedFirst++;
      expect(admittedFirst).toBe(100);
      const statuses = await burst([second], key, 1_000);
      const total = admittedFirst + admitted(statuses);
      expect(total).toBeLessThanOrEqual(1_000);
      expect(total).toBeGreaterThanOrEqual(1_000 - 1_000 / 16);
      console.log(
        `[rate limit] quota 1000: first process admitted ${admittedFirst} (one at a time), then the second ${admitted(statuses)} of a burst of 1,000`,
      );
    });
  });
});
