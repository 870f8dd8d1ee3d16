/**
 * The `warden` CLI (`npm run warden -- …`, i.e. `node tools/warden.mjs`: the built CLI) as a user
 * runs it: child processes on a temporary embedded data directory, alone and while a server
 * (another child process) holds that directory; and, when DATABASE_URL is set, on PostgreSQL
 * next to a running server.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { START_CAP_MS, waitForServer } from '../support/child-ready.ts';
import { freshDatabase } from '../support/database.ts';
import { request, startTestServer, type TestServer } from '../support/server.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
/** What `npx tsx` runs, without npx's start-up cost. */
const TSX = join(ROOT, 'node_modules/tsx/dist/cli.mjs');
/** What `npm run warden` runs: the CLI, built (tools/warden.mjs). */
const CLI = join(ROOT, 'tools/warden.mjs');
const SERVER = join(ROOT, 'apps/server/src/main.ts');
const MIGRATIONS = readdirSync(join(ROOT, 'apps/server/src/db/migrations'))
  .filter((name) => name.endsWith('.sql'))
  .sort()
  .map((name) => name.replace(/\.sql$/, ''));

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
  timedOut: boolean;
}

/** The environment of a child: the embedded database in `dataDir`, or PostgreSQL at `databaseUrl`. */
function childEnv(target: { dataDir?: string; databaseUrl?: string }, extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, ...extra };
  for (const name of ['DATABASE_URL', 'WARDEN_DATA_DIR', 'WARDEN_BOOTSTRAP_KEY', 'PORT', 'HOST']) {
    if (!(name in extra)) delete env[name];
  }
  if (target.dataDir) env.WARDEN_DATA_DIR = target.dataDir;
  if (target.databaseUrl) env.DATABASE_URL = target.databaseUrl;
  return env;
}

/** Signals a child's whole process group (tsx runs the script in a node process of its own). */
function signalGroup(child: ChildProcess, signal: NodeJS.Signals): void {
  try {
    process.kill(-(child.pid as number), signal);
  } catch {
    // already gone
  }
}

/** Runs `warden …` to its end, or kills it (and what it started) after `timeoutMs`. */
function warden(args: string[], env: NodeJS.ProcessEnv, timeoutMs = 25_000): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, ...args], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    let stdout = '';
    let stderr = '';
    let timedOut = false;
    child.stdout.on('data', (chunk) => {
      stdout += chunk;
    });
    child.stderr.on('data', (chunk) => {
      stderr += chunk;
    });
    const timer = setTimeout(() => {
      timedOut = true;
      signalGroup(child, 'SIGKILL');
    }, timeoutMs);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr, timedOut });
    });
  });
}

/** Runs the CLI, expects success and one JSON document on stdout. */
async function wardenJson(args: string[], env: NodeJS.ProcessEnv, timeoutMs?: number) {
  const run = await warden([...args, '--json'], env, timeoutMs);
  expect(run.timedOut, `warden ${args.join(' ')} did not finish within ${(timeoutMs ?? 25_000) / 1000} s and was killed`).toBe(false);
  expect(run.code, `warden ${args.join(' ')} failed:\n${run.stderr}`).toBe(0);
  return JSON.parse(run.stdout.trim());
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const address = probe.address();
      probe.close(() => (address && typeof address === 'object' ? resolve(address.port) : reject(new Error('no port'))));
    });
  });
}

/** A CLI command on PostgreSQL takes about a second; a hang must fail before the test's own time-out. */
const PG_CLI_TIMEOUT = 10_000;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** A server started as a child process (`tsx apps/server/src/main.ts`) on its own embedded data directory. */
interface ServedWarden {
  process: ChildProcess;
  dataDir: string;
  baseUrl: string;
  bootstrapKey: string;
  log: () => string;
}

/** Generous: a loaded CI machine starts tsx and PGlite slowly; an idle one needs a few seconds. */
const SERVER_START_TIMEOUT = START_CAP_MS;

