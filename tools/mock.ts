/**
 * `npm run mock`: a Prism mock server of the bundled spec (spec/dist/openapi.json).
 *
 * - Listens on 127.0.0.1, port 4010; `MOCK_PORT` overrides the port, `MOCK_HOST` the address.
 * - Static mode by default: answers with the examples written in the spec (no generated data),
 *   so the mock is deterministic: a response's first named example, another with
 *   `Prefer: example=<name>`. Extra arguments go to Prism: `npm run mock -- --errors`.
 * - Dynamic mode, `npm run mock -- --dynamic`: answers data generated from the schemas (random
 *   values that satisfy types, formats, patterns and limits), different on every call; one
 *   request asks for it with `Prefer: dynamic=true` in static mode too.
 * - Prism ignores the servers' base path: mock paths start at the operation path
 *   (`http://127.0.0.1:4010/agents`, not `/api/v1/agents`).
 * - Choose a response with Prism's `Prefer` header: `Prefer: code=404` or `Prefer: example=name`.
 *
 * SIGINT, SIGTERM and SIGHUP are passed on to Prism; this process exits with Prism's code.
 */
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { constants } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const spec = join(root, 'spec/dist/openapi.json');
const prism = join(root, 'node_modules/.bin/prism');
const { MOCK_HOST, MOCK_PORT, npm_lifecycle_event } = process.env;
const host = MOCK_HOST || '127.0.0.1';
const port = MOCK_PORT || '4010';

if (!/^\d+$/.test(port) || Number(port) > 65535) {
  console.error(`mock: MOCK_PORT must be a port number, got '${port}'`);
  process.exit(2);
}
if (!existsSync(spec)) {
  console.error(`mock: ${spec} is missing: run \`npm run generate\` first`);
  process.exit(2);
}
if (!existsSync(prism)) {
  console.error(`mock: ${prism} is missing: run \`npm ci\` first`);
  process.exit(2);
}

const extra = process.argv.slice(2);
// Static unless the caller asks for dynamic mode (`--dynamic`, `-d`, `--dynamic=true`).
const dynamic = extra.some((arg) => /^(--dynamic|-d)(=.*)?$/.test(arg));
const args = ['mock', spec, '--host', host, '--port', port, ...(dynamic ? [] : ['--dynamic', 'false']), ...extra];
const child = spawn(prism, args, { stdio: 'inherit' });

const SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;
for (const signal of SIGNALS) {
  process.on(signal, () => {
    if (child.exitCode === null && child.signalCode === null) child.kill(signal);
  });
}

// `npm run mock` runs `sh -c 'tsx tools/mock.ts'`: a SIGTERM sent to npm alone ends npm and
// that shell without reaching tsx. So under npm, when the shell that started tsx is gone
// (tsx was re-parented), stop Prism too rather than leave it listening. Linux only (/proc).
function parentOf(pid: number): number | undefined {
  try {
    return Number(
      readFileSync(`/proc/${pid}/stat`, 'utf8')
        .replace(/^.*\) /s, '')
        .split(' ')[1],
    );
  } catch {
    return undefined;
  }
}
const launcher = npm_lifecycle_event ? parentOf(process.ppid) : undefined;
if (launcher !== undefined) {
  setInterval(() => {
    const now = parentOf(process.ppid);
    if (now !== undefined && now !== launcher && child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
  }, 1000).unref();
}

child.on('error', (error) => {
  console.error(`mock: could not start Prism: ${error.message}`);
  process.exit(1);
});
child.on('exit', (code, signal) => {
  // A Prism stopped by a signal exits the way shells report it: 128 + the signal's number.
  process.exit(code ?? (signal ? 128 + constants.signals[signal] : 1));
});
