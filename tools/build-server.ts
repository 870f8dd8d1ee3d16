/**
 * `npm run build`: the server (and the CLI) as JavaScript that Node runs as it is —
 * `node apps/server/dist/main.js` — so that nothing stands between a service manager and the
 * server (no npm, no tsx, no compiling at start). Each TypeScript file becomes one JavaScript
 * file at the same place under `dist/` (so paths relative to `import.meta.url`, such as the spec
 * and the migrations, stay right), its `.ts` imports become `.js`, and `@warden/contract` points
 * at the contract's own build; a file from outside the sources (the SDK's audit formats) is
 * compiled into the file that imports it. The SQL migrations are copied next to their runner. Packages from
 * node_modules stay imports: install them with `npm ci --omit=dev`.
 */
import { cpSync, existsSync, readdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { basename, dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build, type Plugin } from 'esbuild';
import { DIGEST_FILE, sourcesDigest } from './server-build.mjs';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const CONTRACT_BUILT = join(ROOT, 'packages/contract/dist/index.js');

/** The TypeScript sources under `dir`, tests left out. */
function sources(dir: string): string[] {
  return readdirSync(dir, { recursive: true, encoding: 'utf8' })
    .filter((file) => file.endsWith('.ts') && !file.endsWith('.test.ts') && !file.endsWith('.d.ts'))
    .map((file) => join(dir, file));
}

/** Every import stays an import; relative `.ts` ones become `.js`, `@warden/contract` its build. */
const keepImports = (srcDir: string, outDir: string): Plugin => ({
  name: 'keep-imports',
  setup(b) {
    b.onResolve({ filter: /.*/ }, (args) => {
      if (args.kind === 'entry-point') return undefined;
      if (args.path === '@warden/contract') {
        const importerOut = join(outDir, relative(srcDir, args.importer));
        const path = relative(dirname(importerOut), CONTRACT_BUILT).split(sep).join('/');
        return { path: path.startsWith('.') ? path : `./${path}`, external: true };
      }
      if (args.path.startsWith('.')) {
        // the audit log's formats, shared with the SDK (packages/sdk/src/audit-format.ts), are
        // compiled into the one server file that imports them
        if (!resolve(dirname(args.importer), args.path).startsWith(srcDir + sep)) return undefined;
        return { path: args.path.replace(/\.ts$/, '.js'), external: true };
      }
      return { path: args.path, external: true };
    });
  },
});

/**
 * Compiles into a directory beside `outDir`, completes it (`finish`), then swaps it in by two
 * renames: a server running from `outDir` never finds it half-built or missing (its later
 * imports would fail), and a build that fails leaves the old one.
 */
async function compile(
  srcDir: string,
  outDir: string,
  entryPoints: string[] = sources(srcDir),
  finish: (dir: string) => void = () => {},
): Promise<number> {
  const next = `${outDir}.next-${process.pid}`;
  const old = `${outDir}.old-${process.pid}`;
  rmSync(next, { recursive: true, force: true });
  await build({
    entryPoints,
    outbase: srcDir,
    outdir: next,
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node24',
    logLevel: 'warning',
    plugins: [keepImports(srcDir, outDir)],
  });
  finish(next);
  if (existsSync(outDir)) renameSync(outDir, old);
  renameSync(next, outDir);
  rmSync(old, { recursive: true, force: true });
  return entryPoints.length;
}

/** What each workspace's `npm run build` builds (turbo runs them in dependency order). */
const targets: Record<string, () => Promise<string>> = {
  contract: async () => `${await compile(join(ROOT, 'packages/contract/src'), join(ROOT, 'packages/contract/dist'))} contract files`,
  // the dashboard's build module (it compiles the app in memory at the first page request)
  dashboard: async () => {
    const dir = join(ROOT, 'apps/dashboard');
    await compile(dir, join(dir, 'dist'), [join(dir, 'build.ts')]);
    return 'the dashboard build module';
  },
  server: async () => {
    const files = await compile(join(ROOT, 'apps/server/src'), join(ROOT, 'apps/server/dist'), undefined, (dir) => {
      cpSync(join(ROOT, 'apps/server/src/db/migrations'), join(dir, 'db/migrations'), { recursive: true });
      // what the build was made of, read before it started: `npm start` and `npm run warden` run it as it is while their sources still hash so
      writeFileSync(join(dir, basename(DIGEST_FILE)), digestAtStart);
    });
    return `${files} server files (run: node apps/server/dist/main.js)`;
  },
};

const started = performance.now();
const digestAtStart = sourcesDigest();
const wanted = process.argv.slice(2);
const unknown = wanted.filter((name) => !(name in targets));
if (unknown.length > 0) {
  console.error(`build-server: no target ${unknown.join(', ')} (targets: ${Object.keys(targets).join(', ')})`);
  process.exit(2);
}
for (const name of wanted.length > 0 ? wanted : Object.keys(targets)) {
  const built = await targets[name]?.();
  console.log(`built ${built} in ${Math.round(performance.now() - started)} ms`);
}
