/**
 * Issue 38: a shutdown an orchestrator can follow, under load, repeated. Warden runs as a
 * service manager starts it (`npm start`, and the built server run by `node` directly), with
 * WARDEN_SHUTDOWN_DRAIN_MS; 8 keep-alive clients send POST /policy/evaluate in a loop, 20
 * decisions whose upstream answers after SLOW_UPSTREAM_MS are under way, and a prober asks
 * /readyz on fresh connections. Then SIGTERM goes to the started process only, or to its whole
 * process group (systemd's KillMode=control-group, a terminal's Ctrl-C), RUNS times each. The
 * clients act as behind a load balancer: they send new requests until BALANCER_REACTION_MS after
 * /readyz first answered 503, and finish those under way. Every run: no request is refused or
 * its connection reset,
 * /readyz answered 503 before the port refused, the 20 slow decisions answered 200, every 2xx
 * decision's audit event is in the database, and the process exited 0 saying it stopped.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, request as httpRequest, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { Client } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ChildServer, randomKey, startChildServer } from '../reliability/support/child-server.ts';
import { freshDatabase } from '../support/database.ts';
import { request } from '../support/server.ts';
import { buildServerOnce } from './support/built-server.ts';

const RUNS = Number(process.env.DRAIN_RUNS ?? 3);
const KEEP_ALIVE_CLIENTS = 8;
const SLOW_DECISIONS = 20;
const SLOW_UPSTREAM_MS = 1_500;
/** The default drain period (WARDEN_SHUTDOWN_DRAIN_MS unset would give the same). */
const DRAIN_MS = 5_000;
const SHUTDOWN_TIMEOUT_MS = 10_000;
/** How long the load balancer takes to act on a failing /readyz: the clients send new requests until then. */
const BALANCER_REACTION_MS = 500;
/** Load before the signal, and a hard bound on each client's requests. */
const LOAD_BEFORE_SIGNAL_MS = 1_000;
const MAX_REQUESTS_PER_CLIENT = 5_000;

let upstream: Server;
let upstreamUrl: string;

