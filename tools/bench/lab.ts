/**
 * What a scenario runs against, each a child process of its own: Wardens as production starts
 * them (`npx tsx apps/server/src/main.ts`, NODE_ENV=production) on databases of their own, the
 * baselines B0 and B1, the MCP upstream. Everything started is stopped and every database
 * dropped at the end, on failure and on Ctrl-C too.
 */
import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createWriteStream, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { Agent, request } from 'undici';
import type { BenchConfig } from './config.ts';
import {
  descendants,
  forkBench,
  freePort,
  killAllNow,
  nextMessage,
  ROOT,
  refuseNewChildren,
  sleep,
  spawnGroup,
  stopAll,
  stopChild,
} from './procs.ts';
import { seedWarden } from './workload.ts';

export const OUT_DIR = join(ROOT, 'test-output/bench');
/** application_name of each server's PostgreSQL sessions, to read their CPU time. */
export const WARDEN_APP = 'bench-warden';
export const B1_APP = 'bench-b1';

export const log = (message: string) => process.stderr.write(`[bench] ${message}\n`);

// ---------------------------------------------------------------- scenarios

/** What a scenario leaves: its report's lines, its targets met or not, and every figure for the JSON. */
export interface Outcome {
  report: string[];
  targets: Record<string, boolean>;
  figures: Record<string, unknown>;
  /** Runs that failed (the exit code is then 1). */
  failures?: string[];
}

export interface Scenario {
  /** `npm run bench -- --only=<name>`. */
  name: string;
  about: string;
  /** Part of `npm run bench` without --only. */
  inFullRun: boolean;
  run(config: BenchConfig): Promise<Outcome>;
}

// ---------------------------------------------------------------- cleanup, on every path

const cleanups: Array<() => Promise<void>> = [];
let cleaning: Promise<void> = Promise.resolve();
export let aborted = false;

/** Runs at the next cleanup, newest first. */
export const onCleanup = (step: () => Promise<void>) => void cleanups.push(step);

/** Stops every child and runs the cleanups registered so far (after each scenario, and at the end). */
export function cleanup(): Promise<void> {
  cleaning = cleaning.then(async () => {
    await stopAll().catch((error) => log(`stopping children: ${(error as Error).message}`));
    for (let step = cleanups.pop(); step; step = cleanups.pop()) await step().catch((error) => log(`cleanup: ${(error as Error).message}`));
  });
  return cleaning;
}

for (const name of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
  process.once(name, () => {
    log(`${name}: stopping children and dropping the bench databases`);
    aborted = true;
    refuseNewChildren();
    const hard = setTimeout(() => process.exit(130), 30_000);
    void cleanup().finally(() => {
      clearTimeout(hard);
      process.exit(130);
    });
  });
}
process.once('exit', () => killAllNow());

// ---------------------------------------------------------------- databases

export interface BenchDatabase {
  name: string;
  url: string;
  /** A small pool on it, for counts and facts. */
  pool: pg.Pool;
}

/** A fresh database on DATABASE_URL's server, dropped at cleanup (kept with `keep`). */
export async function database(config: BenchConfig, label: string, keep = false): Promise<BenchDatabase> {
  const name = `warden_bench_${label.replace(/\W/g, '_')}_${process.pid}`.toLowerCase().slice(0, 63);
  const admin = async (sql: string) => {
    const client = new pg.Client({ connectionString: config.databaseUrl });
    await client.connect().catch((error: Error) => {
      throw new Error(`cannot connect to DATABASE_URL (${redact(config.databaseUrl)}): ${error.message}`);
    });
    await client.query(sql).finally(() => client.end());
  };
  await admin(`CREATE DATABASE ${name}`);
  const url = new URL(config.databaseUrl);
  url.pathname = `/${name}`;
  const pool = new pg.Pool({ connectionString: url.toString(), max: 2, application_name: 'bench-orchestrator' });
  pool.on('error', () => {});
  onCleanup(async () => {
    await pool.end().catch(() => undefined);
    if (keep) {
      log(`kept database ${name}: DROP DATABASE ${name} WITH (FORCE) when done`);
      return;
    }
    await admin(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    log(`dropped database ${name}`);
  });
  return { name, url: url.toString(), pool };
}

/** PostgreSQL backends of this database with the given application_name. */
export async function backendPids(pool: pg.Pool, applicationName: string): Promise<number[]> {
  const { rows } = await pool.query('SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1', [
    applicationName,
  ]);
  return rows.map((row) => Number(row.pid));
}

export async function serverFacts(pool: pg.Pool): Promise<Record<string, string>> {
  const facts: Record<string, string> = {};
  for (const setting of ['server_version', 'synchronous_commit', 'fsync', 'shared_buffers', 'max_connections'])
    facts[setting] = String(Object.values((await pool.query(`SHOW ${setting}`)).rows[0])[0]);
  return facts;
}

export function redact(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = '***';
    return parsed.toString();
  } catch {
    return '<invalid url>';
  }
}

