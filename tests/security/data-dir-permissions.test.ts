/**
 * The embedded data directory (WARDEN_DATA_DIR) holds the database, the master key that
 * decrypts webhook secrets, the lock and the admin socket: only its owner may read it. The
 * server and the CLI create it 0700 and their files in it 0600, and tighten a directory made
 * earlier with looser modes when they start.
 */
import { spawn } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../apps/server/src/logger.ts';
import { startServer } from '../../apps/server/src/server.ts';
import { childEnv, ROOT } from '../reliability/support/child-server.ts';

/** What `npm run warden` runs: the CLI, built (tools/warden.mjs). */
const CLI = join(ROOT, 'tools/warden.mjs');

const scratch = mkdtempSync(join(tmpdir(), 'warden-modes-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

const mode = (path: string) => (statSync(path).mode & 0o777).toString(8).padStart(4, '0');

/** Runs `warden …` on `dataDir` (the embedded database), bounded. */
function warden(args: string[], dataDir: string): Promise<{ code: number | null; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, ...args], {
      cwd: ROOT,
      env: childEnv({ WARDEN_DATA_DIR: dataDir }),
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (chunk) => {
      stderr += chunk;
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stderr });
    });
  });
}

describe('the embedded data directory’s modes', () => {
  it('warden migrate on a new data directory creates it 0700 with master.key 0600', async () => {
    const dataDir = join(scratch, 'new-by-cli', 'data');
    const run = await warden(['migrate', '--json'], dataDir);
    expect(run.code, run.stderr).toBe(0);
    expect(mode(dataDir)).toBe('0700');
    expect(mode(join(dataDir, 'master.key'))).toBe('0600');
    expect(mode(join(dataDir, 'pgdata'))).toBe('0700');
  }, 90_000);

  it('starting the server on a data directory made 0755 with a 0644 master.key tightens them to 0700 and 0600, the lock and socket 0600', async () => {
    const dataDir = join(scratch, 'loose');
    mkdirSync(join(dataDir, 'pgdata'), { recursive: true, mode: 0o755 });
    chmodSync(dataDir, 0o755);
    chmodSync(join(dataDir, 'pgdata'), 0o755);
    writeFileSync(join(dataDir, 'master.key'), Buffer.alloc(32, 7).toString('base64'), { mode: 0o644 });
    chmodSync(join(dataDir, 'master.key'), 0o644);

    const server = await startServer(
      { port: 0, host: '127.0.0.1', databaseUrl: undefined, dataDir, masterKey: undefined, bootstrapKey: undefined },
      createLogger(true),
    );
    try {
      expect(mode(dataDir)).toBe('0700');
      expect(mode(join(dataDir, 'pgdata'))).toBe('0700');
      expect(mode(join(dataDir, 'master.key'))).toBe('0600');
      expect(mode(join(dataDir, 'warden.lock'))).toBe('0600');
      expect(mode(join(dataDir, 'admin.sock'))).toBe('0600');
    } finally {
      await server.close();
    }
  }, 90_000);
});
