/**
 * The Node.js version check of the entry points that run the built server (tools/start.mjs,
 * tools/warden.mjs), before anything an older Node could fail inside: package.json's
 * `engines` is the one place the minimum is written; the line is the one the server and the
 * CLI print themselves (apps/server/src/node-version.ts).
 */
import { readFileSync } from 'node:fs';

const { engines } = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));
const [major, minor] = engines.node.replace(/^>=/, '').split('.').map(Number);
const [hasMajor, hasMinor] = process.versions.node.split('.').map(Number);
if (hasMajor < major || (hasMajor === major && hasMinor < minor)) {
  process.stderr.write(
    `warden: Node.js ${major}.${minor} or later (${major} LTS) is needed, this is Node.js ${process.versions.node} (see .nvmrc; tools/with-node24 runs a command with it)\n`,
  );
  process.exit(1);
}