// ---------------------------------------------------------------- servers

export interface Target {
  /** Every process that serves: its CPU time and RSS are summed. */
  pids: number[];
  origin: string;
  /** application_name of its PostgreSQL sessions, and a pool on its database. */
  dbApp?: string;
  pool?: pg.Pool;
}

/** A child of the benchmark's own that answers { type: 'ready', … } once it serves. */
async function readyChild<T>(file: string, name: string, args: string[] = []): Promise<T & { child: ChildProcess }> {
  const child = forkBench(file, name, args);
  const ready = await nextMessage<T>(child, 'ready', 30_000, `start ${name}`);
  onCleanup(() => stopChild(child));
  return { ...ready, child };
}

/** B0 (node:http, fixed JSON) or B1 (node:http and one committed INSERT into `db`). */
export async function baseline(mode: 'b0' | 'b1', db: BenchDatabase): Promise<Target> {
  const { port, pid } = await readyChild<{ port: number; pid: number }>('baseline-server.ts', mode.toUpperCase(), [mode, db.url]);
  return { pids: [pid], origin: `http://127.0.0.1:${port}`, ...(mode === 'b1' && { dbApp: B1_APP, pool: db.pool }) };
}

/** The tests' MCP server (official SDK, Streamable HTTP) in a process of its own; `bounds`: the one that answers any size. */
export const mcpUpstream = (kind: 'tools' | 'bounds' = 'tools') =>
  readyChild<{ url: string; pid: number }>('mcp-upstream.ts', `mcp ${kind}`, [kind]);

/** A bare reverse proxy in front of `url` (mcp-relay.ts). */
export const relay = (url: string) => readyChild<{ url: string; pid: number }>('mcp-relay.ts', 'relay', [url]);

/** An API answer, checked where it is read. */
export type Answer = { data: any };

export interface Warden extends Target {
  key: string;
  baseUrl: string;
  db: BenchDatabase;
  logFile: string;
  /** The MCP session seeding opened (with `seedWith`). */
  session?: string;
  /** The npx → … → server tree as found, for the report. */
  tree: string[];
  /** Stops it with `signal` to the server (SIGINT writes a --cpu-prof profile) and waits. */
  stop(signal?: NodeJS.Signals): Promise<void>;
  /** A call on its API with its key (and `headers`); throws unless 2xx. */
  call<T = Answer>(method: 'GET' | 'POST', path: string, body?: unknown, headers?: Record<string, string>): Promise<T>;
}

export interface WardenOptions {
  label: string;
  /** More environment (metrics, OTEL_*, witnesses); neither is inherited from the benchmark's own. */
  env?: Record<string, string>;
  /** WARDEN_WORKERS (default: the configured count). */
  workers?: number;
  /** Node flags through tsx (`npx tsx --cpu-prof … main.ts`: tsx hands them to the server). */
  nodeFlags?: string[];
  /** Seeded as S is (50 policies × 10 rules, 100 agents, the MCP server): give the upstream's URL. */
  seedWith?: string;
  keepDatabase?: boolean;
}

