/**
 * The CLI sees what the server sees, as child processes (`node tools/warden.mjs`, what `npm run warden` runs):
 * run while a server starts on the same data directory (lock held, migrating, admin channel
 * not open yet), it answers — the server's answer once the channel opens, or one line — and
 * never a stack trace; opening the database itself, it reads the same configuration module as
 * the server (WARDEN_EGRESS_ALLOWLIST lets a loopback webhook through) and, refused, names in
 * one line the variable it needs; an unreachable database is one line too.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { START_CAP_MS } from '../support/child-ready.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const TSX = join(ROOT, 'node_modules/tsx/dist/cli.mjs');
const SERVER = join(ROOT, 'apps/server/src/main.ts');
/** What `npm run warden` runs: the CLI, built (tools/warden.mjs). */
const CLI = join(ROOT, 'tools/warden.mjs');
const CLI_TIMEOUT = 90_000;
/** With DATABASE_URL (the database project on PostgreSQL), the direct-path test runs on it, as the issue's case. */
const POSTGRES = process.env.DATABASE_URL ? { DATABASE_URL: process.env.DATABASE_URL } : {};
const BOOTSTRAP = 'wk_cli_server_view_0123456789abcdef01';

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

const dirs: string[] = [];
const children: ChildProcess[] = [];
afterAll(() => {
  for (const child of children) signalGroup(child, 'SIGKILL');
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'warden-cli-view-'));
  dirs.push(dir);
  return dir;
}

function signalGroup(child: ChildProcess, signal: NodeJS.Signals): void {
  try {
    process.kill(-(child.pid as number), signal);
  } catch {
    // already gone
  }
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

/** The embedded database in `dataDir`; nothing inherited that would change where or how. */
function envFor(dataDir: string, extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, WARDEN_DATA_DIR: dataDir, HOST: '127.0.0.1', ...extra };
  for (const name of [
    'DATABASE_URL',
    'WARDEN_BOOTSTRAP_KEY',
    'WARDEN_EGRESS_ALLOWLIST',
    'WARDEN_LOG_LEVEL',
    'WARDEN_WORKERS',
    'npm_lifecycle_event',
  ])
    if (!(name in extra)) delete env[name];
  return env;
}

function warden(args: string[], env: NodeJS.ProcessEnv): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, ...args], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk) => {
      stdout += chunk;
    });
    child.stderr.on('data', (chunk) => {
      stderr += chunk;
    });
    const timer = setTimeout(() => signalGroup(child, 'SIGKILL'), CLI_TIMEOUT);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/** What a failed command wrote, without Node's own warnings. */
const linesOf = (stderr: string) =>
  stderr
    .trim()
    .split('\n')
    .filter((line) => line !== '' && !line.includes('ExperimentalWarning') && !line.startsWith('(Use `node --trace-warnings'));

const STACK_LINE = /^\s+at /m;

