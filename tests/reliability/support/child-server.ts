/**
 * Warden as a user runs it: `apps/server/src/main.ts` in a child process of its own (node with
 * tsx's loader, so the child's pid is the server's — what `npx tsx` runs, minus the wrapper
 * processes), on a free loopback port, with its stdout/stderr captured. The child is started
 * in its own process group and always killed as a group.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:net';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { waitForServer } from '../../support/child-ready.ts';
import { assertDatabaseAllowed } from '../../support/database.ts';

export const ROOT = fileURLToPath(new URL('../../..', import.meta.url));
const SERVER = join(ROOT, 'apps/server/src/main.ts');
const TSX_LOADER = pathToFileURL(join(ROOT, 'node_modules/tsx/dist/loader.mjs')).href;
const TSX_CLI = join(ROOT, 'node_modules/tsx/dist/cli.mjs');
/** What `npm run build` writes (tools/build-server.ts). */
export const BUILT_SERVER = join(ROOT, 'apps/server/dist/main.js');

export interface ChildServer {
  pid: number;
  port: number;
  /** http://127.0.0.1:PORT/api/v1 */
  url: string;
  /** Everything the process wrote to stdout and stderr so far. */
  output(): string;
  /** Null while running. */
  exitStatus(): { code: number | null; signal: NodeJS.Signals | null } | null;
  /** Sends a signal to the server's process group. */
  signal(signal: NodeJS.Signals): void;
  /** Sends a signal to the started process only (npm's, when started with `npm start`). */
  signalProcess(signal: NodeJS.Signals): void;
  /** SIGTERM, then SIGKILL after `graceMs`; resolves when the process is gone. */
  stop(graceMs?: number): Promise<void>;
}

export async function freePort(): Promise<number> {
  const probe = createServer();
  await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
  const { port } = probe.address() as { port: number };
  await new Promise<void>((resolve) => probe.close(() => resolve()));
  return port;
}

/** The child's environment: this process's, without anything that would point it elsewhere, plus `extra`. */
export function childEnv(extra: Record<string, string | undefined>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const name of [
    'DATABASE_URL',
    'WARDEN_DATA_DIR',
    'WARDEN_BOOTSTRAP_KEY',
    'PORT',
    'HOST',
    'REDIS_URL',
    'NODE_ENV',
    'WARDEN_EGRESS_ALLOWLIST',
    'VITEST',
    'VITEST_POOL_ID',
    'VITEST_WORKER_ID',
    'NODE_OPTIONS',
  ])
    delete env[name];
  for (const [name, value] of Object.entries(extra)) if (value !== undefined) env[name] = value;
  return env;
}

export async function startChildServer(options: {
  env: Record<string, string | undefined>;
  port?: number;
  /** The cap on the start (START_CAP_MS of tests/support/child-ready.ts, 120 s, unless given): the wait ends as soon as the server logs that it listens, or exits. */
  readyTimeoutMs?: number;
  nodeArgs?: string[];
  /** Start it through tsx's CLI (a parent that relays signals), not with tsx's loader in one process. */
  viaTsxCli?: boolean;
  /** Start it as `npm start` (npm, then the server), or as production does: `node apps/server/dist/main.js` (built first). */
  command?: 'npm-start' | 'built';
}): Promise<ChildServer> {
  assertDatabaseAllowed();
  const port = options.port ?? (await freePort());
  const [file, args] =
    options.command === 'npm-start'
      ? ['npm', ['start', '--silent']]
      : options.command === 'built'
        ? [process.execPath, [...(options.nodeArgs ?? []), BUILT_SERVER]]
        : [process.execPath, options.viaTsxCli ? [TSX_CLI, SERVER] : [...(options.nodeArgs ?? []), '--import', TSX_LOADER, SERVER]];
  const child: ChildProcess = spawn(file, args, {
    cwd: ROOT,
    // no drain period unless a test asks for one: a stop need not wait for a load balancer here
    env: childEnv({
      WARDEN_SHUTDOWN_DRAIN_MS: '0',
      ...options.env,
      PORT: String(port),
      HOST: '127.0.0.1',
      // npm runs the node this process runs
      PATH: `${dirname(process.execPath)}:${process.env.PATH ?? ''}`,
    }),
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  let output = '';
  let status: { code: number | null; signal: NodeJS.Signals | null } | null = null;
  child.stdout?.on('data', (chunk) => {
    output += chunk;
  });
  child.stderr?.on('data', (chunk) => {
    output += chunk;
  });
  const exited = new Promise<void>((resolve) => {
    child.on('exit', (code, signal) => {
      status = { code, signal };
      resolve();
    });
  });
  const signal = (sig: NodeJS.Signals) => {
    try {
      process.kill(-(child.pid as number), sig);
    } catch {
      // already gone
    }
  };
  const server: ChildServer = {
    pid: child.pid as number,
    port,
    url: `http://127.0.0.1:${port}/api/v1`,
    output: () => output,
    exitStatus: () => status,
    signal,
    signalProcess: (sig) => {
      try {
        process.kill(child.pid as number, sig);
      } catch {
        // already gone
      }
    },
    stop: async (graceMs = 10_000) => {
      if (status) return;
      signal('SIGTERM');
      const timer = setTimeout(() => signal('SIGKILL'), graceMs);
      await exited;
      clearTimeout(timer);
    },
  };
  try {
    await waitForServer(child, { healthUrl: `${server.url}/health`, output: () => output, capMs: options.readyTimeoutMs });
  } catch (error) {
    signal('SIGKILL');
    throw error;
  }
  return server;
}

/** A workspace API key in the bootstrap format. */
export const randomKey = (label: string) => `wk_${label}_${randomBytes(24).toString('base64url')}`;
