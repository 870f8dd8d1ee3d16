/**
 * `npm run contract -- --target mock|local|URL [--port N] [--mock] [--key KEY] [--spec FILE] [--json] [--verbose]`:
 * the contract suite (tests/contract/support/contract-suite.ts) against
 * - `mock`: a Prism mock of spec/dist/openapi.json, started here (on `--port`, else a free port);
 * - `local`: a Warden server on a fresh embedded database in a temporary directory, started
 *   here (on `--port`, else a free port) with loopback HTTP and MCP upstreams (so executions
 *   also run allowed);
 * - a URL, taken exactly as given: a server already running (`http://host:8080/api/v1`), with
 *   `--key` (or WARDEN_CONTRACT_KEY), a key with every permission; or, with `--mock`, a mock
 *   someone else started (`npm run mock`: `http://127.0.0.1:4010`, no key).
 * Prints one line per operation of the spec, each problem under it; `--json` prints the report
 * as one JSON document instead. Exit 0: every operation passed; 1: an operation failed or has
 * no case; 2: usage error or the target could not be started.
 */
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { formatReport, runContractSuite } from '../tests/contract/support/contract-suite.ts';
import { SPEC_FILE, type StartedTarget, startLocalTarget, startMockTarget, urlTarget } from '../tests/contract/support/targets.ts';

const USAGE = `usage: npm run contract -- --target mock|local|URL [--port N] [--mock] [--key KEY] [--spec FILE] [--json] [--verbose]
  --target mock     a Prism mock of the spec (the spec's examples), started and stopped here
  --target local    a Warden server on a fresh embedded database, started and stopped here
  --port N          the port the mock or local target listens on (default: a free one)
  --target URL      a running server, exactly this URL, e.g. http://127.0.0.1:8080/api/v1, with --key
  --mock            the URL is a mock of the spec someone started (npm run mock: http://127.0.0.1:4010)
  --key KEY         an API key with every permission (or WARDEN_CONTRACT_KEY);
                    get one with: npm run warden -- keys create --workspace default --permissions '*'
  --spec FILE       the spec whose operations are checked (default spec/dist/openapi.json)
  --json            print the report as JSON
  --verbose         list every call, not only the failing ones`;

function usage(message: string): never {
  process.stderr.write(`contract: ${message}\n${USAGE}\n`);
  process.exit(2);
}

let values: {
  target?: string;
  port?: string;
  mock?: boolean;
  key?: string;
  spec?: string;
  json?: boolean;
  verbose?: boolean;
  help?: boolean;
};
try {
  ({ values } = parseArgs({
    args: process.argv.slice(2),
    options: {
      target: { type: 'string', short: 't' },
      port: { type: 'string', short: 'p' },
      mock: { type: 'boolean' },
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

const started = targetName === 'mock' || targetName === 'local';
const port = values.port === undefined ? undefined : Number(values.port);
if (values.port !== undefined && (!started || !/^\d+$/.test(values.port) || (port as number) > 65535))
  usage(started ? `--port must be a port number, got '${values.port}'` : '--port is for the mock and local targets: a URL names its own');
if (values.mock && started) usage('--mock is for a URL: --target mock starts one');

let target: StartedTarget;
try {
  if (targetName === 'mock') target = await startMockTarget(specFile, port);
  else if (targetName === 'local') target = await startLocalTarget(port);
  else if (/^https?:\/\//.test(targetName)) {
    const key = values.key ?? process.env.WARDEN_CONTRACT_KEY ?? (values.mock ? 'wk_contract_mock_key' : undefined);
    if (!key) usage(`--target ${targetName} needs --key KEY (a key with every permission), or --mock for a mock`);
    target = urlTarget(targetName, key, values.mock ? 'mock' : 'server');
    const health = await fetch(`${target.baseUrl}/health`, { signal: AbortSignal.timeout(10_000) }).catch((error: Error) => error);
    if (health instanceof Error) throw new Error(`no answer from ${target.baseUrl}/health: ${health.cause ?? health.message}`);
    if (health.status === 404)
      throw new Error(
        `${target.baseUrl}/health is 404: the URL is taken as given (Warden's API is at …/api/v1; a mock's at its root, with --mock)`,
      );
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