beforeAll(async () => {
  upstream = createServer((_req, res) => {
    setTimeout(() => res.writeHead(200, { 'content-type': 'application/json' }).end('{"slow":true}'), SLOW_UPSTREAM_MS);
  });
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
  upstreamUrl = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}/slow`;
});

afterAll(async () => {
  await new Promise((resolve) => upstream?.close(resolve));
});

interface Run {
  exit: { code: number | null; signal: NodeJS.Signals | null } | null;
  stopped: boolean;
  answers: { status: number; eventId?: string }[];
  slow: { status: number; eventId?: string }[];
  /** Requests that got no answer: refused, or their connection reset. */
  errors: string[];
  /** When the port first refused /readyz's connection (the listener closed). */
  refusedAt?: number;
  readyz503At?: number;
  lost: string[];
}

/** GET /readyz on a connection of its own, as a load balancer's health check: its status, or the error code. */
const probeReadyz = (port: number): Promise<number | string> =>
  new Promise((resolve) => {
    const req = httpRequest({ host: '127.0.0.1', port, path: '/readyz', agent: false, headers: { connection: 'close' } }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
    });
    req.on('error', (error: NodeJS.ErrnoException) => resolve(error.code ?? 'error'));
    req.end();
  });

async function auditEventIds(target: { databaseUrl?: string; dataDir?: string }, ids: string[]): Promise<Set<string>> {
  const found = new Set<string>();
  if (target.databaseUrl) {
    const client = new pg.Client({ connectionString: target.databaseUrl });
    await client.connect();
    try {
      for (const row of (await client.query('SELECT id FROM audit_events WHERE id = ANY($1::uuid[])', [ids])).rows) found.add(row.id);
    } finally {
      await client.end();
    }
  } else {
    const { PGlite } = await import('@electric-sql/pglite');
    const db = await PGlite.create(`${target.dataDir}/pgdata`);
    try {
      for (const row of (await db.query<{ id: string }>('SELECT id FROM audit_events WHERE id = ANY($1::uuid[])', [ids])).rows)
        found.add(row.id);
    } finally {
      await db.close();
    }
  }
  return found;
}

interface Target {
  dataDir?: string;
  databaseUrl?: string;
  drop(): Promise<void>;
}

/** One database for a case's runs (each run starts a process of its own on it). */
async function database(): Promise<Target> {
  if (process.env.DATABASE_URL) {
    const db = await freshDatabase(process.env.DATABASE_URL, 'warden_drain');
    return { databaseUrl: db.url, drop: db.drop };
  }
  const dataDir = mkdtempSync(join(tmpdir(), 'warden-drain-'));
  return { dataDir, drop: async () => rmSync(dataDir, { recursive: true, force: true }) };
}

async function run(command: 'npm-start' | 'built', target: 'process' | 'group', { dataDir, databaseUrl }: Target, n: number): Promise<Run> {
  const key = randomKey('drain');
  let server: ChildServer | undefined;
  const t0 = performance.now();
  try {
    server = await startChildServer({
      command,
      env: {
        ...(databaseUrl ? { DATABASE_URL: databaseUrl } : { WARDEN_DATA_DIR: dataDir }),
        WARDEN_BOOTSTRAP_KEY: key,
        WARDEN_RATE_LIMIT_PER_MINUTE: '10000000',
        WARDEN_EGRESS_ALLOWLIST: '127.0.0.1/32',
        WARDEN_SHUTDOWN_TIMEOUT_MS: String(SHUTDOWN_TIMEOUT_MS),
        WARDEN_SHUTDOWN_DRAIN_MS: String(DRAIN_MS),
      },
    });
    const live = server;
    const startedMs = Math.round(performance.now() - t0);
    const agent = `drain-${n}`;
    expect((await request(live.url, key, 'POST', '/agents', { body: { name: 'Drain', provider: 'local', slug: agent } })).status).toBe(201);
    const result: Run = { exit: null, stopped: false, answers: [], slow: [], errors: [], lost: [] };
    let signalledAt = 0;
    const failed = (error: unknown) => {
      const code = (error as { code?: string }).code ?? (error as Error).message;
      result.errors.push(`${code} at ${Math.round(performance.now() - signalledAt)} ms`);
    };
    const body = (i: number) => JSON.stringify({ input: { action: 'orders.read', agent, resource: `orders/${i}` } });
    const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
    // each client keeps one connection alive and reconnects when an answer says Connection: close
    const clients = Array.from({ length: KEEP_ALIVE_CLIENTS }, () => new Client(`http://127.0.0.1:${live.port}`, { pipelining: 1 }));
    // the balancer routes new requests here until BALANCER_REACTION_MS after /readyz first answered 503
    const routed = () => result.readyz503At === undefined || performance.now() - result.readyz503At < BALANCER_REACTION_MS;
    const load = clients.map(async (client, c) => {
      for (let i = 0; i < MAX_REQUESTS_PER_CLIENT && routed(); i++) {
        try {
          const res = await client.request({ method: 'POST', path: '/api/v1/policy/evaluate', headers, body: body(c * 1e6 + i) });
          const json = (await res.body.json()) as { data?: { audit_event_id?: string } };
          result.answers.push({ status: res.statusCode, eventId: json.data?.audit_event_id });
        } catch (error) {
          failed(error);
          return;
        }
      }
    });
    let probing = true;
    const prober = (async () => {
      while (probing) {
        const status = await probeReadyz(live.port);
        if (status === 503) result.readyz503At ??= performance.now();
        if (status === 'ECONNREFUSED') {
          result.refusedAt = performance.now();
          return;
        }
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    })();
    await new Promise((resolve) => setTimeout(resolve, LOAD_BEFORE_SIGNAL_MS));
    const slow = Array.from({ length: SLOW_DECISIONS }, () =>
      request(live.url, key, 'POST', '/runtime/execute', {
        body: { input: { action: 'http.get', agent }, execution: { mode: 'http_proxy', method: 'GET', url: upstreamUrl } },
        timeoutMs: 30_000,
      }).then(
        (res) => result.slow.push({ status: res.status, eventId: res.body?.data?.decision?.audit_event_id }),
        (error) => failed(error),
      ),
    );
    await new Promise((resolve) => setTimeout(resolve, 300));
    signalledAt = performance.now();
    if (target === 'group') live.signal('SIGTERM');
    else live.signalProcess('SIGTERM');
    const deadline = Date.now() + SHUTDOWN_TIMEOUT_MS + 5_000;
    while (!live.exitStatus() && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 25));
    probing = false;
    await Promise.all([...load, ...slow, prober]);
    await Promise.all(clients.map((client) => client.destroy()));
    result.exit = live.exitStatus();
    result.stopped = live.output().includes('"message":"warden stopped"');
    const ids = [...result.answers, ...result.slow].filter((a) => a.status >= 200 && a.status < 300).map((a) => a.eventId as string);
    const found = await auditEventIds({ databaseUrl, dataDir }, ids);
    result.lost = ids.filter((id) => !found.has(id));
    console.log(
      `[drain ${command} ${target}] answers ${result.answers.length}, slow ${result.slow.length}, errors ${JSON.stringify(result.errors)}, ` +
        `readyz 503 ${result.readyz503At ? Math.round(result.readyz503At - signalledAt) : '-'} ms, refused ${
          result.refusedAt ? Math.round(result.refusedAt - signalledAt) : '-'
        } ms after the signal (started in ${startedMs} ms, run ${Math.round(performance.now() - t0)} ms), exit ${JSON.stringify(result.exit)}, lost ${result.lost.length}`,
    );
    return result;
  } finally {
    await server?.stop();
  }
}

function expectKeptPromises(result: Run): void {
  expect(result.errors).toEqual([]);
  expect(result.exit).toEqual({ code: 0, signal: null });
  expect(result.stopped).toBe(true);
  expect(result.readyz503At).toBeDefined();
  expect(result.refusedAt).toBeDefined();
  expect(result.readyz503At as number).toBeLessThan(result.refusedAt as number);
  expect(result.slow.map((a) => a.status)).toEqual(Array(SLOW_DECISIONS).fill(200));
  expect(result.answers.filter((a) => a.status !== 200)).toEqual([]);
  expect(result.answers.length).toBeGreaterThan(0);
  expect(result.lost).toEqual([]);
}

/** The production start (built, node directly) RUNS times each way; `npm start` once each way. */
describe.each([
  ['built', 'process', RUNS],
  ['built', 'group', RUNS],
  ['npm-start', 'process', 1],
  ['npm-start', 'group', 1],
] as const)('SIGTERM under load, started with %s, sent to the %s', (command, target, runs) => {
  let db: Target;
  beforeAll(async () => {
    db = await database();
    if (command === 'built') await buildServerOnce();
  }, 180_000);
  afterAll(() => db?.drop());

  for (let i = 1; i <= runs; i++)
    it(`keeps every promise (run ${i} of ${runs})`, async () => {
      expectKeptPromises(await run(command, target, db, i));
    }, 180_000);
});
