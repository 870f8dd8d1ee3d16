/**
 * The server as production runs it: `apps/server/dist` (tools/build-server.ts), built unless
 * current — the same check and lock `npm start` uses (tools/server-build.mjs), so test files
 * that build at once never build over each other — then run with `node apps/server/dist/main.js`
 * (startChildServer's `built`).
 */
import { ensureServerBuilt } from '../../../tools/server-build.mjs';

let built: Promise<void> | undefined;

export function buildServerOnce(): Promise<void> {
  built ??= ensureServerBuilt().then(() => undefined);
  return built;
}