describe('the CLI with the server’s view', () => {
  it('run while a server starts on the same directory, it answers once the server’s channel opens, never a stack trace', {
    timeout: START_CAP_MS + 2 * CLI_TIMEOUT,
  }, async () => {
    const dataDir = tempDir();
    const port = await freePort();
    const server = spawn(process.execPath, [TSX, SERVER], {
      cwd: ROOT,
      env: envFor(dataDir, { PORT: String(port), WARDEN_BOOTSTRAP_KEY: BOOTSTRAP }),
      stdio: ['ignore', 'ignore', 'pipe'],
      detached: true,
    });
    children.push(server);
    let log = '';
    server.stderr?.on('data', (chunk) => {
      log += chunk;
    });
    // The first moment the server holds the directory: it migrates, its admin channel is not open yet.
    const lock = join(dataDir, 'warden.lock');
    const started = Date.now();
    while (!existsSync(lock)) {
      if (Date.now() - started > START_CAP_MS || server.exitCode !== null) throw new Error(`the server never locked ${dataDir}:\n${log}`);
      await new Promise((later) => setTimeout(later, 20));
    }
    expect(existsSync(join(dataDir, 'admin.sock'))).toBe(false);
    const env = envFor(dataDir);
    const runs = await Promise.all(
      [0, 500].map(async (delay) => {
        await new Promise((later) => setTimeout(later, delay));
        return warden(['keys', 'list', '--workspace', 'default', '--json'], env);
      }),
    );
    // each: the server's answer (its channel opened within the CLI's wait), or one line saying it is starting
    for (const run of runs) {
      expect(run.stderr).not.toMatch(STACK_LINE);
      if (run.code === 0) {
        expect(linesOf(run.stderr)).toEqual([]);
        expect((JSON.parse(run.stdout) as unknown[]).length).toBeGreaterThanOrEqual(1);
      } else {
        expect(run.code).toBe(1);
        expect(linesOf(run.stderr)).toEqual([
          expect.stringMatching(
            /^warden: the server \(process \d+\) holding .* is still starting: its admin channel is not open yet; retry in a moment$/,
          ),
        ]);
      }
    }
    // once it listens, the same command answers through it
    while (!log.includes('warden listening')) {
      if (Date.now() - started > START_CAP_MS || server.exitCode !== null) throw new Error(`the server never listened:\n${log}`);
      await new Promise((later) => setTimeout(later, 50));
    }
    const after = await warden(['keys', 'list', '--workspace', 'default', '--json'], env);
    expect(after.code).toBe(0);
    expect((JSON.parse(after.stdout) as unknown[]).length).toBeGreaterThanOrEqual(1);
    expect(log).toContain('warden listening');
    signalGroup(server, 'SIGTERM');
  });

  it('opening the database itself, it reads the server’s configuration module: the egress allow-list, or one line naming it', {
    timeout: 3 * CLI_TIMEOUT,
  }, async () => {
    const dataDir = tempDir();
    const slug = `cli-view-${process.pid}-${Date.now()}`;
    const url = 'http://127.0.0.1:9/warden-hook';
    expect((await warden(['workspaces', 'create', '--slug', slug], envFor(dataDir, POSTGRES))).code).toBe(0);
    const refused = await warden(['webhooks', 'create', '--workspace', slug, '--url', url, '--events', '*'], envFor(dataDir, POSTGRES));
    expect(refused.code).toBe(1);
    expect(refused.stderr).not.toMatch(STACK_LINE);
    const lines = linesOf(refused.stderr);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(
      /^warden: url: target denied: .*WARDEN_EGRESS_ALLOWLIST.*; this command checks with its own environment, where WARDEN_EGRESS_ALLOWLIST is not set: run it with the server's WARDEN_EGRESS_ALLOWLIST$/,
    );
    // the same variable the server reads lets it through
    const allowed = await warden(
      ['webhooks', 'create', '--workspace', slug, '--url', url, '--events', '*', '--json'],
      envFor(dataDir, { ...POSTGRES, WARDEN_EGRESS_ALLOWLIST: '127.0.0.1/32' }),
    );
    expect(allowed.stderr).not.toMatch(STACK_LINE);
    expect(allowed.code).toBe(0);
    expect(JSON.parse(allowed.stdout)).toMatchObject({ url, events: ['*'] });
  });

  it('an unreachable database is one line, no stack trace', { timeout: CLI_TIMEOUT }, async () => {
    const port = await freePort(); // nothing listens there
    const run = await warden(
      ['keys', 'list', '--workspace', 'acme'],
      envFor(tempDir(), { DATABASE_URL: `postgres://postgres@127.0.0.1:${port}/postgres` }),
    );
    expect(run.code).toBe(1);
    expect(run.stderr).not.toMatch(STACK_LINE);
    expect(linesOf(run.stderr)).toEqual(['warden: cannot reach the database at DATABASE_URL (connection refused): is PostgreSQL running?']);
  });
});
