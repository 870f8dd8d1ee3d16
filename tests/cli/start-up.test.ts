/**
 * What `npm start` (`node tools/start.mjs`: the built server, built first when stale) tells a person at start, as child processes
 * on temporary embedded data directories: without WARDEN_BOOTSTRAP_KEY, one line with the exact
 * command that makes a key (and that command works); with the data directory held by another
 * server, or the port taken, one line with the fix, exit 1 and no stack trace.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { START_CAP_MS, waitForServer } from '../support/child-ready.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
/** What `npm start` execs. */
const START = join(ROOT, 'tools/start.mjs');
/** What `npm run warden` runs: the CLI, built (tools/warden.mjs). */
const CLI = join(ROOT, 'tools/warden.mjs');

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

/** The environment of a child: the embedded database in `dataDir` on `port`, nothing inherited that would change that. */
function childEnv(dataDir: string, port: number): NodeJS.ProcessEnv {
  // as tools/with-node24 sets it on a machine whose Node is older: the hint's commands then go through it too
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    WARDEN_DATA_DIR: dataDir,
    PORT: String(port),
    HOST: '127.0.0.1',
    WARDEN_VIA_WITH_NODE24: '1',
  };
  for (const name of ['DATABASE_URL', 'WARDEN_BOOTSTRAP_KEY', 'WARDEN_LOG_LEVEL', 'WARDEN_WORKERS', 'npm_lifecycle_event'])
    delete env[name];
  return env;
}

function signalGroup(child: ChildProcess, signal: NodeJS.Signals): void {
  try {
    process.kill(-(child.pid as number), signal);
  } catch {
    // already gone
  }
}

