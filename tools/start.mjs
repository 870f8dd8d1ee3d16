/**
 * `npm start`: the server as built JavaScript, built first when it is missing or older than its
 * sources (tools/server-build.mjs: under a second), then loaded in this same process, so that
 * npm's child is the server and signals reach it. No tsx, whatever NODE_ENV says.
 */
import './node-check.mjs';

const { ensureServerBuilt } = await import('./server-build.mjs');
await ensureServerBuilt((line) => process.stderr.write(`warden: ${line}\n`));
await import('../apps/server/dist/main.js');
