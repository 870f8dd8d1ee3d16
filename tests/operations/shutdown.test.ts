/**
 * Probes and graceful shutdown of Warden as a child process (`apps/server/src/main.ts`).
 *
 * - GET /livez and GET /readyz answer 200 without a key; GET /api/v1/health is unchanged.
 * - SIGTERM, twice (as a relaying parent sends it), under a load of POST /policy/evaluate (and one slow POST /runtime/execute whose
 *   upstream answers after SLOW_UPSTREAM_MS): the process stops accepting connections,
 *   finishes what it was answering — the slow execution included — and exits 0 within
 *   WARDEN_SHUTDOWN_TIMEOUT_MS; no request is answered with an error, and every 2xx decision's
 *   audit event is in the database afterwards (read directly, by the audit_event_id answered).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { type AddressInfo, connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ChildServer, randomKey, startChildServer } from '../reliability/support/child-server.ts';
import { freshDatabase } from '../support/database.ts';
import { request } from '../support/server.ts';

const BASE_URL = process.env.DATABASE_URL;
const CONCURRENCY = 6;
const LOAD_BEFORE_SIGTERM_MS = 1_500;
const MIN_ANSWERS = 50;
/** New connections must be refused within this long of the signal (it covers signal delivery on a busy machine). */
const REFUSE_BOUND_MS = 3_000;
const SHUTDOWN_TIMEOUT_MS = 10_000;
const SLOW_UPSTREAM_MS = 1_500;
/** Hard bound on the load, whatever happens. */
const MAX_REQUESTS = 20_000;

interface Answer {
  status: number;
  eventId?: string;
  afterSigterm: boolean;
  /** Its answer arrived after the signal was sent (it was under way while the server drained). */
  answeredAfterSigterm: boolean;
}

const key = randomKey('shutdown');
let server: ChildServer;
let dataDir: string | undefined;
let databaseUrl: string | undefined;
let drop: (() => Promise<void>) | undefined;
let upstream: Server;
let upstreamUrl: string;
const answers: Answer[] = [];
let transportErrors = 0;
let sigtermAt = 0;
let exitedAt = 0;
let slow: { status: number; body: any } | undefined;
let refusedAfterMs = Number.NaN;

async function auditEventIds(ids: string[]): Promise<Set<string>> {
  const found = new Set<string>();
  if (databaseUrl) {
    const client = new pg.Client({ connectionString: databaseUrl });
    await client.connect();
    try {
      const rows = await client.query('SELECT id FROM audit_events WHERE id = ANY($1::uuid[])', [ids]);
      for (const row of rows.rows) found.add(row.id);
    } finally {
      await client.end();
    }
  } else {
    const { PGlite } = await import('@electric-sql/pglite');
    const db = await PGlite.create(`${dataDir}/pgdata`);
    try {
      const rows = await db.query<{ id: string }>('SELECT id FROM audit_events WHERE id = ANY($1::uuid[])', [ids]);
      for (const row of rows.rows) found.add(row.id);
    } finally {
      await db.close();
    }
  }
  return found;
}

