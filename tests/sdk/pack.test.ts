/**
 * What an integrator gets from npm: build the SDK, `npm pack` it, install the tarball into an
 * empty ESM project (with TypeScript from the registry), type-check a sample under strict
 * NodeNext, run the emitted JavaScript with node against a real server.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../support/server.ts';

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const SDK = join(ROOT, 'packages/sdk');
const TSC_VERSION = '5.9.3';

let server: TestServer;
let work: string;
beforeAll(async () => {
  server = await startTestServer();
  work = mkdtempSync(join(tmpdir(), 'warden-sdk-pack-'));
});
afterAll(async () => {
  await server?.close();
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
    expect(files).toContain('dist/index.js');
    expect(files).toContain('dist/index.d.ts');
    expect(files).toContain('README.md');
    expect(files.filter((f) => f.startsWith('src/') || (f.endsWith('.ts') && !f.endsWith('.d.ts')))).toEqual([]);

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
    expect(readdirSync(join(project, 'node_modules/@agentwarden/sdk/dist'))).toContain('index.js');

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
