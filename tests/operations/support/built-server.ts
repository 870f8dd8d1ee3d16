/**
 * The server as production runs it: `npm run build`'s output (tools/build-server.ts), built once
 * per test process, then run with `node apps/server/dist/main.js` (startChildServer's `built`).
 */
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { ROOT } from '../../reliability/support/child-server.ts';

let built: Promise<void> | undefined;

export function buildServerOnce(): Promise<void> {
  built ??= promisify(execFile)(process.execPath, [join(ROOT, 'node_modules/tsx/dist/cli.mjs'), join(ROOT, 'tools/build-server.ts')], {
    cwd: ROOT,
    timeout: 120_000,
  }).then(() => undefined);
  return built;
}
