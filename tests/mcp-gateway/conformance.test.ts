/**
 * The official MCP conformance suite (`@modelcontextprotocol/conformance`, its active server
 * scenarios) run twice at once: against the reference upstream (tests/support/conformance-server.ts)
 * directly, and through Warden's `/api/v1/mcp/{server}` in front of it, for an agent with no
 * policy. Every check that passes directly must pass through Warden.
 *
 * The suite's CLI takes a URL and sends no credentials, so Warden is reached through a
 * loopback proxy that adds the agent's key as the bearer and passes everything else (Host and
 * Origin included) as it came.
 */
import { spawn } from 'node:child_process';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { createServer, request as httpRequest, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { type ConformanceUpstream, startConformanceUpstream } from '../support/conformance-server.ts';
import { useTestServer } from '../support/server.ts';

const CLI = new URL('../../node_modules/@modelcontextprotocol/conformance/dist/index.js', import.meta.url).pathname;
/** How long one run of the suite may take (about 10 s each on a quiet machine). */
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

/** Runs the active server scenarios against `url`: each check's status by `scenario/check id`. */
async function runSuite(url: string): Promise<Map<string, { status: Status; error?: string }>> {
  const out = await mkdtemp(join(tmpdir(), 'warden-conformance-'));
  try {
    const child = spawn(process.execPath, [CLI, 'server', '--url', url, '--output-dir', out], { stdio: ['ignore', 'ignore', 'pipe'] });
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

it('passes through Warden every check the upstream passes directly', { timeout: RUN_TIMEOUT_MS + 30_000 }, async () => {
  const agentKey = `ak_conformance_${Math.random().toString(36).slice(2)}`;
  expect(
    (await server.api('POST', '/mcp-servers', { body: { name: 'Conformance', slug: 'conformance', transport_url: upstream.url } })).status,
  ).toBe(201);
  expect(
    (await server.api('POST', '/agents', { body: { name: 'Conformance', slug: 'conformance', provider: 'local', api_key: agentKey } }))
      .status,
  ).toBe(201);
  const viaWarden = await bearerProxy(`${server.url}/mcp/conformance`, agentKey);

  const [direct, warden] = await Promise.all([runSuite(upstream.url), runSuite(viaWarden)]);
  const directPassed = passed(direct);
  const wardenPassed = new Set(passed(warden));
  console.log(
    `MCP conformance (server scenarios): directly ${directPassed.length} of ${counted(direct)} checks pass, ` +
      `through Warden ${wardenPassed.size} of ${counted(warden)}`,
  );
  const lost = directPassed.filter((id) => !wardenPassed.has(id));
  for (const id of lost) console.log(`  only directly: ${id} (${warden.get(id)?.status ?? 'missing'}: ${warden.get(id)?.error ?? ''})`);
  expect(directPassed.length).toBeGreaterThan(30);
  expect(lost).toEqual([]);
});
