/**
 * The servers under test, each a child process: the baselines B0/B1, the MCP upstream, and
 * Warden itself, started as production would start it (`npx tsx apps/server/src/main.ts`).
 * Under npx there are wrapper processes (npm, sh, the tsx CLI); CPU and memory are read from
 * the innermost process running main.ts, which is the server.
 */

import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createWriteStream, mkdirSync } from 'node:fs';
import { descendants, forkBench, freePort, nextMessage, ROOT, sleep, spawnGroup, stopChild } from './procs.ts';

/** application_name of each server's PostgreSQL sessions (pg_stat_activity). */
export const WARDEN_APP_NAME = 'bench-warden';
export const B1_APP_NAME = 'bench-b1';

export interface ServerTarget {
  name: string;
  /** The pid of the process that serves (for /proc). */
  pid: number;
  origin: string;
  stop(signal?: NodeJS.Signals): Promise<void>;
}

export async function startBaseline(mode: 'b0' | 'b1', databaseUrl: string): Promise<ServerTarget> {
  const child = forkBench('baseline-server.ts', mode.toUpperCase(), [mode, databaseUrl]);
  const ready = await nextMessage<{ port: number; pid: number }>(child, (m) => m?.type === 'ready', 30_000, `start ${mode}`);
  return { name: mode.toUpperCase(), pid: ready.pid, origin: `http://127.0.0.1:${ready.port}`, stop: () => stopChild(child) };
}

export async function startMcpUpstream(): Promise<{ url: string; pid: number; stop: () => Promise<void> }> {
  const child = forkBench('mcp-upstream.ts', 'mcp');
  const ready = await nextMessage<{ url: string; pid: number }>(child, (m) => m?.type === 'ready', 30_000, 'start the MCP upstream');
  return { url: ready.url, pid: ready.pid, stop: () => stopChild(child) };
}

export interface WardenTarget extends ServerTarget {
  key: string;
  baseUrl: string;
  logFile: string;
  /** The wrapper process tree (npx → … → server) as found, for the report. */
  tree: string[];
  /** Every Warden process: the server, or the supervisor and its WARDEN_WORKERS servers. */
  pids: number[];
}

export interface WardenOptions {
  databaseUrl: string;
  redisUrl: string;
  dataDir: string;
  logDir: string;
  /**
   * Node flags for the server, passed through tsx (`npx tsx --cpu-prof … main.ts`): Node 20
   * refuses --cpu-prof in NODE_OPTIONS, and tsx hands its node flags to the server process.
   */
  nodeFlags?: string[];
  label?: string;
  /** WARDEN_WORKERS: server processes (1: one process, no supervisor). */
  workers: number;
  /** More environment for the server (metrics, OTEL_*); neither is inherited from the benchmark's own. */
  env?: Record<string, string>;
}

export async function startWarden(options: WardenOptions): Promise<WardenTarget> {
  const port = await freePort();
  const key = `wk_bench_${randomBytes(24).toString('base64url')}`;
  mkdirSync(options.logDir, { recursive: true });
  const label = options.label ?? 'warden';
  const logFile = `${options.logDir}/${label}.log`;
  const log = createWriteStream(logFile);
  await new Promise((resolve) => log.once('open', resolve));
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    NODE_ENV: 'production',
    PORT: String(port),
    HOST: '127.0.0.1',
    DATABASE_URL: options.databaseUrl,
    WARDEN_BOOTSTRAP_KEY: key,
    WARDEN_RATE_LIMIT_PER_MINUTE: '100000000',
    REDIS_URL: options.redisUrl,
    WARDEN_EGRESS_ALLOWLIST: '127.0.0.1/32',
    WARDEN_DATA_DIR: options.dataDir,
    WARDEN_MASTER_KEY: randomBytes(32).toString('base64'),
    // Names Warden's PostgreSQL sessions, so the benchmark can read their CPU time (pg reads PGAPPNAME).
    PGAPPNAME: WARDEN_APP_NAME,
    WARDEN_WORKERS: String(options.workers),
    NODE_OPTIONS: '',
  };
  delete env.WARDEN_VALIDATE_RESPONSES;
  delete env.WARDEN_LOG_REQUESTS;
  for (const name of Object.keys(env)) if (name.startsWith('OTEL_') || name.startsWith('WARDEN_METRICS_')) delete env[name];
  Object.assign(env, options.env);
  const child: ChildProcess = spawnGroup('npx', ['tsx', ...(options.nodeFlags ?? []), 'apps/server/src/main.ts'], label, {
    cwd: ROOT,
    env,
    stdio: ['ignore', log, log],
  });
  const origin = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 90_000;
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null)
      throw new Error(`Warden exited during start (code ${child.exitCode}); see ${logFile}`);
    if (Date.now() > deadline) throw new Error(`Warden did not answer /api/v1/health within 90 s; see ${logFile}`);
    try {
      const res = await fetch(`${origin}/api/v1/health`);
      await res.text();
      if (res.status === 200) break;
    } catch {
      // not listening yet
    }
    await sleep(200);
  }
  // The processes running main.ts under npx and tsx: the server, or the supervisor (the
  // shallowest) and its workers, which may still be starting when the first one answers.
  const expected = options.workers > 1 ? options.workers + 1 : 1;
  const wardenProcesses = () =>
    descendants(child.pid as number)
      .filter((p) => p.cmdline.includes('apps/server/src/main.ts') && p.cmdline.includes('loader.mjs'))
      .sort((a, b) => a.depth - b.depth);
  let servers = wardenProcesses();
  while (servers.length < expected && Date.now() < deadline) {
    await sleep(200);
    servers = wardenProcesses();
  }
  const tree = descendants(child.pid as number);
  const server = servers[0] ?? tree.filter((p) => p.cmdline.includes('main.ts')).sort((a, b) => b.depth - a.depth)[0];
  if (!server) throw new Error(`cannot find the Warden server process under pid ${child.pid}`);
  if (servers.length !== expected) throw new Error(`expected ${expected} Warden processes, found ${servers.length}; see ${logFile}`);
  return {
    name: 'S',
    pid: server.pid,
    pids: servers.map((p) => p.pid),
    origin,
    baseUrl: `${origin}/api/v1`,
    key,
    logFile,
    tree: [
      `${child.pid} npx tsx ${[...(options.nodeFlags ?? []), 'apps/server/src/main.ts'].join(' ')}`,
      ...tree.map((p) => `${'  '.repeat(p.depth)}${p.pid} ${p.cmdline.slice(0, 160)}`),
    ],
    stop: async (signal: NodeJS.Signals = 'SIGTERM') => {
      // The server closes itself on SIGINT/SIGTERM (and writes its --cpu-prof profile); the wrappers follow it.
      const exited =
        child.exitCode !== null || child.signalCode !== null
          ? Promise.resolve()
          : new Promise<void>((resolve) => child.once('exit', () => resolve()));
      try {
        process.kill(server.pid, signal);
      } catch {
        // gone already
      }
      await Promise.race([exited, sleep(20_000)]);
      await stopChild(child, 'SIGTERM', 3_000);
      log.end();
    },
  };
}
