/**
 * Webhook durability across processes, against real server processes (`tsx
 * apps/server/src/main.ts`, as `npm start` runs it): a server SIGKILLed mid-delivery or right
 * after committing events loses nothing once restarted on the same data (same webhook-id),
 * and, on PostgreSQL, two servers on one database deliver each event to each endpoint once.
 *
 * Embedded database: a fresh WARDEN_DATA_DIR per scenario. With DATABASE_URL: a fresh database
 * per scenario on that server, dropped at the end (the data dir then only holds master.key).
 *
 * A delivery claimed by a process that dies stays leased until its lease ends (timeout +
 * 15 s, so 17 s with WARDEN_WEBHOOK_TIMEOUT_MS=2000): waits here are bounded at 30 s.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer as createHttpServer, type IncomingHttpHeaders, type ServerResponse } from 'node:http';
import { type AddressInfo, createServer as createNetServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { Webhook } from 'standardwebhooks';
import { afterAll, describe, expect, it } from 'vitest';
import type { TypedApi, V1Route } from '../support/api.ts';
import { START_CAP_MS, waitForServer } from '../support/child-ready.ts';
import { type DashboardSession, dashboardLogin, type RequestOptions, request } from '../support/server.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
/** What `npx tsx` runs, without npx's start-up cost. */
const TSX = join(ROOT, 'node_modules/tsx/dist/cli.mjs');
const SERVER = join(ROOT, 'apps/server/src/main.ts');
const BASE_DATABASE_URL = process.env.DATABASE_URL;
const BOOTSTRAP_KEY = `wk_durable_${randomBytes(24).toString('base64url')}`;
const TIMEOUT_MS = 2_000;
/** The lease of a claimed delivery (timeout + 15 s) plus slack: how long a dead process can hold one. */
const REDELIVERY_BOUND_MS = 30_000;
/** The cap on a start: the wait ends when the server logs that it listens, or exits (tests/support/child-ready.ts). */
const STARTUP_BOUND_MS = START_CAP_MS;

/** Measured durations, printed at the end (the report quotes them). */
const timings: Record<string, number> = {};

// ---------------------------------------------------------------------------------------
// Server processes

const children = new Set<ChildProcess>();
const cleanups: (() => Promise<void> | void)[] = [];

function killGroup(child: ChildProcess, signal: NodeJS.Signals): void {
  try {
    process.kill(-(child.pid as number), signal);
  } catch {
    // already gone
  }
}

const groupAlive = (pid: number) => {
  try {
    process.kill(-pid, 0);
    return true;
  } catch {
    return false;
  }
};

// If the worker itself goes away, no server may outlive it.
process.once('exit', () => {
  for (const child of children) killGroup(child, 'SIGKILL');
});

afterAll(async () => {
  await Promise.all([...children].map((child) => kill(child)));
  for (const cleanup of cleanups.reverse()) await cleanup();
  console.info(`durability timings (ms): ${JSON.stringify(timings)}`);
}, 60_000);

/** SIGKILLs the server's whole process group (tsx and the node process it runs) and waits until every member is gone. */
async function kill(child: ChildProcess): Promise<void> {
  if (child.pid === undefined) return;
  const pid = child.pid;
  const exited =
    child.exitCode !== null || child.signalCode !== null
      ? Promise.resolve()
      : new Promise<void>((resolve) => child.once('exit', () => resolve()));
  killGroup(child, 'SIGKILL');
  await exited;
  for (let i = 0; i < 100 && groupAlive(pid); i++) await sleep(50);
  children.delete(child);
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createNetServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const address = probe.address();
      probe.close(() => (address && typeof address === 'object' ? resolve(address.port) : reject(new Error('no port'))));
    });
  });
}

/** Where a scenario's data lives: its own data dir, and its own database when DATABASE_URL is set. */
interface Target {
  dataDir: string;
  databaseUrl?: string;
}

function freshDataDir(label: string): string {
  const dataDir = mkdtempSync(join(tmpdir(), `warden-durable-${label}-`));
  cleanups.push(() => rmSync(dataDir, { recursive: true, force: true }));
  return dataDir;
}

