/**
 * Only one process may open an embedded data directory: PGlite has no locking of its own and
 * two writers would corrupt it. The lock is a file holding the owner's pid; a lock left by a
 * process that no longer exists is taken over.
 */
import { chmodSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

export class DataDirLockedError extends Error {
  constructor(
    readonly dataDir: string,
    readonly pid: number,
  ) {
    super(`the embedded database in ${dataDir} is open in process ${pid}`);
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

export function lockHolder(dataDir: string): number | null {
  try {
    const pid = Number(readFileSync(join(dataDir, 'warden.lock'), 'utf8'));
    return Number.isInteger(pid) && pid !== process.pid && isAlive(pid) ? pid : null;
  } catch {
    return null;
  }
}

/**
 * Creates the data directory for its owner only (0700): it holds the database and master.key.
 * A directory made earlier with looser modes is tightened. (PGlite's files are world-readable;
 * the directory keeps others out of them.)
 */
export function prepareDataDir(dataDir: string): void {
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  chmodSync(dataDir, 0o700);
}

/**
 * A secret kept in a file of the data directory (mode 0600), created by `create` on first use:
 * the master key and the audit signing key live beside the database, never in it. An in-memory
 * database has no directory: undefined.
 */
export function readOrCreateSecretFile(dataDir: string, name: string, create: () => string): string | undefined {
  if (dataDir.startsWith('memory://')) return undefined;
  const file = join(dataDir, name);
  prepareDataDir(dataDir);
  if (!existsSync(file)) writeFileSync(file, create(), { mode: 0o600, flag: 'wx' });
  else chmodSync(file, 0o600); // one written earlier with a looser mode
  return readFileSync(file, 'utf8').trim();
}

export function acquireDataDirLock(dataDir: string): () => void {
  prepareDataDir(dataDir);
  const file = join(dataDir, 'warden.lock');
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      writeFileSync(file, String(process.pid), { flag: 'wx', mode: 0o600 }); // atomic: fails if it exists
      return () => rmSync(file, { force: true });
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      const holder = lockHolder(dataDir);
      if (holder !== null) throw new DataDirLockedError(dataDir, holder);
      rmSync(file, { force: true }); // stale: its process is gone
    }
  }
  throw new Error(`could not lock ${dataDir}`);
}
