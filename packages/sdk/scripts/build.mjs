/**
 * Builds the published package with tsc alone: ES modules in dist/esm (tsconfig.build.json) and
 * CommonJS in dist/cjs (tsconfig.build.cjs.json), each with its own declarations. dist/cjs gets a
 * package.json of its own, {"type":"commonjs"}, so that Node and TypeScript read its .js and .d.ts
 * files as CommonJS although this package is "type": "module".
 */
import { execFileSync } from 'node:child_process';
import { rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');

rmSync(new URL('../dist', import.meta.url), { recursive: true, force: true });
for (const project of ['tsconfig.build.json', 'tsconfig.build.cjs.json']) {
  execFileSync(process.execPath, [tsc, '-p', project], { cwd: root, stdio: 'inherit' });
}
writeFileSync(new URL('../dist/cjs/package.json', import.meta.url), `${JSON.stringify({ type: 'commonjs' })}\n`);