async function freshTarget(label: string): Promise<Target> {
  const dataDir = freshDataDir(label);
  if (!BASE_DATABASE_URL) return { dataDir };
  const name = `warden_durable_${label}_${Date.now()}_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: BASE_DATABASE_URL });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  await admin.end();
  cleanups.push(async () => {
    const client = new pg.Client({ connectionString: BASE_DATABASE_URL });
    await client.connect();
    await client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    await client.end();
  });
  const url = new URL(BASE_DATABASE_URL);
  url.pathname = `/${name}`;
  return { dataDir, databaseUrl: url.toString() };
}

interface Warden {
  child: ChildProcess;
  origin: string;
  /** The API with the bootstrap key, typed by the contract (tests/support/api.ts). */
  api: TypedApi<V1Route>;
  log: () => string;
}

async function startWarden(target: Target, extraEnv: Record<string, string> = {}): Promise<Warden> {
  const port = await freePort();
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const name of Object.keys(env))
    if (name.startsWith('WARDEN_') || name === 'DATABASE_URL' || name === 'PORT' || name === 'HOST') delete env[name];
  Object.assign(env, {
    PORT: String(port),
    HOST: '127.0.0.1',
    WARDEN_DATA_DIR: target.dataDir,
    WARDEN_BOOTSTRAP_KEY: BOOTSTRAP_KEY,
    WARDEN_EGRESS_ALLOWLIST: '127.0.0.1/32',
    WARDEN_WEBHOOK_POLL_MS: '50',
    WARDEN_WEBHOOK_RETRY_SCHEDULE: '0,100ms,200ms,400ms,800ms',
    WARDEN_WEBHOOK_TIMEOUT_MS: String(TIMEOUT_MS),
    ...(target.databaseUrl ? { DATABASE_URL: target.databaseUrl } : {}),
    ...extraEnv,
  });
  // Its own process group, so that killing it kills tsx and the node process tsx starts.
  const child = spawn(process.execPath, [TSX, SERVER], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  children.add(child);
  let log = '';
  child.stdout?.on('data', (chunk) => {
    log += chunk;
  });
  child.stderr?.on('data', (chunk) => {
    log += chunk;
  });
  const origin = `http://127.0.0.1:${port}`;
  try {
    await waitForServer(child, { healthUrl: `${origin}/api/v1/health`, output: () => log, capMs: STARTUP_BOUND_MS });
  } catch (error) {
    await kill(child);
    throw error;
  }
  return {
    child,
    origin,
    api: ((method: string, path: string, options: RequestOptions = {}) =>
      request(`${origin}/api/v1`, BOOTSTRAP_KEY, method, path, options)) as TypedApi<V1Route>,
    log: () => log,
  };
}

const login = (warden: Warden): Promise<DashboardSession> => dashboardLogin(warden.origin, BOOTSTRAP_KEY);

async function addEndpoint(session: DashboardSession, url: string): Promise<{ id: string; secret: string }> {
  const res = await session.api('POST', '/webhooks', { body: { url, events: ['agent.created'] } });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return { id: res.body.data.endpoint.id, secret: res.body.data.secret };
}

// ---------------------------------------------------------------------------------------
// Receivers

interface Received {
  id: string;
  headers: IncomingHttpHeaders;
  body: string;
  payload: any;
  at: number;
}

interface Receiver {
  url: string;
  received: Received[];
  /** While true, requests are held open and never answered. */
  holding: boolean;
  /** Answers 200 this many ms after a request arrives (0: at once). */
  delayMs: number;
  /** How many requests were answered. */
  answered: number;
  /** Drops every held request. */
  release(): void;
  close(): Promise<void>;
}

async function startReceiver(): Promise<Receiver> {
  const held: ServerResponse[] = [];
  const receiver: Receiver = {
    url: '',
    received: [],
    holding: false,
    delayMs: 0,
    answered: 0,
    release: () => {
      for (const res of held.splice(0)) res.destroy();
    },
    close: async () => undefined,
  };
  const http = createHttpServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      let payload: unknown;
      try {
        payload = JSON.parse(body);
      } catch {
        payload = undefined;
      }
      receiver.received.push({ id: String(req.headers['webhook-id']), headers: req.headers, body, payload, at: Date.now() });
      const answer = () => {
        if (res.destroyed) return;
        receiver.answered++;
        res.writeHead(200, { 'content-type': 'text/plain' }).end('ok');
      };
      if (receiver.holding) held.push(res);
      else if (receiver.delayMs > 0) setTimeout(answer, receiver.delayMs);
      else answer();
    });
  });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  receiver.url = `http://127.0.0.1:${(http.address() as AddressInfo).port}/hook`;
  receiver.close = () =>
    new Promise<void>((resolve) => {
      receiver.release();
      http.close(() => resolve());
      http.closeAllConnections();
    });
  cleanups.push(() => receiver.close());
  return receiver;
}

