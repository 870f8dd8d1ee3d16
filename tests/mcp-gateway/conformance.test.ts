/**
 * The official MCP conformance suite (`@modelcontextprotocol/conformance`, pinned) run for the
 * server scenarios each revision requires (`--requirements 2025-11-25`, `--requirements
 * 2026-07-28`), each twice at once: against the reference upstream (tests/support/conformance-upstream.ts,
 * built on the v2 SDK, answering both revisions) directly, and through Warden's
 * `/api/v1/mcp/{server}` in front of it, for an agent with no policy. Every scored check that
 * passes directly must pass through Warden.
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
let upstream: ConformanceUpstream;
let proxy: Server;

beforeAll(async () => {
  upstream = await startConformanceUpstream();
});
afterAll(async () => {
  proxy?.closeAllConnections();
  await new Promise<void>((resolve) => (proxy ? proxy.close(() => resolve()) : resolve()));
  await upstream?.close();
});

/** A loopback proxy to `target` that adds `Authorization: Bearer <key>` to each request. */
async function bearerProxy(target: string, key: string): Promise<string> {
  const to = new URL(target);
  proxy = createServer((req, res) => {
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
 * Checks that pass directly and not yet through Warden, each for a reason that is work still
 * open on issue 47 (docs/decisions/0030-mcp-both-revisions.md). Anything else lost fails.
 */
const KNOWN_GAPS: Record<string, string> = {
  // Warden's upstream sessions speak the stateful revisions: a 2026-07-28 upstream's questions
  // reach Warden as requests without the keys it named, and inputResponses sent on a first
  // call do not reach it (modern upstream sessions would carry both)
  'input-required-result-basic-elicitation/sep-2322-elicitation-incomplete': 'keys named by the upstream',
  'input-required-result-basic-elicitation/sep-2322-elicitation-complete': 'keys named by the upstream',
  'input-required-result-ignore-extra-params/sep-2322-ignore-unexpected-params': 'inputResponses on a first call',
  // the upstream session declares what the client declared, so a legacy-era upstream answers a
  // question it may not ask as a tool error, where a 2026-07-28 upstream answers -32021
  'server-stateless/sep-2575-server-rejects-undeclared-capability': 'the upstream era answers a missing capability',
  'server-stateless/sep-2575-missing-capability-http-400': 'the upstream era answers a missing capability',
  // a legacy client's POST stream is not resumable through Warden (no priming event, no retry)
  'server-sse-polling/server-sse-priming-event': 'POST stream resumability',
  'server-sse-polling/server-sse-retry-field': 'POST stream resumability',
  'server-sse-polling/server-sse-disconnect-resume': 'POST stream resumability',
};

let viaWarden: string;
beforeAll(async () => {
  const agentKey = `ak_conformance_${Math.random().toString(36).slice(2)}`;
  expect(
    (await server.api('POST', '/mcp-servers', { body: { name: 'Conformance', slug: 'conformance', transport_url: upstream.url } })).status,
  ).toBe(201);
  expect(
    (await server.api('POST', '/agents', { body: { name: 'Conformance', slug: 'conformance', provider: 'local', api_key: agentKey } }))
      .status,
  ).toBe(201);
  viaWarden = await bearerProxy(`${server.url}/mcp/conformance`, agentKey);
});

/** The scenarios of extensions (`conformance list --server` tags them so): run by `--requirements`, scored by none. */
function extensionScenarios(): Set<string> {
  const listed = execFileSync(process.execPath, [CLI, 'list', '--server'], { encoding: 'utf8' });
  return new Set([...listed.matchAll(/^\s*- (\S+) \[extension\]$/gm)].map((m) => m[1] as string));
}

it.each(['2025-11-25', '2026-07-28'])(
  'passes through Warden every scored check of revision %s the upstream passes directly',
  { timeout: RUN_TIMEOUT_MS + 30_000 },
  async (revision) => {
    const unscored = extensionScenarios();
    const scored = (checks: Map<string, { status: Status; error?: string }>) =>
      new Map([...checks].filter(([id]) => !unscored.has(id.slice(0, id.indexOf('/')))));
    const [direct, warden] = (await Promise.all([runSuite(upstream.url, revision), runSuite(viaWarden, revision)])).map(scored) as [
      Map<string, { status: Status; error?: string }>,
      Map<string, { status: Status; error?: string }>,
    ];
    const directPassed = passed(direct);
    const wardenPassed = new Set(passed(warden));
    console.log(
      `MCP conformance ${revision} (scored server checks): directly ${directPassed.length} of ${counted(direct)} pass, ` +
        `through Warden ${wardenPassed.size} of ${counted(warden)}`,
    );
    const lost = directPassed.filter((id) => !wardenPassed.has(id));
    for (const id of lost)
      console.log(`  only directly: ${id} (${warden.get(id)?.status ?? 'missing'}: ${warden.get(id)?.error ?? KNOWN_GAPS[id] ?? ''})`);
    expect(directPassed.length).toBeGreaterThan(60);
    expect(lost.filter((id) => !(id in KNOWN_GAPS))).toEqual([]);
  },
);