export async function warden(config: BenchConfig, options: WardenOptions): Promise<Warden> {
  const { label } = options;
  const db = await database(config, label, options.keepDatabase);
  const dataDir = mkdtempSync(join(tmpdir(), `warden-bench-${label}-`));
  onCleanup(async () => rmSync(dataDir, { recursive: true, force: true }));
  const port = await freePort();
  const key = `wk_bench_${randomBytes(24).toString('base64url')}`;
  const workers = options.workers ?? config.workers;
  mkdirSync(OUT_DIR, { recursive: true });
  const logFile = join(OUT_DIR, `warden-${label}.log`);
  const out = createWriteStream(logFile);
  await new Promise((resolve) => out.once('open', resolve));
  const env: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(process.env)) if (!/^(OTEL_|WARDEN_)/.test(name)) env[name] = value;
  Object.assign(env, {
    NODE_ENV: 'production',
    NODE_OPTIONS: '',
    PORT: String(port),
    HOST: '127.0.0.1',
    DATABASE_URL: db.url,
    REDIS_URL: config.redisUrl,
    PGAPPNAME: WARDEN_APP,
    WARDEN_BOOTSTRAP_KEY: key,
    WARDEN_RATE_LIMIT_PER_MINUTE: '100000000',
    WARDEN_EGRESS_ALLOWLIST: '127.0.0.1/32',
    WARDEN_DATA_DIR: dataDir,
    WARDEN_MASTER_KEY: randomBytes(32).toString('base64'),
    WARDEN_WORKERS: String(workers),
    ...config.wardenEnv,
    ...options.env,
  });
  const nodeFlags = [...config.nodeFlags, ...(options.nodeFlags ?? [])];
  const child = spawnGroup('npx', ['tsx', ...nodeFlags, 'apps/server/src/main.ts'], `warden ${label}`, {
    cwd: ROOT,
    env,
    stdio: ['ignore', out, out],
  });
  const origin = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 90_000;
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null)
      throw new Error(`Warden exited during start (code ${child.exitCode}, signal ${child.signalCode}); see ${logFile}`);
    if (Date.now() > deadline) throw new Error(`Warden did not answer /api/v1/health within 90 s; see ${logFile}`);
    const healthy = await fetch(`${origin}/api/v1/health`).then(
      (res) => res.text().then(() => res.status === 200),
      () => false,
    );
    if (healthy) break;
    await sleep(200);
  }
  // the processes running main.ts under npx and tsx: the server, or the supervisor (the shallowest) and its workers
  const expected = workers > 1 ? workers + 1 : 1;
  const servers = () =>
    descendants(child.pid as number)
      .filter((p) => p.cmdline.includes('apps/server/src/main.ts') && p.cmdline.includes('loader.mjs'))
      .sort((a, b) => a.depth - b.depth);
  while (servers().length < expected && Date.now() < deadline) await sleep(200);
  const found = servers();
  if (found.length !== expected) throw new Error(`expected ${expected} Warden processes, found ${found.length}; see ${logFile}`);
  const serverPid = (found[0] as { pid: number }).pid;
  const baseUrl = `${origin}/api/v1`;
  const stop = async (sig: NodeJS.Signals = 'SIGTERM') => {
    const exited =
      child.exitCode !== null || child.signalCode !== null
        ? Promise.resolve()
        : new Promise<void>((resolve) => child.once('exit', () => resolve()));
    try {
      process.kill(serverPid, sig); // the server closes itself; the wrappers follow it
    } catch {
      // gone already
    }
    await Promise.race([exited, sleep(20_000)]);
    await stopChild(child, 'SIGTERM', 3_000);
    out.end();
  };
  onCleanup(() => stop());
  // no client-side timeout: a first verification after seeding reads the whole history
  const dispatcher = new Agent({ headersTimeout: 0, bodyTimeout: 0, connections: 8 });
  onCleanup(() => dispatcher.close());
  const call = async <T>(method: 'GET' | 'POST', path: string, body?: unknown, headers: Record<string, string> = {}): Promise<T> => {
    const res = await request(`${baseUrl}${path}`, {
      method,
      headers: { authorization: `Bearer ${key}`, ...(body !== undefined && { 'content-type': 'application/json' }), ...headers },
      body: body === undefined ? undefined : JSON.stringify(body),
      dispatcher,
    });
    const text = await res.body.text();
    if (res.statusCode >= 300) throw new Error(`${method} ${path} answered ${res.statusCode}: ${text.slice(0, 400)}`);
    return JSON.parse(text) as T;
  };
  const target: Warden = {
    pids: found.map((p) => p.pid),
    origin,
    dbApp: WARDEN_APP,
    pool: db.pool,
    key,
    baseUrl,
    db,
    logFile,
    tree: descendants(child.pid as number).map((p) => `${'  '.repeat(p.depth)}${p.pid} ${p.cmdline.slice(0, 160)}`),
    stop,
    call,
  };
  log(`${label}: Warden at ${baseUrl} (pids ${target.pids.join(', ')}), database ${db.name}, log ${logFile}`);
  if (options.seedWith) target.session = await seedWarden(target, options.seedWith);
  return target;
}
