/**
 * `warden audit export` and `warden audit verify` as a user runs them (child processes): the
 * export through the admin channel of a server holding an embedded data directory, then from
 * the directory itself once the server stopped, and on PostgreSQL (DATABASE_URL) next to a
 * running server; the verifier with no database at all, its report, exit codes and usage
 * errors. Tampering itself is tests/security/audit-tamper.test.ts.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { exportSigningKey, generateSigningKey } from '../../apps/server/src/features/audit/checkpoint.ts';
import { formatCosignerKey } from '../../apps/server/src/features/audit/cosignature.ts';
import type { ExportLine, OfflineReport } from '../../apps/server/src/features/audit/offline-verify.ts';
import { freshDatabase } from '../support/database.ts';
import { request, startTestServer, type TestServer } from '../support/server.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
/** What `npx tsx` runs, without npx's start-up cost. */
const TSX = join(ROOT, 'node_modules/tsx/dist/cli.mjs');
/** What `npm run warden` runs: the CLI, built (tools/warden.mjs). */
const CLI = join(ROOT, 'tools/warden.mjs');
const SERVER = join(ROOT, 'apps/server/src/main.ts');
/** Generous: a loaded machine starts tsx and PGlite slowly. */
const SERVER_START_TIMEOUT = 45_000;
const N = 6;

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** The environment of a child: the embedded database in `dataDir`, or PostgreSQL at `databaseUrl`. */
function childEnv(target: { dataDir: string; databaseUrl?: string }, extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, ...extra };
  for (const name of ['DATABASE_URL', 'WARDEN_DATA_DIR', 'WARDEN_BOOTSTRAP_KEY', 'WARDEN_AUDIT_SIGNING_KEY', 'PORT', 'HOST']) {
    if (!(name in extra)) delete env[name];
  }
  env.WARDEN_DATA_DIR = target.dataDir;
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

function warden(args: string[], env: NodeJS.ProcessEnv, timeoutMs = 25_000): Promise<Run> {
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
    const timer = setTimeout(() => signalGroup(child, 'SIGKILL'), timeoutMs);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/** Runs the CLI and expects exit 0. */
async function wardenOk(args: string[], env: NodeJS.ProcessEnv): Promise<string> {
  const run = await warden(args, env);
  expect(run.code, `warden ${args.join(' ')}:\n${run.stderr}`).toBe(0);
  return run.stdout;
}

const parseExport = (text: string) =>
  text
    .split('\n')
    .filter((line) => line.length > 0)
    .map((line) => JSON.parse(line) as ExportLine);

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

async function until<T>(what: string, probe: () => Promise<T | undefined | false>, timeoutMs = 15_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/**
 * N blocked events through the API, sealed and checkpointed; returns the log's verifier key and
 * its size (N, and any event the set-up recorded: configuration changes are audited too).
 */
async function recordEvents(baseUrl: string, key: string): Promise<{ vkey: string; size: number }> {
  for (let i = 0; i < N; i++) {
    const res = await request(baseUrl, key, 'POST', '/audit', { body: { action: `cli.op.${i}`, result: 'blocked' } });
    expect(res.status).toBe(201);
  }
  const size = await until('every event sealed', async () => {
    const { data } = (await request(baseUrl, key, 'GET', '/audit/verify')).body;
    return data.unsealed === 0 && data.tree_size >= N && (data.tree_size as number);
  });
  await until('the checkpoint of every event', async () => {
    const res = await request(baseUrl, key, 'GET', '/audit/checkpoint');
    return res.status === 200 && res.body.data.tree_size === size;
  });
  return { vkey: (await request(baseUrl, key, 'GET', '/audit/signing-key')).body.data.verifier_key, size };
}

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'warden-audit-cli-'));
});
afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

describe('warden audit verify: usage', () => {
  const env = () => childEnv({ dataDir: join(dir, 'unused') });

  it('exits 2 with the usage for missing or bad arguments, and never opens a database', async () => {
    const cases = [
      ['audit', 'verify'],
      ['audit', 'verify', '--export', join(dir, 'none.ndjson'), '--public-key', 'warden/audit/x+00000000+AAAA'],
      ['audit', 'verify', '--export', join(dir, 'none.ndjson'), '--public-key', 'not-a-key-nor-a-file'],
      ['audit', 'verify', '--bogus'],
      ['audit', 'export'],
    ];
    const runs = await Promise.all(cases.map((args) => warden(args, env())));
    for (const [i, run] of runs.entries()) {
      expect(run.code, cases[i]!.join(' ')).toBe(2);
      expect(run.stderr, cases[i]!.join(' ')).toMatch(/^warden: .*\n[\s\S]*warden audit verify --export FILE/);
      expect(run.stdout).toBe('');
    }
    expect(runs[0]!.stderr).toMatch(/needs --export FILE \(or --proof FILE\) and --public-key KEY \(or --policy FILE\)/);
    expect(runs[1]!.stderr).toMatch(/--public-key: /);
    expect(runs[2]!.stderr).toMatch(/neither a verifier key nor a file/);
    expect(runs[4]!.stderr).toMatch(/needs --workspace/);
    expect(existsSync(join(dir, 'unused'))).toBe(false);
  });

  it('--help prints the usage with the audit commands', async () => {
    const run = await warden(['--help'], env());
    expect(run.code).toBe(0);
    expect(run.stderr).toMatch(/warden audit export --workspace S \[--out FILE\]/);
  });
});

