/**
 * `npm run warden -- …`: the CLI as built JavaScript, as `npm start` runs the server
 * (tools/start.mjs): built first, silently, when older than its sources, then loaded in this
 * process. Its output is the CLI's alone (scripts read it: `--json`), and it starts in a
 * second less CPU than through tsx.
 */
import './node-check.mjs';

const { ensureServerBuilt } = await import('./server-build.mjs');
await ensureServerBuilt();
await import('../apps/server/dist/cli/main.js');
