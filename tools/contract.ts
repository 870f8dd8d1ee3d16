/**
 * `npm run contract -- --target mock|local|URL [--key KEY] [--spec FILE] [--json] [--verbose]`:
 * the contract suite (tests/contract/support/contract-suite.ts) against
 * - `mock`: a Prism mock of spec/dist/openapi.json, started here;
 * - `local`: a Warden server on a fresh embedded database in a temporary directory, started
 *   here with loopback HTTP and MCP upstreams (so executions also run allowed);
 * - a URL: a server already running (`http://host:8080/api/v1`; a URL without a path gets
 *   `/api/v1`), with `--key` (or WARDEN_CONTRACT_KEY): a key with every permission.
 * Prints one line per operation of the spec, each problem under it; `--json` prints the report
 * as one JSON document instead. Exit 0: every operation passed; 1: an operation failed or has
 * no case; 2: usage error or the target could not be started.
 */
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { formatReport, runContractSuite } from '../tests/contract/support/contract-suite.ts';
import { SPEC_FILE, type StartedTarget, startLocalTarget, startMockTarget, urlTarget } from '../tests/contract/support/targets.ts';

const USAGE = `usage: npm run contract -- --target mock|local|URL [--key KEY] [--spec FILE] [--json] [--verbose]
  --target mock     a Prism mock of the spec (the spec's examples)
  --target local    a Warden server on a fresh embedded database, started and stopped here
  --target URL      a running server, e.g. http://127.0.0.1:8080/api/v1, with --key
  --key KEY         an API key with every permission (or WARDEN_CONTRACT_KEY);
                    get one with: npm run warden -- keys create --workspace default --permissions '*'
  --spec FILE       the spec whose operations are checked (default spec/dist/openapi.json)
  --json            print the report as JSON
  --verbose         list every call, not only the failing ones`;

function usage(message: string): never {
  process.stderr.write(`contract: ${message}\n${USAGE}\n`);
  process.exit(2);
}

let values: { target?: string; key?: string; spec?: string; json?: boolean; verbose?: boolean; help?: boolean };
try {
  ({ values } = parseArgs({
    args: process.argv.slice(2),
    options: {
      target: { type: 'string', short: 't' },
      key: { type: 'string', short: 'k' },
      spec: { type: 'string' },
      json: { type: 'boolean' },
      verbose: { type: 'boolean', short: 'v' },
      help: { type: 'boolean', short: 'h' },
    },
  }));
} catch (error) {
  usage((error as Error).message);
}
if (values.help) {
  process.stdout.write(`${USAGE}\n`);
  process.exit(0);
}
const targetName = values.target;
if (!targetName) usage('--target is required');
const specFile = values.spec ?? SPEC_FILE;
let spec: unknown;
try {
  spec = JSON.parse(readFileSync(specFile, 'utf8'));
} catch (error) {
  usage(`cannot read the spec ${specFile}: ${(error as Error).message}`);
}

let target: StartedTarget;
try {
  if (targetName === 'mock') target = await startMockTarget(specFile);
  else if (targetName === 'local') target = await startLocalTarget();
  else if (/^https?:\/\//.test(targetName)) {
    const key = values.key ?? process.env.WARDEN_CONTRACT_KEY;
    if (!key) usage(`--target ${targetName} needs --key KEY (a key with every permission)`);
    target = urlTarget(targetName, key);
    const health = await fetch(`${target.baseUrl}/health`, { signal: AbortSignal.timeout(10_000) }).catch((error: Error) => error);
    if (health instanceof Error) throw new Error(`no answer from ${target.baseUrl}/health: ${health.cause ?? health.message}`);
  } else usage(`--target must be mock, local or an http(s) URL, got '${targetName}'`);
} catch (error) {
  process.stderr.write(`contract: could not start the target ${targetName}: ${(error as Error).message}\n`);
  process.exit(2);
}

let stopping = false;
const stop = async (code: number) => {
  if (stopping) return;
  stopping = true;
  await target.close().catch((error: Error) => process.stderr.write(`contract: stopping the target: ${error.message}\n`));
  process.exit(code);
};
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, () => void stop(130));

if (!values.json) process.stderr.write(`contract: running against ${target.name}\n`);
const report = await runContractSuite(spec, target, {
  onScenario: values.json ? undefined : (name, failed) => process.stderr.write(`  ${failed ? 'stopped' : 'done'}: ${name}\n`),
});
process.stdout.write(`${values.json ? JSON.stringify(report) : formatReport(report, { verbose: values.verbose === true })}\n`);
await stop(report.passed ? 0 : 1);