describe('warden audit export / verify on an embedded data directory', () => {
  let dataDir: string;
  let server: ChildProcess | undefined;
  let log = '';
  let baseUrl: string;
  let vkey: string;
  let size: number;
  let channelExport: string;

  beforeAll(async () => {
    dataDir = join(dir, 'data');
    const port = await freePort();
    baseUrl = `http://127.0.0.1:${port}/api/v1`;
    const bootstrapKey = `wk_boot_${randomBytes(24).toString('base64url')}`;
    server = spawn(process.execPath, [TSX, SERVER], {
      cwd: ROOT,
      env: childEnv(
        { dataDir },
        {
          PORT: String(port),
          HOST: '127.0.0.1',
          WARDEN_BOOTSTRAP_KEY: bootstrapKey,
          WARDEN_AUDIT_SEAL_INTERVAL_MS: '100',
          WARDEN_AUDIT_CHECKPOINT_INTERVAL_MS: '100',
        },
      ),
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    server.stdout?.on('data', (chunk) => {
      log += chunk;
    });
    server.stderr?.on('data', (chunk) => {
      log += chunk;
    });
    await until(
      `the server (log:\n${log})`,
      async () => (await fetch(`${baseUrl}/health`, { signal: AbortSignal.timeout(2_000) }).catch(() => undefined))?.status === 200,
      SERVER_START_TIMEOUT,
    );
    ({ vkey, size } = await recordEvents(baseUrl, bootstrapKey));
  }, SERVER_START_TIMEOUT + 20_000);

  afterAll(async () => {
    await stop(server);
  });

  async function stop(child: ChildProcess | undefined): Promise<void> {
    if (child?.pid === undefined || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    signalGroup(child, 'SIGTERM');
    const timer = setTimeout(() => signalGroup(child, 'SIGKILL'), 5_000);
    await exited;
    clearTimeout(timer);
  }

  it('export --out writes the log through the running server and prints a summary; stdout gets the same lines', async () => {
    const out = join(dir, 'embedded.ndjson');
    const env = childEnv({ dataDir });
    const summary = JSON.parse(await wardenOk(['audit', 'export', '--workspace', 'default', '--out', out, '--json'], env));
    expect(summary).toMatchObject({ workspace: 'default', tree_size: size, events: size, out });
    expect(summary.checkpoints).toBeGreaterThanOrEqual(1);
    channelExport = readFileSync(out, 'utf8');
    const lines = parseExport(channelExport);
    // The header names the server's own key (read from its data directory, never created).
    expect(lines[0]).toEqual({
      type: 'log',
      origin: summary.origin,
      workspace_id: summary.workspace_id,
      tree_size: size,
      root_hash: expect.stringMatching(/^[0-9a-f]{64}$/),
      verifier_key: vkey,
    });
    expect(lines.filter((line) => line.type === 'event')).toHaveLength(size);
    expect(lines[lines.length - 1]).toMatchObject({ type: 'checkpoint', tree_size: size });

    expect(await wardenOk(['audit', 'export', '--workspace', 'default'], env)).toBe(channelExport);
  });

  it('verify checks the export against the server checkpoint file with the public key: exit 0 and a report', async () => {
    const exportFile = join(dir, 'embedded.ndjson');
    const checkpoints = join(dataDir, 'audit-checkpoints.ndjson');
    const env = childEnv({ dataDir: join(dir, 'unused') });
    const human = await warden(['audit', 'verify', '--export', exportFile, '--checkpoint', checkpoints, '--public-key', vkey], env);
    expect(human.code, human.stderr).toBe(0);
    expect(human.stdout).toContain(`log ${vkey.split('+')[0]}\nevents: ${size}, root `);
    expect(human.stdout).toMatch(/VALID: every event hashes to its leaf and the tree makes every signed checkpoint, up to size \d+\n$/);
    expect(human.stdout).toContain(`up to size ${size}\n`);

    // The same pinned as a C2SP tlog-policy: the log, no witnesses needed; then one required that never cosigned
    const policy = join(dir, 'trust.policy');
    writeFileSync(policy, `# the log alone\nlog ${vkey}\nquorum none\n`);
    const byPolicy = await warden(['audit', 'verify', '--export', exportFile, '--checkpoint', checkpoints, '--policy', policy], env);
    expect(byPolicy.code, byPolicy.stderr).toBe(0);
    expect(byPolicy.stdout).toContain('VALID');
    const witness = formatCosignerKey('witness.example', generateSigningKey().publicKey);
    writeFileSync(policy, `log ${vkey}\nwitness w ${witness}\nquorum w\n`);
    const unwitnessed = await warden(['audit', 'verify', '--export', exportFile, '--checkpoint', checkpoints, '--policy', policy], env);
    expect(unwitnessed.code).toBe(1);
    expect(unwitnessed.stdout).toMatch(/quorum/);

    // The key from a file: as GET /audit/signing-key answers it.
    const keyFile = join(dir, 'signing-key.json');
    writeFileSync(keyFile, JSON.stringify({ data: { verifier_key: vkey } }));
    const json = await warden(
      ['audit', 'verify', '--export', exportFile, '--checkpoint', checkpoints, '--public-key', keyFile, '--json'],
      env,
    );
    expect(json.code, json.stderr).toBe(0);
    const report = JSON.parse(json.stdout) as OfflineReport;
    expect(report).toMatchObject({
      valid: true,
      events: size,
      tree_size: size,
      verified_size: size,
      first_bad_index: null,
      problems: [],
      warnings: [],
    });
    expect(report.checkpoints_outside).toBeGreaterThanOrEqual(1);
  });

  it('verify reports an export cut short (exit 1), naming the index where it ends', async () => {
    const lines = channelExport.split('\n').filter((line) => line.length > 0);
    const cut = join(dir, 'cut.ndjson');
    writeFileSync(cut, `${lines.slice(0, 1 + 4).join('\n')}\n`); // the header and the first 4 events
    const env = childEnv({ dataDir: join(dir, 'unused') });
    const run = await warden(
      ['audit', 'verify', '--export', cut, '--checkpoint', join(dataDir, 'audit-checkpoints.ndjson'), '--public-key', vkey, '--json'],
      env,
    );
    expect(run.code).toBe(1);
    const report = JSON.parse(run.stdout) as OfflineReport;
    expect(report.first_bad_index).toBeLessThanOrEqual(4);
    expect(report.problems).toContainEqual(expect.objectContaining({ kind: 'incomplete_export', index: 4 }));
    expect(report.problems.map((p) => p.kind)).toContain('truncated');
  });

  it('once the server stopped, export opens the directory itself and writes the same lines', async () => {
    await stop(server);
    expect(await wardenOk(['audit', 'export', '--workspace', 'default'], childEnv({ dataDir }))).toBe(channelExport);
  }, 60_000);
});

describe.skipIf(!process.env.DATABASE_URL)('warden audit export on PostgreSQL (DATABASE_URL) next to a running server', () => {
  let database: Awaited<ReturnType<typeof freshDatabase>> | undefined;
  let server: TestServer | undefined;
  const signingKey = exportSigningKey(generateSigningKey());
  let checkpointFile: string;
  let vkey: string;
  let size: number;

  beforeAll(async () => {
    database = await freshDatabase(process.env.DATABASE_URL as string, 'warden_audit_cli');
    checkpointFile = join(dir, 'pg-checkpoints.ndjson');
    server = await startTestServer({
      databaseUrl: database.url,
      auditSigningKey: signingKey,
      auditCheckpointFile: checkpointFile,
      auditSealIntervalMs: 50,
      auditCheckpointIntervalMs: 50,
    });
    ({ vkey, size } = await recordEvents(server.url, server.key));
  });
  afterAll(async () => {
    await server?.close();
    await database?.drop();
  });

  it('exports with the signing key of the configuration and verifies (exit 0)', async () => {
    const out = join(dir, 'pg.ndjson');
    const env = childEnv({ dataDir: join(dir, 'pg-data'), databaseUrl: database!.url }, { WARDEN_AUDIT_SIGNING_KEY: signingKey });
    await wardenOk(['audit', 'export', '--workspace', 'default', '--out', out], env);
    const lines = parseExport(readFileSync(out, 'utf8'));
    expect(lines[0]).toMatchObject({ type: 'log', tree_size: size, verifier_key: vkey });
    const verify = await warden(['audit', 'verify', '--export', out, '--checkpoint', checkpointFile, '--public-key', vkey], env);
    expect(verify.code, verify.stdout).toBe(0);
  });

  it('without the signing key the header names none, and no key is created', async () => {
    const dataDir = join(dir, 'pg-keyless');
    const text = await wardenOk(['audit', 'export', '--workspace', 'default'], childEnv({ dataDir, databaseUrl: database!.url }));
    expect(parseExport(text)[0]).toMatchObject({ type: 'log', tree_size: size, verifier_key: null });
    expect(existsSync(join(dataDir, 'audit-signing.key'))).toBe(false);
  });
});
