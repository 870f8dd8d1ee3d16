/**
 * `npm start`: the server as built JavaScript, built first when it is missing or older than its
 * sources (tools/server-build.mjs: under a second), then loaded in this same process, so that
 * npm's child is the server and signals reach it. No tsx, whatever NODE_ENV says.
 */
import { readFileSync } from 'node:fs';

// the version check comes first, before anything that an older Node could fail inside;
// package.json's `engines` is the one place the minimum is written
const { engines } = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));
const [major, minor] = engines.node.replace(/^>=/, '').split('.').map(Number);
const [hasMajor, hasMinor] = process.versions.node.split('.').map(Number);
if (hasMajor < major || (hasMajor === major && hasMinor < minor)) {
  process.stderr.write(
    `warden: Node.js ${major}.${minor} or later (${major} LTS) is needed, this is Node.js ${process.versions.node} (see .nvmrc; tools/with-node24 runs a command with it)\n`,
  );
  process.exit(1);
}

const { ensureServerBuilt } = await import('./server-build.mjs');
await ensureServerBuilt((line) => process.stderr.write(`warden: ${line}\n`));
await import('../apps/server/dist/main.js');
