/**
 * `npm install @agentwarden/sdk` by name, as the READMEs say, end to end: a real npm registry
 * (Verdaccio, from the root devDependencies) on a loopback port with its storage in a temp dir
 * and no uplinks, so it serves only what is published to it and never reaches the internet;
 * `npm publish` of the SDK to it (its `prepack` builds dist/); then two empty projects, one ESM
 * (`"type": "module"`, `import`) and one CommonJS (`require`), install the package by name,
 * compile a sample with the repo's TypeScript (strict, NodeNext, lib checks on) and run it with
 * node against a real Warden.
 *
 * npm runs with a temp userconfig, globalconfig and cache, and without npm_config_* variables
 * from the environment, so nothing reads or writes ~/.npmrc or ~/.npm. Installs run no scripts.
 * The SDK is published from a copy of packages/sdk (all but dist and node_modules) beside a copy
 * of tsconfig.base.json, so its build does not race pack.test.ts's build of packages/sdk/dist.
 * Its runtime dependencies (@noble/post-quantum and what it needs) are published first, as this
 * checkout installed them, so that installing the SDK by name resolves them as npmjs.org would.
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { cpSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, type ExpectStatic, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../support/server.ts';

const execFileAsync = promisify(execFile);
const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const SDK = join(ROOT, 'packages/sdk');
const TSC = join(ROOT, 'node_modules/typescript/bin/tsc');
const VERDACCIO = join(ROOT, 'node_modules/verdaccio/bin/verdaccio');

/** The environment without npm_config_* (an `npm run`/`npx` parent sets some), so only the flags below configure npm. */
const env: NodeJS.ProcessEnv = Object.fromEntries(Object.entries(process.env).filter(([name]) => !/^npm_config_/i.test(name)));
const run = (file: string, args: string[], cwd: string) => execFileAsync(file, args, { cwd, env, timeout: 90_000, maxBuffer: 16 << 20 });

const timings: Record<string, number> = {};
async function step<T>(name: string, fn: () => Promise<T>): Promise<T> {
  const started = performance.now();
  try {
    return await fn();
  } finally {
    timings[name] = Math.round(performance.now() - started);
  }
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const address = probe.address();
      probe.close(() => (typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port'))));
    });
  });
}

let server: TestServer;
let work: string;
let verdaccio: ChildProcess | undefined;
let verdaccioOutput = '';
let registry: string;
let npmArgs: string[];
let published: { name: string; version: string; files: { path: string }[] };

/**
 * Spawns Verdaccio on a free loopback port. `ready()` answers its URL once GET /-/ping does
 * (within 60 s), or fails with Verdaccio's output.
 */