beforeAll(async () => {
  upstream = createServer((_req, res) => {
    setTimeout(() => res.writeHead(200, { 'content-type': 'application/json' }).end('{"slow":true}'), SLOW_UPSTREAM_MS);
  });
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
  upstreamUrl = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}/slow`;
  let env: Record<string, string>;
  if (BASE_URL) {
    const db = await freshDatabase(BASE_URL, 'warden_shutdown');
    drop = db.drop;
    databaseUrl = db.url;
    env = { DATABASE_URL: db.url };
  } else {
    dataDir = mkdtempSync(join(tmpdir(), 'warden-shutdown-'));
    env = { WARDEN_DATA_DIR: dataDir };
  }
  server = await startChildServer({
    env: {
      ...env,
      WARDEN_BOOTSTRAP_KEY: key,
      WARDEN_RATE_LIMIT_PER_MINUTE: '10000000',
      WARDEN_SHUTDOWN_TIMEOUT_MS: String(SHUTDOWN_TIMEOUT_MS),
      WARDEN_EGRESS_ALLOWLIST: '127.0.0.1/32',
    },
  });
  const agent = await request(server.url, key, 'POST', '/agents', { body: { name: 'Drain Bot', provider: 'local', slug: 'drain-bot' } });
  expect(agent.status).toBe(201);
}, 180_000);

afterAll(async () => {
  await server?.stop();
  await new Promise((resolve) => upstream?.close(resolve));
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  await drop?.();
});

describe('GET /livez and GET /readyz', () => {
  it('answers liveness 200 without a key, and no-store', async () => {
    const res = await fetch(server.url.replace('/api/v1', '/livez'));
    expect(res.status).toBe(200);
    expect(res.headers.get('cache-control')).toBe('no-store');
    expect(await res.json()).toEqual({ status: 'ok' });
  });

  it('answers readiness 200 with every check ok while the database and the audit writer commit', async () => {
    const res = await fetch(server.url.replace('/api/v1', '/readyz'));
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ status: 'ready', checks: { database: 'ok', audit_writer: 'ok', shutdown: 'no' } });
  });

  it('leaves GET /api/v1/health as it was (public, 200)', async () => {
    const res = await request(server.url, key, 'GET', '/health', { key: null });
    expect(res.status).toBe(200);
    expect(res.body.data.database).toBe('ok');
  });
});

describe('SIGTERM under a load of POST /policy/evaluate', () => {
  beforeAll(async () => {
    const exited = new Promise<void>((resolve) => {
      const poll = setInterval(() => {
        if (server.exitStatus()) {
          exitedAt = performance.now();
          clearInterval(poll);
          resolve();
        }
      }, 10);
    });
    let signalled = false;
    const worker = async () => {
      while (answers.length < MAX_REQUESTS) {
        const afterSigterm = signalled;
        try {
          const res = await request(server.url, key, 'POST', '/policy/evaluate', {
            body: { input: { action: 'orders.read', agent: 'drain-bot', resource: `orders/${answers.length}` } },
            timeoutMs: 20_000,
          });
          answers.push({ status: res.status, eventId: res.body?.data?.audit_event_id, afterSigterm, answeredAfterSigterm: signalled });
        } catch {
          transportErrors++;
          if (signalled) return; // the port is closed: the load ends
        }
      }
    };
    const load = Promise.all(Array.from({ length: CONCURRENCY }, worker));
    // at least LOAD_BEFORE_SIGTERM_MS of load, and MIN_ANSWERS answers (a loaded machine is slow), bounded
    const loadStart = Date.now();
    while (Date.now() - loadStart < 30_000 && (Date.now() - loadStart < LOAD_BEFORE_SIGTERM_MS || answers.length < MIN_ANSWERS))
      await new Promise((resolve) => setTimeout(resolve, 50));
    // one slow request under way when the signal arrives: its upstream answers after SLOW_UPSTREAM_MS
    const slowAnswer = request(server.url, key, 'POST', '/runtime/execute', {
      body: { input: { action: 'http.get', agent: 'drain-bot' }, execution: { mode: 'http_proxy', method: 'GET', url: upstreamUrl } },
      timeoutMs: 20_000,
    }).then(
      (res) => {
        slow = res;
      },
      () => undefined,
    );
    await new Promise((resolve) => setTimeout(resolve, 300));
    sigtermAt = performance.now();
    signalled = true;
    server.signal('SIGTERM');
    // and its copy, as a relaying parent sends it (tsx, npm, a supervisor; Ctrl-C and systemd's
    // control-group kill signal the whole group): it must find the handler still there
    setTimeout(() => server.signal('SIGTERM'), 50);
    // new TCP connections are refused as soon as the process has handled the signal (polled, bounded)
    const connects = (): Promise<boolean> =>
      new Promise((resolve) => {
        const socket = connect(server.port, '127.0.0.1');
        socket.once('connect', () => {
          socket.destroy();
          resolve(true);
        });
        socket.once('error', () => resolve(false));
      });
    while (performance.now() - sigtermAt < REFUSE_BOUND_MS) {
      if (!(await connects())) {
        refusedAfterMs = performance.now() - sigtermAt;
        break;
      }
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    await Promise.all([load, slowAnswer, exited]);
  }, 60_000);

  it('exits 0 within WARDEN_SHUTDOWN_TIMEOUT_MS', () => {
    const tookMs = exitedAt - sigtermAt;
    console.log(
      `[shutdown] answers ${answers.length} (sent after SIGTERM ${answers.filter((a) => a.afterSigterm).length}, answered after SIGTERM ${answers.filter((a) => a.answeredAfterSigterm).length}), transport errors ${transportErrors}, exit ${Math.round(tookMs)} ms after SIGTERM`,
    );
    expect(server.exitStatus()).toEqual({ code: 0, signal: null });
    expect(tookMs).toBeLessThan(SHUTDOWN_TIMEOUT_MS);
    console.log(
      `[shutdown] ${server
        .output()
        .split('\n')
        .find((line) => line.includes('"message":"warden closed"'))}`,
    );
    expect(server.output()).toContain('"message":"warden stopped"');
  });

  it('stops accepting new connections at once (refused within REFUSE_BOUND_MS of the signal)', () => {
    console.log(`[shutdown] new connections refused ${Math.round(refusedAfterMs)} ms after SIGTERM`);
    expect(refusedAfterMs).toBeLessThan(REFUSE_BOUND_MS);
  });

  it('finishes the request under way: the slow execution answers 200 with its upstream answer', () => {
    expect(slow?.status).toBe(200);
    expect(slow?.body.data.execution.body).toEqual({ slow: true });
  });

  it('answers no request with an error while draining (each is answered 2xx or not at all)', () => {
    expect(answers.length).toBeGreaterThan(0);
    expect(answers.filter((a) => a.status !== 200).map((a) => a.status)).toEqual([]);
  });

  it('has the audit event of every 2xx decision in the database (lost = 0)', async () => {
    const ids = answers.map((a) => a.eventId as string);
    expect(ids.every((id) => typeof id === 'string')).toBe(true);
    if (slow?.body?.data?.audit_event_id) ids.push(slow.body.data.audit_event_id);
    const found = await auditEventIds(ids);
    const lost = ids.filter((id) => !found.has(id));
    console.log(`[shutdown] 2xx decisions ${ids.length}, audit events found ${found.size}, lost ${lost.length}`);
    expect(lost).toEqual([]);
  });
});
