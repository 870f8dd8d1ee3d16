/**
 * API keys are listed by a short display prefix that reveals little of the secret, and a
 * WARDEN_BOOTSTRAP_KEY too short to stay secret (under 32 characters) is refused at start.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../apps/server/src/logger.ts';
import { startServer } from '../../apps/server/src/server.ts';
import { childEnv, freePort, ROOT } from '../reliability/support/child-server.ts';
import { useTestServer } from '../support/server.ts';

/** tsx's loader in the node process itself (no wrapper process), so that a kill reaches the server. */
const TSX_LOADER = pathToFileURL(join(ROOT, 'node_modules/tsx/dist/loader.mjs')).href;
const SERVER = join(ROOT, 'apps/server/src/main.ts');

const server = useTestServer();
const scratch = mkdtempSync(join(tmpdir(), 'warden-bootstrap-'));
afterAll(() => {
  rmSync(scratch, { recursive: true, force: true });
});

/** `npm start` (main.ts) with `env`, bounded: its exit code and stderr. */
function start(env: Record<string, string>): Promise<{ code: number | null; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', TSX_LOADER, SERVER], {
      cwd: ROOT,
      env: childEnv(env),
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (chunk) => {
      stderr += chunk;
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stderr });
    });
  });
}

describe('WARDEN_BOOTSTRAP_KEY', () => {
  it('npm start refuses a 16-character key with one line on stderr and exit code 1, before opening the data directory', async () => {
    const dataDir = join(scratch, 'short');
    const short = 'wk_local_dev_key';
    const run = await start({ WARDEN_BOOTSTRAP_KEY: short, WARDEN_DATA_DIR: dataDir, PORT: String(await freePort()) });
    expect(run.code).toBe(1);
    const lines = run.stderr.trim().split('\n');
    expect(lines, run.stderr).toHaveLength(1);
    expect(lines[0]).toMatch(/WARDEN_BOOTSTRAP_KEY.*at least 32 characters/);
    expect(run.stderr).not.toContain(short);
    expect(existsSync(dataDir)).toBe(false);
  }, 40_000);

  it('startServer refuses a 31-character key', async () => {
    const started = startServer(
      { port: 0, host: '127.0.0.1', dataDir: 'memory://', databaseUrl: undefined, bootstrapKey: `wk_${'a'.repeat(28)}` },
      createLogger(true),
    );
    await expect(started).rejects.toThrow(/WARDEN_BOOTSTRAP_KEY must be at least 32 characters/);
    await started.then((s) => s.close()).catch(() => undefined);
  });
});

describe('API key display prefixes', () => {
  it('keys list shows each key by wk_ and 4 characters of it', async () => {
    const created = await server.admin('keys.create', { workspace: 'default', permissions: 'agents:read' });
    const listed = await server.admin('keys.list', { workspace: 'default' });
    const prefixes = Object.fromEntries(listed.map((k: { id: string; prefix: string }) => [k.id, k.prefix]));
    expect(prefixes[created.id]).toBe(created.key.slice(0, 7));
    expect(prefixes[created.id]).toMatch(/^wk_[A-Za-z0-9_-]{4}$/);
    for (const prefix of Object.values(prefixes)) expect(prefix).toHaveLength(7);
    expect(Object.values(prefixes)).toContain(server.key.slice(0, 7));
  });
});
