/**
 * The official MCP conformance suite (`@modelcontextprotocol/conformance`, pinned) run for the
 * server scenarios each revision requires (`--requirements 2025-11-25`, `--requirements
 * 2026-07-28`): against the reference upstream (tests/support/conformance-upstream.ts, built on
 * the v2 SDK, answering both revisions) directly, and through Warden's `/api/v1/mcp/{server}`
 * for an agent with no policy, in front of that upstream (Warden speaks 2026-07-28 to it) and
 * in front of the same upstream serving only the stateful revisions (Warden speaks 2025-11-25
 * to it): every client era over every upstream era. Every scored check that passes directly
 * must pass through Warden, but for the known gaps named below.
 *
 * The suite's CLI takes a URL and sends no credentials, so Warden is reached through a
 * loopback proxy that adds the agent's key as the bearer and passes everything else (Host and
 * Origin included) as it came.
 */
import { execFileSync, spawn } from 'node:child_process';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { createServer, request as httpRequest, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { type ConformanceUpstream, startConformanceUpstream } from '../support/conformance-upstream.ts';
import { useTestServer } from '../support/server.ts';

const CLI = new URL('../../node_modules/@modelcontextprotocol/conformance/dist/index.js', import.meta.url).pathname;
/** How long one run of the suite may take (about 20 s each on a quiet machine). */
const RUN_TIMEOUT_MS = 150_000;
const server = useTestServer({ egressAllowlist: ['127.0.0.1/32'] });
/** The reference upstream in each of its shapes: both eras, and only the stateful ones. */
const upstreams: Partial<Record<UpstreamEra, ConformanceUpstream>> = {};
const proxies: Server[] = [];
type UpstreamEra = 'modern' | 'legacy';

beforeAll(async () => {
  upstreams.modern = await startConformanceUpstream();
  upstreams.legacy = await startConformanceUpstream({ modern: false });
});
afterAll(async () => {
  for (const proxy of proxies) {
    proxy.closeAllConnections();
    await new Promise<void>((resolve) => proxy.close(() => resolve()));
  }
  for (const upstream of Object.values(upstreams)) await upstream?.close();
});

/** A loopback proxy to `target` that adds `Authorization: Bearer <key>` to each request. */
async function bearerProxy(target: string, key: string): Promise<string> {
  const to = new URL(target);
  const proxy = createServer((req, res) => {
    const forwarded = httpRequest(
      {
        host: to.hostname,
        port: to.port,
        method: req.method,
        path: to.pathname,
        headers: { ...req.headers, authorization: `Bearer ${key}` },
      },
      (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      },
    );
    forwarded.on('error', () => res.destroy());
    req.pipe(forwarded);
  });
  proxies.push(proxy);
  await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(proxy.address() as AddressInfo).port}/mcp`;
}

type Status = 'SUCCESS' | 'FAILURE' | 'WARNING' | 'INFO' | 'SKIPPED';

/** Runs the server scenarios `revision` requires against `url`: each check's status by `scenario/check id`. */
async function runSuite(url: string, revision: string): Promise<Map<string, { status: Status; error?: string }>> {
  const out = await mkdtemp(join(tmpdir(), 'warden-conformance-'));
  try {
    const child = spawn(process.execPath, [CLI, 'server', '--url', url, '--requirements', revision, '--output-dir', out], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    child.stderr?.on('data', (chunk: Buffer) => {
      stderr += chunk.toString('utf8');
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), RUN_TIMEOUT_MS);
    // exit 1 only says that a check failed: the checks say which
    const code = await new Promise<number | null>((resolve) => child.once('exit', (exit) => resolve(exit)));
    clearTimeout(timer);
    if (code !== 0 && code !== 1) throw new Error(`the conformance suite ended with ${code}: ${stderr}`);
    const checks = new Map<string, { status: Status; error?: string }>();
    for (const dir of await readdir(out)) {
      const scenario = /^server-(.+)-\d{4}-\d{2}-\d{2}T[\d-]+Z$/.exec(dir)?.[1];
      if (!scenario) continue;
      const list = JSON.parse(await readFile(join(out, dir, 'checks.json'), 'utf8')) as {
        id: string;
        status: Status;
        errorMessage?: string;
      }[];
      for (const check of list) checks.set(`${scenario}/${check.id}`, { status: check.status, error: check.errorMessage });
    }
    return checks;
  } finally {
    await rm(out, { recursive: true, force: true });
  }
}

const passed = (checks: Map<string, { status: Status }>) => [...checks].filter(([, c]) => c.status === 'SUCCESS').map(([id]) => id);
const counted = (checks: Map<string, { status: Status }>) =>
  [...checks.values()].filter((c) => c.status === 'SUCCESS' || c.status === 'FAILURE').length;

/**
 * Checks that pass directly and not through Warden, by the upstream era they are lost on, each
 * for a reason that is a decision or work still open on issue 47
 * (docs/decisions/0030-mcp-both-revisions.md). Anything else lost fails.
 */
const KNOWN_GAPS: Record<UpstreamEra, Record<string, string>> = {
  modern: {
    // Warden passes an upstream's polling on to its client (polled-streams.ts); a 2026-07-28
    // upstream has no stream to close, so there is nothing to pass on
    'server-sse-polling/server-sse-priming-event': 'polling is passed on, not started',
    'server-sse-polling/server-sse-retry-field': 'polling is passed on, not started',
    'server-sse-polling/server-sse-disconnect-resume': 'polling is passed on, not started',
  },
  legacy: {
    // a 2025-11-25 upstream asks by requests, not input_required rounds: Warden names the questions
    'input-required-result-basic-elicitation/sep-2322-elicitation-incomplete': 'keys named by the upstream',
    'input-required-result-basic-elicitation/sep-2322-elicitation-complete': 'keys named by the upstream',
    // the upstream session declares what the client declared, so a 2025-11-25 upstream answers a
    // question it may not ask as a tool error, where a 2026-07-28 upstream answers -32021
    'server-stateless/sep-2575-server-rejects-undeclared-capability': 'the upstream era answers a missing capability',
    'server-stateless/sep-2575-missing-capability-http-400': 'the upstream era answers a missing capability',
  },
};
/** Lost on either upstream era, by decision: answers nobody asked are not relayed (record 0030). */
const NOT_RELAYED = { 'input-required-result-ignore-extra-params/sep-2322-ignore-unexpected-params': 'inputResponses on a first call' };

/** Warden's endpoint for each upstream era (through a proxy adding the agent's key). */
const viaWarden: Partial<Record<UpstreamEra, string>> = {};
beforeAll(async () => {
  const agentKey = `ak_conformance_${Math.random().toString(36).slice(2)}`;
  expect(
    (await server.api('POST', '/agents', { body: { name: 'Conformance', slug: 'conformance', provider: 'local', api_key: agentKey } }))
      .status,
  ).toBe(201);
  for (const era of ['modern', 'legacy'] as const) {
    const slug = `conformance-${era}`;
    const registered = await server.api('POST', '/mcp-servers', {
      body: { name: `Conformance (${era})`, slug, transport_url: upstreams[era]?.url as string },
    });
    expect(registered.status).toBe(201);
    viaWarden[era] = await bearerProxy(`${server.url}/mcp/${slug}`, agentKey);
  }
});

/** The scenarios of extensions (`conformance list --server` tags them so): run by `--requirements`, scored by none. */
function extensionScenarios(): Set<string> {
  const listed = execFileSync(process.execPath, [CLI, 'list', '--server'], { encoding: 'utf8' });
  return new Set([...listed.matchAll(/^\s*- (\S+) \[extension\]$/gm)].map((m) => m[1] as string));
}

type Checks = Map<string, { status: Status; error?: string }>;
/** The upstream's own results per revision, run once (beside the first run through Warden). */
const directRuns = new Map<string, Promise<Checks>>();

it.each([
  ['2025-11-25', 'modern'],
  ['2026-07-28', 'modern'],
  ['2025-11-25', 'legacy'],
  ['2026-07-28', 'legacy'],
] as const)(
  'passes through Warden every scored check of revision %s the upstream passes directly, Warden speaking to it as %s',
  { timeout: 2 * RUN_TIMEOUT_MS + 30_000 },
  async (revision, era) => {
    const unscored = extensionScenarios();
    const scored = (checks: Checks): Checks => new Map([...checks].filter(([id]) => !unscored.has(id.slice(0, id.indexOf('/')))));
    if (!directRuns.has(revision)) directRuns.set(revision, runSuite(upstreams.modern?.url as string, revision));
    const [direct, warden] = (
      await Promise.all([directRuns.get(revision) as Promise<Checks>, runSuite(viaWarden[era] as string, revision)])
    ).map(scored) as [Checks, Checks];
    const gaps: Record<string, string> = { ...KNOWN_GAPS[era], ...NOT_RELAYED };
    const directPassed = passed(direct);
    const wardenPassed = new Set(passed(warden));
    console.log(
      `MCP conformance ${revision} (scored server checks), Warden speaking ${era} to the upstream: directly ${directPassed.length} of ` +
        `${counted(direct)} pass, through Warden ${wardenPassed.size} of ${counted(warden)}`,
    );
    const lost = directPassed.filter((id) => !wardenPassed.has(id));
    for (const id of lost)
      console.log(`  only directly: ${id} (${warden.get(id)?.status ?? 'missing'}: ${warden.get(id)?.error ?? gaps[id] ?? ''})`);
    expect(directPassed.length).toBeGreaterThan(60);
    expect(lost.filter((id) => !(id in gaps))).toEqual([]);
  },
);