/** Spawns the server; `onSpawn` gets it at once, so that it can be stopped even if it never gets ready. */
async function startServedWarden(onSpawn: (served: ServedWarden) => void): Promise<ServedWarden> {
  const dataDir = mkdtempSync(join(tmpdir(), 'warden-cli-served-'));
  const port = await freePort();
  const baseUrl = `http://127.0.0.1:${port}/api/v1`;
  const bootstrapKey = `wk_boot_${randomBytes(24).toString('base64url')}`;
  let log = '';
  // Its own process group, so that stopping it stops tsx and the node process tsx starts.
  const child = spawn(process.execPath, [TSX, SERVER], {
    cwd: ROOT,
    env: childEnv({ dataDir }, { PORT: String(port), HOST: '127.0.0.1', WARDEN_BOOTSTRAP_KEY: bootstrapKey }),
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  child.stdout?.on('data', (chunk) => {
    log += chunk;
  });
  child.stderr?.on('data', (chunk) => {
    log += chunk;
  });
  const served = { process: child, dataDir, baseUrl, bootstrapKey, log: () => log };
  onSpawn(served);
  await waitForServer(child, { healthUrl: `${baseUrl}/health`, output: () => log });
  return served;
}

async function stopServedWarden(child: ChildProcess | undefined): Promise<void> {
  if (child?.pid === undefined || child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  signalGroup(child, 'SIGTERM');
  const timer = setTimeout(() => signalGroup(child, 'SIGKILL'), 5_000);
  await exited;
  clearTimeout(timer);
}

// The served server starts right away, while the first describe block runs the CLI alone:
// both spend most of their time starting up.
let servedStart: Promise<ServedWarden> | undefined;
let spawned: ServedWarden | undefined;
beforeAll(() => {
  servedStart = startServedWarden((served) => {
    spawned = served;
  });
  servedStart.catch(() => undefined); // reported by the describe block that awaits it
});
afterAll(async () => {
  await stopServedWarden(spawned?.process);
  await servedStart?.catch(() => undefined);
  await stopServedWarden(spawned?.process); // in case it was spawned only now
  if (spawned) rmSync(spawned.dataDir, { recursive: true, force: true });
}, 15_000);

describe('warden CLI on an embedded data directory, no server running', () => {
  let dataDir: string;
  let env: NodeJS.ProcessEnv;
  beforeAll(() => {
    dataDir = mkdtempSync(join(tmpdir(), 'warden-cli-'));
    env = childEnv({ dataDir });
  });
  afterAll(() => {
    rmSync(dataDir, { recursive: true, force: true });
  });

  // The first open of a directory creates the database (initdb): the slowest command by far.
  it('migrate --json applies every migration to a fresh directory', async () => {
    expect(await wardenJson(['migrate'], env, 55_000)).toEqual({ applied: MIGRATIONS });
  }, 60_000);

  it('workspaces create --slug acme --json prints the workspace', async () => {
    const workspace = await wardenJson(['workspaces', 'create', '--slug', 'acme'], env);
    expect(workspace).toMatchObject({ slug: 'acme' });
    expect(workspace.id).toMatch(UUID);
  });

  let created: { key: string; id: string; permissions: string[] } | undefined;
  it('keys create --json prints {key, id, permissions}, the key starting with wk_', async () => {
    created = await wardenJson(['keys', 'create', '--workspace', 'acme', '--permissions', 'agents:read,agents:write', '--name', 'ci'], env);
    expect(created).toMatchObject({ permissions: ['agents:read', 'agents:write'] });
    expect(created?.key).toMatch(/^wk_[A-Za-z0-9_-]{32,}$/);
    expect(created?.id).toMatch(UUID);
  });

  it('keys create exits non-zero with a message for an unknown permission, printing no key', async () => {
    const run = await warden(['keys', 'create', '--workspace', 'acme', '--permissions', 'agents:read,agents:fly', '--json'], env);
    expect(run.code).not.toBe(0);
    expect(run.stderr).toMatch(/unknown permission 'agents:fly'/);
    expect(run.stdout).not.toMatch(/wk_/);
  });

  it('keys revoke <id> revokes the key', async () => {
    expect(created, 'keys create must have run').toBeDefined();
    const id = created?.id as string;
    expect(await wardenJson(['keys', 'revoke', id], env)).toMatchObject({ id, revoked: true });
  });
});

describe('warden CLI while a server holds the embedded data directory', () => {
  let served: ServedWarden;
  let env: NodeJS.ProcessEnv;
  beforeAll(async () => {
    served = await (servedStart as Promise<ServedWarden>);
    env = childEnv({ dataDir: served.dataDir });
  }, SERVER_START_TIMEOUT + 10_000);

  it('serves the bootstrap key', async () => {
    expect((await request(served.baseUrl, served.bootstrapKey, 'GET', '/agents')).status).toBe(200);
  });

  it('creates a workspace and a key through the server; the key works at once, and is refused once revoked', async () => {
    expect((await wardenJson(['workspaces', 'create', '--slug', 'served'], env)).slug).toBe('served');
    const created = await wardenJson(
      ['keys', 'create', '--workspace', 'served', '--permissions', 'agents:read,agents:write', '--name', 'ci'],
      env,
    );
    expect(created.key).toMatch(/^wk_/);
    expect(created.permissions).toEqual(['agents:read', 'agents:write']);

    const list = await request(served.baseUrl, created.key, 'GET', '/agents');
    expect(list.status).toBe(200);
    expect(list.body).toEqual({ data: [], has_more: false, next_cursor: null });
    expect(
      (await request(served.baseUrl, created.key, 'POST', '/agents', { body: { name: 'From CLI key', provider: 'local' } })).status,
    ).toBe(201);
    // Scoped to its own workspace and its own permissions.
    expect((await request(served.baseUrl, served.bootstrapKey, 'GET', '/agents/from-cli-key')).status).toBe(404);
    expect((await request(served.baseUrl, created.key, 'GET', '/policies')).status).toBe(403);

    expect(await wardenJson(['keys', 'revoke', created.id], env)).toMatchObject({ id: created.id, revoked: true });
    const refused = await request(served.baseUrl, created.key, 'GET', '/agents');
    expect(refused.status).toBe(401);
    expect(refused.body.error.code).toBe('unauthorized');
  });

  it('reports the error of a command run through the server', async () => {
    const run = await warden(['keys', 'create', '--workspace', 'served', '--permissions', 'agents:fly'], env);
    expect(run.code).not.toBe(0);
    expect(run.stderr).toMatch(/unknown permission 'agents:fly'/);
  });

  it('migrate --json through the server reports nothing left to apply, and the server keeps running', async () => {
    expect(await wardenJson(['migrate'], env)).toEqual({ applied: [] });
    expect(served.process.exitCode).toBeNull();
    expect((await fetch(`${served.baseUrl}/health`)).status).toBe(200);
  });
});

describe.skipIf(!process.env.DATABASE_URL)('warden CLI on PostgreSQL (DATABASE_URL) next to a running server', () => {
  const baseDatabaseUrl = process.env.DATABASE_URL as string;
  let database: Awaited<ReturnType<typeof freshDatabase>> | undefined;
  let databaseUrl: string;
  let server: TestServer;
  let env: NodeJS.ProcessEnv;

  beforeAll(async () => {
    database = await freshDatabase(baseDatabaseUrl, 'warden_cli_test');
    databaseUrl = database.url;
    env = childEnv({ databaseUrl });
  });
  afterAll(async () => {
    await server?.close();
    await database?.drop();
  });

  it('migrate --json applies every migration on a fresh database', async () => {
    expect(await wardenJson(['migrate'], env, PG_CLI_TIMEOUT)).toEqual({ applied: MIGRATIONS });
  });

  it('creates a workspace and a key that a server on the same database accepts, and revokes it', async () => {
    server = await startTestServer({ databaseUrl });
    expect((await wardenJson(['workspaces', 'create', '--slug', 'acme'], env, PG_CLI_TIMEOUT)).slug).toBe('acme');
    const created = await wardenJson(
      ['keys', 'create', '--workspace', 'acme', '--permissions', 'agents:read,agents:write', '--name', 'ci'],
      env,
      PG_CLI_TIMEOUT,
    );
    expect(created.key).toMatch(/^wk_/);
    expect((await request(server.url, created.key, 'GET', '/agents')).status).toBe(200);
    await wardenJson(['keys', 'revoke', created.id], env, PG_CLI_TIMEOUT);
    expect((await request(server.url, created.key, 'GET', '/agents')).status).toBe(401);
  });
});
