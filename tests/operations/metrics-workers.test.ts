/**
 * Metrics with WARDEN_WORKERS=2 (PostgreSQL only: the embedded database admits one process):
 * the supervisor answers the scrape on WARDEN_METRICS_PORT with both server processes'
 * metrics aggregated, so the counters move by exactly the workload, whichever process served it.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ChildServer, freePort, randomKey, startChildServer } from '../reliability/support/child-server.ts';
import { freshDatabase } from '../support/database.ts';
import { request } from '../support/server.ts';

const BASE_URL = process.env.DATABASE_URL;
const EVALUATIONS = 40;

const total = (text: string, name: string, labels: Record<string, string>) =>
  text
    .split('\n')
    .filter((line) => line.startsWith(`${name}{`) && Object.entries(labels).every(([k, v]) => line.includes(`${k}="${v}"`)))
    .reduce((sum, line) => sum + Number(line.split(' ').at(-1)), 0);

describe.skipIf(!BASE_URL)('metrics of WARDEN_WORKERS=2, aggregated by the supervisor', () => {
  const key = randomKey('metrics_workers');
  let server: ChildServer;
  let drop: (() => Promise<void>) | undefined;
  let metricsUrl = '';

  beforeAll(async () => {
    const db = await freshDatabase(BASE_URL as string, 'warden_metrics_workers');
    drop = db.drop;
    const metricsPort = await freePort();
    metricsUrl = `http://127.0.0.1:${metricsPort}/metrics`;
    server = await startChildServer({
      env: {
        DATABASE_URL: db.url,
        WARDEN_BOOTSTRAP_KEY: key,
        WARDEN_WORKERS: '2',
        WARDEN_METRICS_PORT: String(metricsPort),
        WARDEN_RATE_LIMIT_PER_MINUTE: '1000000',
      },
    });
    const agent = await request(server.url, key, 'POST', '/agents', { body: { name: 'Pair Bot', provider: 'local', slug: 'pair-bot' } });
    expect(agent.status).toBe(201);
  }, 180_000);

  afterAll(async () => {
    await server?.stop(20_000);
    await drop?.();
  });

  it('counts every evaluation once, whichever process answered it', async () => {
    const scrape = async () => {
      const res = await fetch(metricsUrl);
      expect(res.status).toBe(200);
      return res.text();
    };
    const before = await scrape();
    // separate connections, so that both processes get some of them
    const answers = await Promise.all(
      Array.from({ length: EVALUATIONS }, (_, i) =>
        request(server.url, key, 'POST', '/policy/evaluate', {
          headers: { connection: 'close' },
          body: { input: { action: 'orders.read', agent: 'pair-bot', resource: `orders/${i}` } },
        }),
      ),
    );
    expect(answers.every((a) => a.status === 200)).toBe(true);
    const after = await scrape();
    const moved = (name: string, labels: Record<string, string>) => total(after, name, labels) - total(before, name, labels);
    expect(moved('warden_decisions_total', { result: 'allowed' })).toBe(EVALUATIONS);
    expect(moved('warden_http_requests_total', { operation: 'evaluatePolicy', status: '200' })).toBe(EVALUATIONS);
    // both processes' default metrics were collected
    expect(after).toMatch(/^process_resident_memory_bytes \d/m);
  }, 120_000);
});
