/**
 * `npm start` runs built JavaScript, built first whenever the build is missing or older than its
 * sources (tools/server-build.mjs). Tried on a copy of the build's inputs (node_modules linked),
 * so that editing a source here never disturbs the build other test files run.
 */
import { execFile } from 'node:child_process';
import { appendFileSync, cpSync, existsSync, mkdtempSync, readdirSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const COPIED = [
  'package.json',
  'tools/start.mjs',
  'tools/server-build.mjs',
  'tools/build-server.ts',
  'apps/server/src',
  'packages/contract/src',
  'packages/sdk/src',
  'apps/dashboard/build.ts',
];

describe('the build npm start runs', () => {
  const copy = mkdtempSync(join(tmpdir(), 'warden-build-'));
  for (const path of COPIED) cpSync(join(ROOT, path), join(copy, path), { recursive: true });
  symlinkSync(join(ROOT, 'node_modules'), join(copy, 'node_modules'));
  afterAll(() => rmSync(copy, { recursive: true, force: true }));

  /** ensureServerBuilt() in the copy, in a child process: whether it built, and what it said. */
  const ensure = async () => {
    const script = `const m = await import(${JSON.stringify(join(copy, 'tools/server-build.mjs'))}); const said = []; const built = await m.ensureServerBuilt((l) => said.push(l)); console.log(JSON.stringify({ built, said }));`;
    const { stdout } = await promisify(execFile)(process.execPath, ['--input-type=module', '-e', script], { cwd: copy, timeout: 120_000 });
    return JSON.parse(stdout) as { built: boolean; said: string[] };
  };

  it('builds when there is no build, not again while the sources are unchanged, and again after an edit', async () => {
    const first = await ensure();
    expect(first.built).toBe(true);
    expect(first.said).toEqual([expect.stringMatching(/^built the server from its sources in \d+ ms \(apps\/server\/dist\)$/)]);
    expect(existsSync(join(copy, 'apps/server/dist/main.js'))).toBe(true);
    expect(existsSync(join(copy, 'apps/server/.build-lock'))).toBe(false);

    expect(await ensure()).toEqual({ built: false, said: [] });

    // an edit changes the content, whatever the clock says
    appendFileSync(join(copy, 'apps/server/src/launch.ts'), '\n// edited\n');
    expect((await ensure()).built).toBe(true);
    expect(await ensure()).toEqual({ built: false, said: [] });
  }, 240_000);

  it('a rebuild never leaves the build missing or half-written for a server that runs from it', async () => {
    appendFileSync(join(copy, 'apps/server/src/launch.ts'), '\n// edited for a rebuild\n');
    const main = join(copy, 'apps/server/dist/main.js');
    const digest = join(copy, 'apps/server/dist/.sources-sha256');
    const building = ensure();
    let done = false;
    void building.finally(() => {
      done = true;
    });
    let looks = 0;
    // what a running server's late import would find, looked at every few milliseconds while it builds
    while (!done) {
      expect(existsSync(main) && existsSync(digest), 'the build was missing during a rebuild').toBe(true);
      looks++;
      await new Promise((resolve) => setTimeout(resolve, 2));
    }
    expect((await building).built).toBe(true);
    expect(looks).toBeGreaterThan(10);
    expect(readdirSync(join(copy, 'apps/server')).filter((name) => name.startsWith('dist.'))).toEqual([]);
  }, 240_000);

  it('two starts at once build once: the second waits for the first and finds the build current', async () => {
    appendFileSync(join(copy, 'apps/server/src/launch.ts'), '\n// edited again\n');
    const [a, b] = await Promise.all([ensure(), ensure()]);
    expect([a.built, b.built].sort()).toEqual([false, true]);
    expect(await ensure()).toEqual({ built: false, said: [] });
  }, 240_000);
});
