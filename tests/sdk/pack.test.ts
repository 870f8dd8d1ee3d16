/**
 * What an integrator gets from npm: build the SDK (ES modules and CommonJS, see
 * packages/sdk/scripts/build.mjs), `npm pack` it, install the tarball into an empty ESM project
 * (with TypeScript from the registry), type-check a sample under strict NodeNext, run the emitted
 * JavaScript with node against a real server. registry.test.ts does the same through
 * `npm publish` to a local registry, for ESM and CommonJS projects.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useTestServer } from '../support/server.ts';

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const SDK = join(ROOT, 'packages/sdk');
/** An integrator's TypeScript older than the repo's 6.0 (registry.test.ts compiles with that): the declarations 6.0 emits must read under 5.9. */
const TSC_VERSION = '5.9.3';

const server = useTestServer();
let work: string;
beforeAll(() => {
  work = mkdtempSync(join(tmpdir(), 'warden-sdk-pack-'));
});
afterAll(() => {
  if (work) rmSync(work, { recursive: true, force: true });
});

const sample = (baseUrl: string, apiKey: string) => `
import { createWarden, verifyWebhook, WardenError, type Agent, type WardenErrorCode } from '@agentwarden/sdk';

const warden = createWarden({ apiKey: ${JSON.stringify(apiKey)}, baseUrl: ${JSON.stringify(baseUrl)} });
const health = await warden.health();
const status: 'ok' | 'degraded' = health.status;

// @ts-expect-error: provider is required, so the types are the spec's, not any.
const invalid: Parameters<typeof warden.agents.create>[0] = { name: 'no provider' };

let code: WardenErrorCode | undefined;
try {
  await warden.agents.get('no-such-agent');
} catch (error) {
  if (error instanceof WardenError) code = error.code;
}
const agent: Agent = await warden.agents.create({ name: 'Packed', provider: 'local' });

const event = await verifyWebhook(
  '{"test": 2432232314}',
  {
    'webhook-id': 'msg_p5jXN8AQM9LWM0D4loKWxJek',
    'webhook-timestamp': '1614265330',
    'webhook-signature': 'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=',
  },
  'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
  { toleranceSeconds: Number.POSITIVE_INFINITY },
);
console.log(JSON.stringify({ status, code, slug: agent.slug, event, invalid: typeof invalid }));
`;

describe('npm pack of @agentwarden/sdk', () => {
  it('installs into an empty project, type-checks a sample (strict, NodeNext) and runs it', { timeout: 180_000 }, async () => {
    const timings: Record<string, number> = {};
    const step = async <T>(name: string, fn: () => Promise<T>): Promise<T> => {
      const started = performance.now();
      try {
        return await fn();
      } finally {
        timings[name] = Math.round(performance.now() - started);
      }
    };

    // `prepack` builds dist/ first, as it does before `npm publish`.
    const packed = await step('build+pack', () => run('npm', ['pack', '--json', '--pack-destination', work], { cwd: SDK }));
    const [info] = JSON.parse(packed.stdout) as { filename: string; size: number; unpackedSize: number; files: { path: string }[] }[];
    if (!info) throw new Error('npm pack reported nothing');
    const files = info.files.map((f) => f.path);
    // ES modules and CommonJS, each with its declarations; dist/cjs/package.json marks the latter.
    for (const file of ['dist/esm/index.js', 'dist/esm/index.d.ts', 'dist/cjs/index.js', 'dist/cjs/index.d.ts', 'dist/cjs/package.json']) {
      expect(files).toContain(file);
    }
    // dist, the README and package.json: no sources, scripts or tsconfigs.
    expect(files.filter((f) => !f.startsWith('dist/') && f !== 'README.md' && f !== 'package.json')).toEqual([]);
    expect(files.filter((f) => f.endsWith('.ts') && !f.endsWith('.d.ts'))).toEqual([]);
    expect(files).toContain('README.md');

    const project = join(work, 'project');
    await run('mkdir', ['-p', project]);
    writeFileSync(join(project, 'package.json'), JSON.stringify({ name: 'sdk-consumer', private: true, type: 'module' }));
    writeFileSync(
      join(project, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          strict: true,
          module: 'NodeNext',
          moduleResolution: 'NodeNext',
          target: 'ES2022',
          outDir: 'out',
          skipLibCheck: false,
        },
        include: ['sample.ts'],
      }),
    );
    writeFileSync(join(project, 'sample.ts'), sample(server.url, server.key));
    await step('install', () =>
      run('npm', ['install', join(work, info.filename), `typescript@${TSC_VERSION}`, '--no-audit', '--no-fund', '--prefer-offline'], {
        cwd: project,
      }),
    );
    expect(readdirSync(join(project, 'node_modules/@agentwarden/sdk/dist')).sort()).toEqual(['cjs', 'esm']);

    const tsc = await step('tsc', () => run(join(project, 'node_modules/.bin/tsc'), ['-p', '.'], { cwd: project }).catch((error) => error));
    expect(`${tsc.stdout}${tsc.stderr}`).toBe('');
    const out = await step('node', () => run(process.execPath, ['out/sample.js'], { cwd: project }));
    expect(JSON.parse(out.stdout)).toEqual({
      status: 'ok',
      code: 'not_found',
      slug: 'packed',
      event: { test: 2432232314 },
      invalid: 'object',
    });
    console.log(`sdk pack: ${info.size} B packed, ${info.unpackedSize} B unpacked; timings (ms): ${JSON.stringify(timings)}`);
  });
});