const verify = (r: Received, secret: string): any =>
  new Webhook(secret).verify(r.body, {
    'webhook-id': r.id,
    'webhook-timestamp': String(r.headers['webhook-timestamp']),
    'webhook-signature': String(r.headers['webhook-signature']),
  });

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Polls until `probe` returns something truthy; fails after `timeoutMs` (`what` may be computed then). */
async function until<T>(what: string | (() => string), probe: () => T | Promise<T>, timeoutMs: number): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value) return value as NonNullable<T>;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${typeof what === 'string' ? what : what()}`);
    await sleep(50);
  }
}

const distinctIds = (receiver: Receiver) => new Set(receiver.received.map((r) => r.id));

// ---------------------------------------------------------------------------------------

const database = BASE_DATABASE_URL ? 'PostgreSQL (DATABASE_URL)' : 'the embedded database';

// The two kill scenarios are independent (own data, own receiver): they run side by side to keep the file short.
describe.concurrent(`a server killed with SIGKILL, restarted on the same data (${database})`, () => {
  it(
    'delivers an event whose delivery was in flight when the server died, with the same webhook-id',
    async () => {
      const target = await freshTarget('inflight');
      const receiver = await startReceiver();
      receiver.holding = true;
      const first = await startWarden(target);
      const endpoint = await addEndpoint(await login(first), receiver.url);
      const agent = (await first.api('POST', '/agents', { body: { name: 'In flight', provider: 'local' } })).body.data;
      expect(agent.id).toBeDefined();

      const interrupted = await until('the first attempt at the receiver', () => receiver.received[0], 15_000);
      expect(interrupted.payload.data.agent.id).toBe(agent.id);
      await kill(first.child);
      const killedAt = Date.now();
      const countAtKill = receiver.received.length;
      receiver.holding = false;
      receiver.release();

      const second = await startWarden(target);
      const readyAt = Date.now();
      timings.inflightRestartMs = readyAt - killedAt;
      const redelivered = await until(
        'the redelivery after the restart',
        () => receiver.received.slice(countAtKill).find((r) => r.id === interrupted.id),
        REDELIVERY_BOUND_MS,
      );
      timings.inflightKillToRedeliveryMs = redelivered.at - killedAt;
      timings.inflightReadyToRedeliveryMs = redelivered.at - readyAt;
      expect(redelivered.payload).toEqual(interrupted.payload);
      expect(redelivered.body).toBe(interrupted.body);
      // The restarted server signs with the same (stored, encrypted) secret.
      expect(verify(redelivered, endpoint.secret)).toEqual(interrupted.payload);
      expect(verify(interrupted, endpoint.secret)).toEqual(interrupted.payload);

      const session = await login(second);
      const delivery = await until(
        'the delivery recorded as succeeded',
        async () => {
          const res = await session.api('GET', `/webhooks/${endpoint.id}/deliveries`);
          return res.body.data?.find((d: { status: string }) => d.status === 'succeeded');
        },
        10_000,
      );
      expect(delivery).toMatchObject({ event_id: interrupted.id, event_type: 'agent.created', response_status: 200 });
      expect(receiver.received.every((r) => r.id === interrupted.id)).toBe(true);
      await kill(second.child);
    },
    STARTUP_BOUND_MS * 2 + REDELIVERY_BOUND_MS,
  );

  it(
    'loses none of 20 events committed just before the kill',
    async () => {
      const target = await freshTarget('committed');
      const receiver = await startReceiver();
      // Slow answers: at the kill some deliveries are in flight, others not yet claimed or not yet fanned out.
      receiver.delayMs = 1_000;
      const first = await startWarden(target);
      const endpoint = await addEndpoint(await login(first), receiver.url);

      const created = await Promise.all(
        Array.from({ length: 20 }, async (_, i) => {
          const res = await first.api('POST', '/agents', { body: { name: `Committed ${i}`, provider: 'local' } });
          expect(res.status).toBe(201);
          return res.body.data.id as string;
        }),
      );
      await kill(first.child);
      const killedAt = Date.now();
      timings.committedAnsweredBeforeKill = receiver.answered;
      timings.committedReceivedBeforeKill = distinctIds(receiver).size;
      receiver.delayMs = 0;

      const second = await startWarden(target);
      const readyAt = Date.now();
      await until(
        () => `20 distinct webhook-ids (have ${distinctIds(receiver).size})`,
        () => distinctIds(receiver).size >= 20,
        REDELIVERY_BOUND_MS,
      );
      const doneAt = Date.now();
      timings.committedKillToAllMs = doneAt - killedAt;
      timings.committedReadyToAllMs = doneAt - readyAt;

      expect(distinctIds(receiver).size).toBe(20);
      const agentIds = new Set<string>();
      for (const r of receiver.received) {
        expect(r.payload.id).toBe(r.id);
        expect(r.payload.type).toBe('agent.created');
        expect(verify(r, endpoint.secret)).toEqual(r.payload);
        agentIds.add(r.payload.data.agent.id);
      }
      expect([...agentIds].sort()).toEqual([...created].sort());
      await kill(second.child);
    },
    STARTUP_BOUND_MS * 2 + REDELIVERY_BOUND_MS,
  );
});

describe.skipIf(!BASE_DATABASE_URL)(
  'two server processes on one PostgreSQL database (skipped without DATABASE_URL: an embedded data directory can be opened by one process only)',
  () => {
    it(
      'deliver each of 30 events to each endpoint exactly once',
      async () => {
        const target = await freshTarget('shared');
        const masterKey = randomBytes(32).toString('base64');
        const one = await startWarden(target, { WARDEN_MASTER_KEY: masterKey });
        const two = await startWarden({ ...target, dataDir: freshDataDir('shared2') }, { WARDEN_MASTER_KEY: masterKey });
        const receivers = [await startReceiver(), await startReceiver()];
        const session = await login(one);
        const endpoints = [
          await addEndpoint(session, (receivers[0] as Receiver).url),
          await addEndpoint(session, (receivers[1] as Receiver).url),
        ];

        const startedAt = Date.now();
        const created = await Promise.all(
          Array.from({ length: 30 }, async (_, i) => {
            const res = await (i % 2 ? two : one).api('POST', '/agents', { body: { name: `Shared ${i}`, provider: 'local' } });
            expect(res.status).toBe(201);
            return res.body.data.id as string;
          }),
        );
        for (const receiver of receivers) {
          await until(
            () => `30 distinct webhook-ids (have ${distinctIds(receiver).size})`,
            () => distinctIds(receiver).size >= 30,
            REDELIVERY_BOUND_MS,
          );
        }
        timings.sharedAllDeliveredMs = Date.now() - startedAt;
        // Long enough for a second process's duplicate, had it claimed the same delivery, to arrive.
        await sleep(1_500);

        receivers.forEach((receiver, i) => {
          const perId = new Map<string, number>();
          for (const r of receiver.received) perId.set(r.id, (perId.get(r.id) ?? 0) + 1);
          expect(perId.size).toBe(30);
          expect([...perId.values()].filter((n) => n !== 1)).toEqual([]);
          expect(receiver.received).toHaveLength(30);
          for (const r of receiver.received) expect(verify(r, (endpoints[i] as { secret: string }).secret)).toEqual(r.payload);
          expect(receiver.received.map((r) => r.payload.data.agent.id).sort()).toEqual([...created].sort());
        });
        // The same event has the same webhook-id at both endpoints.
        expect([...distinctIds(receivers[0] as Receiver)].sort()).toEqual([...distinctIds(receivers[1] as Receiver)].sort());
        await kill(one.child);
        await kill(two.child);
      },
      STARTUP_BOUND_MS * 2 + REDELIVERY_BOUND_MS,
    );
  },
);
