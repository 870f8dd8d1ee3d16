/**
 * The built server (`apps/server/dist`, tools/build-server.ts) kept current: `ensureServerBuilt()`
 * builds it when it is missing or older than its sources, and otherwise does nothing. "Older" is
 * by content: a SHA-256 over every source file the build reads, written beside the build, so a
 * checkout, a branch switch or an edit is noticed whatever the clocks say. Plain JavaScript, so
 * that `npm start` (tools/start.mjs) loads no TypeScript tooling at all.
 */
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
/** What the build reads: the server, the contract, the dashboard's build module, the SDK (whose audit formats and proofs it compiles in), the build itself. */
const INPUTS = ['apps/server/src', 'packages/contract/src', 'packages/sdk/src', 'apps/dashboard/build.ts', 'tools/build-server.ts'];
/** The digest of the sources a build was made of, written by the build itself (tools/build-server.ts). */
export const DIGEST_FILE = join(ROOT, 'apps/server/dist/.sources-sha256');
/** Held while one process builds, so that two starts (or two test files) never build over each other. */
const LOCK_DIR = join(ROOT, 'apps/server/.build-lock');
/** A lock older than this was left by a build that died. */
const STALE_LOCK_MS = 120_000;

function files(path) {
  if (!statSync(path).isDirectory()) return [path];
  return readdirSync(path, { recursive: true, encoding: 'utf8' })
    .map((name) => join(path, name))
    .filter((file) => statSync(file).isFile());
}

/** The digest of every input file, by path and content. */
export function sourcesDigest() {
  const hash = createHash('sha256');
  for (const file of INPUTS.flatMap((input) => files(join(ROOT, input))).sort()) {
    hash.update(`${relative(ROOT, file)}\0`);
    hash.update(readFileSync(file));
    hash.update('\0');
  }
  return hash.digest('hex');
}

const isCurrent = (digest) => existsSync(DIGEST_FILE) && readFileSync(DIGEST_FILE, 'utf8') === digest;

/** The lock's holder: its pid, unless the lock is older than any build takes or the process is gone. */
function liveHolder() {
  try {
    if (Date.now() - statSync(LOCK_DIR).mtimeMs > STALE_LOCK_MS) return undefined;
    const pid = Number(readFileSync(join(LOCK_DIR, 'pid'), 'utf8'));
    process.kill(pid, 0);
    return pid;
  } catch (error) {
    // no pid written yet: its holder is between mkdir and writing it
    return error.code === 'ENOENT' && existsSync(LOCK_DIR) ? 0 : undefined;
  }
}

function takeLock() {
  try {
    mkdirSync(LOCK_DIR);
    writeFileSync(join(LOCK_DIR, 'pid'), String(process.pid));
    return true;
  } catch (error) {
    if (error.code !== 'EEXIST') throw error; // a checkout the build cannot write to: say so, do not wait
    if (liveHolder() === undefined) rmSync(LOCK_DIR, { recursive: true, force: true }); // left by a build that died
    return false;
  }
}

/**
 * Builds the server unless its build is current; `say` hears one line when it does. Returns
 * whether it built. Throws when the build fails (its output is passed through).
 */
export async function ensureServerBuilt(say = () => {}) {
  const deadline = Date.now() + STALE_LOCK_MS * 2;
  for (;;) {
    const digest = sourcesDigest();
    if (isCurrent(digest)) return false;
    if (takeLock()) {
      try {
        if (isCurrent(sourcesDigest())) return false; // built by another process meanwhile
        const started = Date.now();
        const built = spawnSync(process.execPath, [join(ROOT, 'tools/build-server.ts'), 'contract', 'dashboard', 'server'], {
          cwd: ROOT,
          stdio: ['ignore', 'ignore', 'inherit'],
        });
        if (built.status !== 0) throw new Error(`building the server failed (exit ${built.status ?? built.signal})`);
        say(`built the server from its sources in ${Date.now() - started} ms (apps/server/dist)`);
        return true;
      } finally {
        rmSync(LOCK_DIR, { recursive: true, force: true });
      }
    }
    if (Date.now() > deadline)
      throw new Error(`another build (process ${liveHolder() ?? '?'}) holds ${relative(ROOT, LOCK_DIR)}; remove it if no build is running`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}