async function spawnRegistry(config: string): Promise<{ url: string; ready: () => Promise<string> }> {
  const port = await freePort();
  const url = `http://127.0.0.1:${port}/`;
  const child = spawn(process.execPath, [VERDACCIO, '--config', config, '--listen', `127.0.0.1:${port}`], {
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  verdaccio = child;
  child.stdout?.on('data', (chunk) => (verdaccioOutput += chunk));
  child.stderr?.on('data', (chunk) => (verdaccioOutput += chunk));
  const ready = async () => {
    const deadline = Date.now() + 60_000;
    while (Date.now() < deadline && child.exitCode === null && child.signalCode === null) {
      const ok = await fetch(`${url}-/ping`, { signal: AbortSignal.timeout(5_000) }).then(
        (res) => res.ok,
        () => false,
      );
      if (ok) return url;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    throw new Error(`Verdaccio did not answer on ${url} (exit ${child.exitCode ?? child.signalCode ?? 'none'}):\n${verdaccioOutput}`);
  };
  return { url, ready };
}

async function stopRegistry(): Promise<void> {
  const child = verdaccio;
  verdaccio = undefined;
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
  await exited;
  clearTimeout(timer);
}

beforeAll(async () => {
  work = mkdtempSync(join(tmpdir(), 'warden-sdk-registry-'));
  const config = join(work, 'verdaccio.yaml');
  // JSON is YAML. No `uplinks` and no `proxy`: a name not published here is a 404.
  writeFileSync(
    config,
    JSON.stringify({
      storage: join(work, 'storage'),
      auth: { htpasswd: { file: join(work, 'htpasswd'), max_users: -1 } },
      uplinks: {},
      packages: { '**': { access: '$all', publish: '$all', unpublish: '$all' } },
      web: { enable: false },
      middlewares: { audit: { enabled: false } },
      log: { type: 'stdout', format: 'pretty', level: 'warn' },
    }),
  );
  // Verdaccio boots in its own process while the server starts in this one (which keeps this
  // event loop busy, so the registry is polled only afterwards).
  const spawned = await spawnRegistry(config);
  server = await step('server', () => startTestServer());
  registry = await step('verdaccio', () => spawned.ready());

  // Verdaccio lets anyone publish, but npm will not publish without a token for the registry.
  const userconfig = join(work, 'user.npmrc');
  const globalconfig = join(work, 'global.npmrc');
  writeFileSync(userconfig, `//${new URL(registry).host}/:_authToken=anonymous\n`);
  writeFileSync(globalconfig, '');
  npmArgs = [
    `--registry=${registry}`,
    `--userconfig=${userconfig}`,
    `--globalconfig=${globalconfig}`,
    `--cache=${join(work, 'npm-cache')}`,
    '--no-audit',
    '--no-fund',
    '--no-update-notifier',
  ];

  // The SDK's files, as a clean checkout has them: packages/sdk without dist, next to the base tsconfig.
  const checkout = join(work, 'checkout');
  cpSync(SDK, join(checkout, 'packages/sdk'), {
    recursive: true,
    filter: (source) => !/[\\/](dist|node_modules)$/.test(source),
  });
  cpSync(join(ROOT, 'tsconfig.base.json'), join(checkout, 'tsconfig.base.json'));
  symlinkSync(join(ROOT, 'node_modules'), join(checkout, 'node_modules'), 'dir'); // for typescript
  const sdkManifest = JSON.parse(readFileSync(join(SDK, 'package.json'), 'utf8')) as { dependencies?: object };
  const dependencies = Object.keys(sdkManifest.dependencies ?? {}).flatMap((name) => installedTree(name));
  await step('publish dependencies', async () => {
    for (const name of new Set(dependencies)) await publishInstalled(name);
  });
  const publish = await step('build+publish', () => run('npm', ['publish', '--json', ...npmArgs], join(checkout, 'packages/sdk')));
  // npm 11 keys the report by package name; earlier versions answer the report itself.
  const report = JSON.parse(publish.stdout);
  published = report['@agentwarden/sdk'] ?? report;
}, 180_000);

/** A package as installed here and every runtime dependency under it, each once. */
function installedTree(name: string, seen = new Set<string>()): string[] {
  if (seen.has(name)) return [];
  seen.add(name);
  const manifest = JSON.parse(readFileSync(join(ROOT, 'node_modules', name, 'package.json'), 'utf8')) as { dependencies?: object };
  return [name, ...Object.keys(manifest.dependencies ?? {}).flatMap((dependency) => installedTree(dependency, seen))];
}

/** Publishes a copy of an installed package to the local registry (its scripts dropped: nothing is built or run). */
async function publishInstalled(name: string): Promise<void> {
  const copy = join(work, 'dependencies', name);
  cpSync(join(ROOT, 'node_modules', name), copy, { recursive: true, filter: (source) => !/[\\/]node_modules$/.test(source) });
  const manifest = JSON.parse(readFileSync(join(copy, 'package.json'), 'utf8'));
  delete manifest.scripts;
  writeFileSync(join(copy, 'package.json'), JSON.stringify(manifest));
  await run('npm', ['publish', '--ignore-scripts', ...npmArgs], copy);
}

afterAll(async () => {
  await stopRegistry();
  await server?.close();
  if (work) rmSync(work, { recursive: true, force: true });
  console.log(`sdk registry: timings (ms): ${JSON.stringify(timings)}`);
});

const strict = {
  strict: true,
  module: 'NodeNext',
  moduleResolution: 'NodeNext',
  target: 'ES2022',
  outDir: 'out',
  skipLibCheck: false,
  noUncheckedIndexedAccess: true,
  exactOptionalPropertyTypes: true,
  verbatimModuleSyntax: true,
};

/** An empty project that installs @agentwarden/sdk by name from the local registry, compiles sample.ts and runs it. */
async function consumer(expect: ExpectStatic, kind: 'esm' | 'cjs', sample: string) {
  const project = join(work, kind);
  mkdirSync(project);
  writeFileSync(
    join(project, 'package.json'),
    JSON.stringify({ name: `sdk-consumer-${kind}`, version: '1.0.0', private: true, type: kind === 'esm' ? 'module' : 'commonjs' }),
  );
  writeFileSync(join(project, 'tsconfig.json'), JSON.stringify({ compilerOptions: strict, include: ['sample.ts'] }));
  writeFileSync(join(project, 'sample.ts'), sample);

  await step(`${kind}: install`, () => run('npm', ['install', '@agentwarden/sdk', '--ignore-scripts', ...npmArgs], project));
  const installed = join(project, 'node_modules/@agentwarden/sdk');
  expect(lstatSync(installed).isSymbolicLink()).toBe(false);
  const lock = JSON.parse(readFileSync(join(project, 'package-lock.json'), 'utf8'));
  expect(lock.packages['node_modules/@agentwarden/sdk']).toMatchObject({
    version: published.version,
    resolved: `${registry}@agentwarden/sdk/-/sdk-${published.version}.tgz`,
  });
  expect(JSON.parse(readFileSync(join(project, 'package.json'), 'utf8')).dependencies).toEqual({
    '@agentwarden/sdk': `^${published.version}`,
  });

  const tsc = await step(`${kind}: tsc`, () => run(process.execPath, [TSC, '-p', '.'], project).catch((error) => error));
  expect(`${tsc.stdout}${tsc.stderr}`).toBe('');
  const emitted = readFileSync(join(project, 'out/sample.js'), 'utf8');
  const out = await step(`${kind}: node`, () => run(process.execPath, ['out/sample.js'], project));
  return { emitted, result: JSON.parse(out.stdout) };
}

const webhook = `verifyWebhook(
    '{"test": 2432232314}',
    {
      'webhook-id': 'msg_p5jXN8AQM9LWM0D4loKWxJek',
      'webhook-timestamp': '1614265330',
      'webhook-signature': 'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=',
    },
    'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
    { toleranceSeconds: Number.POSITIVE_INFINITY },
  )`;

describe('@agentwarden/sdk from an npm registry', () => {
  it('is published with ES modules, CommonJS and declarations for both, and nothing else', () => {
    expect(published).toMatchObject({ name: '@agentwarden/sdk' });
    const files = published.files.map((f) => f.path);
    for (const file of ['dist/esm/index.js', 'dist/esm/index.d.ts', 'dist/cjs/index.js', 'dist/cjs/index.d.ts', 'dist/cjs/package.json']) {
      expect(files).toContain(file);
    }
    expect(files.filter((f) => !f.startsWith('dist/') && f !== 'README.md' && f !== 'package.json')).toEqual([]);
  });

  it('serves only what was published (no uplink)', async () => {
    const res = await fetch(`${registry}left-pad`);
    expect(res.status).toBe(404);
  });

  // The two projects install, compile and run side by side.
  it.concurrent('installs by name into an ESM project that compiles (strict, NodeNext) and runs', { timeout: 90_000 }, async ({
    expect,
  }) => {
    const { emitted, result } = await consumer(
      expect,
      'esm',
      `import { createWarden, verifyCheckpoint, verifyWebhook, WardenError, type Agent, type WardenErrorCode } from '@agentwarden/sdk';

const warden = createWarden({ apiKey: ${JSON.stringify(server.key)}, baseUrl: ${JSON.stringify(server.url)} });
// @ts-expect-error: provider is required, so the types are the spec's, not any.
const invalid: Parameters<typeof warden.agents.create>[0] = { name: 'no provider' };
const agent: Agent = await warden.agents.create({ name: 'Registry ESM', provider: 'local' });
const page = await warden.agents.list({ limit: 100 });
let code: WardenErrorCode | undefined;
try {
  await warden.agents.get('no-such-agent');
} catch (error) {
  if (error instanceof WardenError) code = error.code;
}
const event = await ${webhook};
console.log(JSON.stringify({ slug: agent.slug, listed: page.data.some((a) => a.id === agent.id), code, event, verifyCheckpoint: typeof verifyCheckpoint, invalid: typeof invalid }));
`,
    );
    expect(emitted).toContain(`from '@agentwarden/sdk'`);
    expect(result).toEqual({
      slug: 'registry-esm',
      listed: true,
      code: 'not_found',
      event: { test: 2432232314 },
      verifyCheckpoint: 'function',
      invalid: 'object',
    });
  });

  it.concurrent('installs by name into a CommonJS project that compiles (strict, NodeNext) and runs', { timeout: 90_000 }, async ({
    expect,
  }) => {
    const { emitted, result } = await consumer(
      expect,
      'cjs',
      `import sdk = require('@agentwarden/sdk');

async function main(): Promise<void> {
  const warden = sdk.createWarden({ apiKey: ${JSON.stringify(server.key)}, baseUrl: ${JSON.stringify(server.url)} });
  // @ts-expect-error: provider is required, so the types are the spec's, not any.
  const invalid: Parameters<typeof warden.agents.create>[0] = { name: 'no provider' };
  const agent: sdk.Agent = await warden.agents.create({ name: 'Registry CJS', provider: 'local' });
  const page = await warden.agents.list({ limit: 100 });
  let code: sdk.WardenErrorCode | undefined;
  try {
    await warden.agents.get('no-such-agent');
  } catch (error) {
    if (error instanceof sdk.WardenError) code = error.code;
  }
  const { verifyWebhook } = sdk;
  const event = await ${webhook};
  console.log(JSON.stringify({ slug: agent.slug, listed: page.data.some((a) => a.id === agent.id), code, event, verifyCheckpoint: typeof sdk.verifyCheckpoint, invalid: typeof invalid }));
}

void main();
`,
    );
    expect(emitted).toContain(`require("@agentwarden/sdk")`);
    expect(emitted).not.toMatch(/^\s*(import|export)\s/m);
    expect(result).toEqual({
      slug: 'registry-cjs',
      listed: true,
      code: 'not_found',
      event: { test: 2432232314 },
      verifyCheckpoint: 'function',
      invalid: 'object',
    });
  });
});
