/**
 * WARDEN_WORKERS: `npm start` as a supervisor of several server processes sharing one port
 * (node:cluster). Refused on the embedded database (one process only). On PostgreSQL: both
 * processes serve, decisions made through either are audited and sealed into one valid chain,
 * a server that dies is replaced while the others go on answering, and SIGTERM to the
 * supervisor stops everything cleanly.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { get } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freshDatabase } from '../support/database.ts';
import { request } from '../support/server.ts';
import { type ChildServer, randomKey, startChildServer } from './support/child-server.ts';

const BASE_URL = process.env.DATABASE_URL;

/** The pids whose parent is `pid` (from /proc). */
function childrenOf(pid: number): number[] {
  const found: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      // the server processes, not the esbuild service tsx starts beside them (its own child of the supervisor)
      const command = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
      if (Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === pid && command !== 'esbuild') found.push(Number(entry));
    } catch {
      // gone meanwhile
    }
  }
  return found;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('WARDEN_WORKERS on the embedded database', () => {
  it('refuses more than one server process: exits 1 naming DATABASE_URL', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'warden-workers-'));
    try {
      await expect(startChildServer({ env: { WARDEN_DATA_DIR: dir, WARDEN_WORKERS: '2' }, readyTimeoutMs: 30_000 })).rejects.toThrow(
        /"code":1[\s\S]*WARDEN_WORKERS > 1 needs DATABASE_URL/,
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('refuses a WARDEN_WORKERS that is not a positive integer', async () => {
    for (const value of ['0', 'two', '1.5']) {
      await expect(
        startChildServer({ env: { DATABASE_URL: 'postgres://127.0.0.1:1/none', WARDEN_WORKERS: value }, readyTimeoutMs: 30_000 }),
      ).rejects.toThrow(/WARDEN_WORKERS must be a positive integer/);
    }
  });
});

describe.skipIf(!BASE_URL)('WARDEN_WORKERS=2 on PostgreSQL', () => {
  const key = randomKey('workers');
  let server: ChildServer;
  let drop: (() => Promise<void>) | undefined;

  const api = (method: string, path: string, body?: unknown) => request(server.url, key, method, path, { body, timeoutMs: 30_000 });
  /** A GET on a connection of its own (a pooled connection to a process that died is reset, as for any client). */
  const statusOnNewConnection = (path: string) =>
    new Promise<number>((resolve, reject) => {
      const req = get(`${server.url}${path}`, { agent: false, headers: { authorization: `Bearer ${key}` } }, (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      });
      req.on('error', reject);
      req.setTimeout(2_000, () => req.destroy(new Error('no answer within 2 s')));
    });
  const workers = () => childrenOf(server.pid);
  const untilWorkers = async (count: number, boundMs: number) => {
    const deadline = Date.now() + boundMs;
    while (workers().length !== count && Date.now() < deadline) await sleep(100);
    return workers();
  };

  beforeAll(async () => {
    const db = await freshDatabase(BASE_URL as string, 'warden_workers');
    drop = db.drop;
    server = await startChildServer({ env: { DATABASE_URL: db.url, WARDEN_BOOTSTRAP_KEY: key, WARDEN_WORKERS: '2' } });
    // The first server answers /health before the second has started: wait for the supervisor's word.
    const deadline = Date.now() + 60_000;
    while (!server.output().includes('warden supervising server processes') && Date.now() < deadline) await sleep(100);
    expect(workers()).toHaveLength(2);
  }, 120_000);

  afterAll(async () => {
    await server?.stop();
    await drop?.();
  });

  it('answers from two server processes under a supervisor, and every decision is audited in one valid chain', async () => {
    expect((await api('POST', '/agents', { name: 'Worker Bot', provider: 'local', slug: 'worker-bot' })).status).toBe(201);
    // Many concurrent connections: the supervisor hands them to both processes in turn.
    const answers = await Promise.all(
      Array.from({ length: 200 }, (_, i) =>
        api('POST', '/policy/evaluate', { input: { action: 'orders.read', agent: 'worker-bot', resource: `o/${i}` } }),
      ),
    );
    expect(answers.map((a) => a.status).filter((s) => s !== 200)).toEqual([]);
    const ids = new Set(answers.map((a) => a.body.data.audit_event_id));
    expect(ids.size).toBe(200);
    let verification: any;
    const deadline = Date.now() + 20_000;
    do {
      await sleep(200);
      verification = (await api('GET', '/audit/verify')).body.data;
    } while (!(verification.valid && verification.unsealed === 0) && Date.now() < deadline);
    expect(verification).toMatchObject({ valid: true, unsealed: 0 });
    expect(verification.checked).toBeGreaterThanOrEqual(200);
  });

  it('replaces a server process that dies, and goes on answering meanwhile', async () => {
    const [victim, survivor] = workers();
    process.kill(victim as number, 'SIGKILL');
    // A connection the supervisor hands over in the instant the server dies gets no answer (as
    // the requests that server was answering): a client retries after its timeout.
    let unanswered = 0;
    for (let i = 0; i < 20; i++) {
      const status = await statusOnNewConnection('/agents?limit=1').catch(() => {
        unanswered++;
        return statusOnNewConnection('/agents?limit=1');
      });
      expect(status).toBe(200);
    }
    expect(unanswered).toBeLessThanOrEqual(1);
    const now = await untilWorkers(2, 20_000);
    expect(now).toHaveLength(2);
    expect(now).toContain(survivor);
    expect(now).not.toContain(victim);
    // one JSON line, whose every key is once: the supervisor's pid, and the dead process's as worker_pid
    const line = server
      .output()
      .split('\n')
      .find((l) => l.includes('a server process exited; starting another')) as string;
    expect((line.match(/"pid":/g) ?? []).length).toBe(1);
    expect(JSON.parse(line)).toMatchObject({ pid: server.pid, worker_pid: victim });
  });

  it('stops every server process and exits 0 on SIGTERM to the supervisor', async () => {
    const before = workers();
    process.kill(server.pid, 'SIGTERM');
    const deadline = Date.now() + 20_000;
    while (!server.exitStatus() && Date.now() < deadline) await sleep(100);
    expect(server.exitStatus()).toEqual({ code: 0, signal: null });
    for (const pid of before) expect(() => process.kill(pid, 0)).toThrow();
  });
});