interface Exited {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs a child (node + `argv`) to its end, killing it after `timeoutMs`. */
function runToEnd(argv: string[], env: NodeJS.ProcessEnv, timeoutMs: number, node = process.execPath): Promise<Exited> {
  return new Promise((resolve, reject) => {
    const child = spawn(node, argv, { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk) => {
      stdout += chunk;
    });
    child.stderr.on('data', (chunk) => {
      stderr += chunk;
    });
    const timer = setTimeout(() => signalGroup(child, 'SIGKILL'), timeoutMs);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

interface Served {
  child: ChildProcess;
  port: number;
  baseUrl: string;
  log: () => string;
}

async function startServer(dataDir: string, port: number, onSpawn: (served: Served) => void): Promise<Served> {
  let log = '';
  const child = spawn(process.execPath, [START], {
    cwd: ROOT,
    env: childEnv(dataDir, port),
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  child.stdout?.on('data', (chunk) => {
    log += chunk;
  });
  child.stderr?.on('data', (chunk) => {
    log += chunk;
  });
  const baseUrl = `http://127.0.0.1:${port}/api/v1`;
  const served = { child, port, baseUrl, log: () => log };
  onSpawn(served);
  await waitForServer(child, { healthUrl: `${baseUrl}/health`, output: () => log });
  return served;
}

async function stop(child: ChildProcess | undefined): Promise<void> {
  if (child?.pid === undefined || child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  signalGroup(child, 'SIGTERM');
  const timer = setTimeout(() => signalGroup(child, 'SIGKILL'), 10_000);
  await exited;
  clearTimeout(timer);
}

/** The lines a failed start wrote, without Node's own warnings. */
const linesOf = (stderr: string) =>
  stderr
    .trim()
    .split('\n')
    .filter((line) => line !== '' && !line.includes('ExperimentalWarning') && !line.startsWith('(Use `node --trace-warnings'));

describe('npm start without WARDEN_BOOTSTRAP_KEY, then a second start on the same directory or port', () => {
  const dirs: string[] = [];
  const tempDir = () => {
    const dir = mkdtempSync(join(tmpdir(), 'warden-start-'));
    dirs.push(dir);
    return join(dir, 'data');
  };
  let dataDir: string;
  let served: Served | undefined;
  let spawned: Served | undefined;
  beforeAll(async () => {
    dataDir = tempDir();
    served = await startServer(dataDir, await freePort(), (s) => {
      spawned = s;
    });
  }, START_CAP_MS + 10_000);
  afterAll(async () => {
    await stop(spawned?.child);
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  }, 20_000);

  it('prints one line with the exact command that makes a key, and that command makes a key the server accepts', async () => {
    const server = served as Served;
    // The hint follows the "listening" line: wait for it (bounded).
    for (let i = 0; i < 100 && !server.log().includes('no API key yet'); i++) await new Promise((r) => setTimeout(r, 100));
    const hints = server
      .log()
      .split('\n')
      .filter((line) => line.includes('no API key yet'));
    expect(hints, server.log()).toHaveLength(1);
    expect(JSON.parse(hints[0] as string)).toMatchObject({
      level: 'info',
      message:
        `no API key yet: create one in another terminal with: WARDEN_DATA_DIR=${dataDir} tools/with-node24 npm run warden -- workspaces create --slug default` +
        ` && WARDEN_DATA_DIR=${dataDir} tools/with-node24 npm run warden -- keys create --workspace default --permissions '*'`,
    });

    // The hint's command as printed, run by a shell in the checkout (through the server's admin channel).
    const command = (JSON.parse(hints[0] as string).message as string).split(' with: ')[1] as string;
    const { WARDEN_DATA_DIR: _set, ...env } = childEnv(dataDir, server.port);
    const ran = await new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve, reject) => {
      const child = spawn('bash', ['-c', command], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
      let [stdout, stderr] = ['', ''];
      child.stdout.on('data', (chunk) => {
        stdout += chunk;
      });
      child.stderr.on('data', (chunk) => {
        stderr += chunk;
      });
      const timer = setTimeout(() => child.kill('SIGKILL'), 120_000);
      child.on('error', reject);
      child.on('close', (code) => {
        clearTimeout(timer);
        resolve({ code, stdout, stderr });
      });
    });
    expect(ran.code, ran.stderr).toBe(0);
    // the key is the line after `key <id> for workspace default (…)`
    const key = /^key \S+ for workspace default .*\n(\S+)$/m.exec(ran.stdout)?.[1] as string;
    expect(key, ran.stdout).toBeTruthy();
    const agents = await fetch(`${server.baseUrl}/agents`, { headers: { authorization: `Bearer ${key}` } });
    expect(agents.status).toBe(200);
  }, 150_000);

  it(
    'a second server on the same data directory exits 1 with one line naming the holder and the fix, without a stack',
    async () => {
      const run = await runToEnd([START], childEnv(dataDir, await freePort()), START_CAP_MS);
      expect(run.code).toBe(1);
      const lines = linesOf(run.stderr);
      expect(lines, run.stderr).toHaveLength(1);
      const holder = /in use by process (\d+) /.exec(lines[0] as string)?.[1];
      expect(holder).toMatch(/^\d+$/);
      expect(lines[0]).toBe(
        `warden: the data directory ${dataDir} is in use by process ${holder} (another Warden server?): stop that process, or give this server a directory of its own, e.g. WARDEN_DATA_DIR=${dataDir}-2 npm start`,
      );
      expect(() => process.kill(Number(holder), 0)).not.toThrow();
      expect(run.stderr).not.toMatch(/\n\s+at /);
      // The first server still serves.
      expect((await fetch(`${(served as Served).baseUrl}/health`)).status).toBe(200);
    },
    START_CAP_MS + 10_000,
  );

  it(
    'a second server on the same port exits 1 with one line naming the port and the fix, before opening its data directory',
    async () => {
      const otherDir = tempDir();
      const port = (served as Served).port;
      const run = await runToEnd([START], childEnv(otherDir, port), START_CAP_MS);
      expect(run.code).toBe(1);
      const lines = linesOf(run.stderr);
      expect(lines, run.stderr).toHaveLength(1);
      expect(lines[0]).toBe(
        `warden: port ${port} on 127.0.0.1 is already in use: stop what listens there, or start on another port, e.g. PORT=${port + 1} npm start`,
      );
      expect(run.stderr).not.toMatch(/\n\s+at /);
      expect(existsSync(otherDir)).toBe(false);
    },
    START_CAP_MS + 10_000,
  );
});

/**
 * A Node.js older than the supported ones, if this machine has one (the machines here come with
 * Node 20 at /usr/bin/node, while the suite runs on 24): the first `node` on PATH or in the usual
 * places whose major version is below 24.
 */
const OLD_NODE = [...(process.env.PATH ?? '').split(':').map((dir) => join(dir, 'node')), '/usr/bin/node', '/usr/local/bin/node'].find(
  (node) => {
    try {
      return existsSync(node) && Number(execFileSync(node, ['-p', 'process.versions.node.split(".")[0]'], { encoding: 'utf8' })) < 24;
    } catch {
      return false;
    }
  },
);

describe.skipIf(!OLD_NODE)(`npm start and the CLI on an older Node.js (${OLD_NODE})`, () => {
  const env = { ...process.env, WARDEN_DATA_DIR: join(tmpdir(), 'warden-never-created'), PORT: '1' };
  for (const [name, argv] of [
    ['npm start', [START]],
    ['the CLI', [CLI, 'keys', 'list', '--workspace', 'default']],
  ] as const) {
    it(`${name} prints one line naming the Node.js needed, exits 1, and touches nothing`, async () => {
      const run = await runToEnd([...argv], env, 30_000, OLD_NODE);
      expect(run.code).toBe(1);
      expect(run.stdout).toBe('');
      const lines = linesOf(run.stderr);
      expect(lines).toHaveLength(1);
      expect(lines[0]).toMatch(/^warden: Node\.js 24\.18 or later \(24 LTS\) is needed, this is Node\.js \d+\.\d+\.\d+ /);
      expect(existsSync(env.WARDEN_DATA_DIR)).toBe(false);
    });
  }
});
