/**
 * Upstreams that hang or reset, behind governed execution (Warden started with the egress
 * allowlist 127.0.0.1/32 so it may reach them):
 * - POST /runtime/execute (http_proxy, timeout_ms 500) to a hanging upstream → 502
 *   execution_failed within the timeout + 1 s; to a resetting one → 502 at once;
 * - POST /runtime/mcp/call to a registered MCP server that hangs → 502 call_failed within
 *   the MCP request timeout (15 s, measured), and to one that resets → 502 at once;
 * - nothing leaks: after 300 such requests (a warm-up round of 50 first) the upstreams see ~0
 *   open connections from Warden (after a short settle) and no new connection afterwards (no
 *   retry or reconnection in the background), and the heap (same process: startTestServer
 *   runs in-process) grows by less than 2 MiB between the reading after the warm-up and the
 *   one after the last round (GC forced before each reading).
 */
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useTestServer } from '../support/server.ts';
import { type FaultyUpstream, startHangingUpstream, startResettingUpstream } from './support/faulty-upstreams.ts';

const TIMEOUT_MS = 500;
const MCP_TIMEOUT_MS = 15_000;
const ROUNDS = Number(process.env.UPSTREAM_ROUNDS ?? 6);
const PER_ROUND = 50;
const CONCURRENCY = 10;
/**
 * Allowed heap growth across ROUNDS × PER_ROUND failing requests, after GC: the audit rows of
 * the in-process embedded database and caches cost ~1–2 KB a request; a leak of the objects of
 * a failed upstream call (tens of KB each) goes far past it.
 */
const HEAP_MARGIN_BYTES = 2 * 1024 * 1024;
/** How long the upstreams must then stay quiet (no reconnection in the background). */
const QUIET_MS = 8_000;

setFlagsFromString('--expose-gc');
const gc: () => void = (globalThis as { gc?: () => void }).gc ?? runInNewContext('gc');

const server = useTestServer({ egressAllowlist: ['127.0.0.1/32'], rateLimitPerMinute: 10_000_000 });
let hanging: FaultyUpstream;
let resetting: FaultyUpstream;
let mcpHanging: FaultyUpstream;
let mcpResetting: FaultyUpstream;

const execute = (url: string, timeout_ms = TIMEOUT_MS) =>
  server.api('POST', '/runtime/execute', {
    body: {
      input: { action: 'http.get', agent: 'fault-bot', resource: url },
      execution: { mode: 'http_proxy', method: 'GET', url, timeout_ms },
    },
  });
const mcpCall = (slug: string) =>
  server.api('POST', '/runtime/mcp/call', {
    body: { server: slug, tool: 'echo', arguments: { text: 'hi' }, input: { agent: 'fault-bot' } },
  });

async function timed<T>(work: () => Promise<T>): Promise<{ value: T; ms: number }> {
  const t0 = performance.now();
  const value = await work();
  return { value, ms: performance.now() - t0 };
}

async function settle(upstreams: FaultyUpstream[], boundMs = 5_000): Promise<number> {
  const deadline = Date.now() + boundMs;
  await new Promise((r) => setTimeout(r, 500));
  while (Date.now() < deadline && upstreams.some((u) => u.open() > 0)) await new Promise((r) => setTimeout(r, 100));
  return upstreams.reduce((n, u) => n + u.open(), 0);
}

function heapAfterGc(): number {
  gc();
  gc();
  return process.memoryUsage().heapUsed;
}

beforeAll(async () => {
  [hanging, resetting, mcpHanging, mcpResetting] = await Promise.all([
    startHangingUpstream(),
    startResettingUpstream(),
    startHangingUpstream('/mcp'),
    startResettingUpstream('/mcp'),
  ]);
  expect((await server.api('POST', '/agents', { body: { name: 'Fault Bot', provider: 'local', slug: 'fault-bot' } })).status).toBe(201);
  for (const [slug, upstream, transport] of [
    ['hang-mcp', mcpHanging, 'streamable_http'],
    ['hang-mcp-auto', mcpHanging, 'auto'],
    ['reset-mcp', mcpResetting, 'auto'],
  ] as const) {
    const res = await server.api('POST', '/mcp-servers', { body: { name: slug, slug, transport_url: upstream.url, transport } });
    expect(res.status).toBe(201);
  }
});

afterAll(async () => {
  await Promise.all([hanging, resetting, mcpHanging, mcpResetting].map((u) => u?.close()));
});

describe('POST /runtime/execute (http_proxy) to a faulty upstream', () => {
  it('answers 502 execution_failed within timeout_ms + 1 s when the upstream hangs', async () => {
    const { value: res, ms } = await timed(() => execute(hanging.url));
    console.log(`[upstream] hanging http: ${res.status} ${res.body?.error?.code} in ${Math.round(ms)} ms (timeout_ms ${TIMEOUT_MS})`);
    expect(res.status).toBe(502);
    expect(res.body.error.code).toBe('execution_failed');
    expect(ms).toBeGreaterThanOrEqual(TIMEOUT_MS - 50);
    expect(ms).toBeLessThan(TIMEOUT_MS + 1_000);
  });

  it('answers 502 execution_failed at once when the upstream resets the connection', async () => {
    const { value: res, ms } = await timed(() => execute(resetting.url));
    console.log(`[upstream] resetting http: ${res.status} ${res.body?.error?.code} in ${Math.round(ms)} ms`);
    expect(res.status).toBe(502);
    expect(res.body.error.code).toBe('execution_failed');
    expect(ms).toBeLessThan(TIMEOUT_MS + 1_000);
  });
});

describe('POST /runtime/mcp/call to a faulty registered MCP server', () => {
  it(`answers 502 call_failed within the MCP request timeout (${MCP_TIMEOUT_MS / 1000} s) + 2 s when a streamable_http server hangs`, async () => {
    const { value: res, ms } = await timed(() => mcpCall('hang-mcp'));
    console.log(`[upstream] hanging mcp (streamable_http): ${res.status} ${res.body?.error?.code} in ${Math.round(ms)} ms`);
    expect(res.status).toBe(502);
    expect(res.body.error.code).toBe('call_failed');
    expect(ms).toBeLessThan(MCP_TIMEOUT_MS + 2_000);
  }, 60_000);

  it('answers 502 call_failed within the MCP request timeout + 2 s when an `auto` server hangs (the SSE fallback must not double the wait)', async () => {
    const bound = MCP_TIMEOUT_MS * 2 + 10_000;
    const { value: res, ms } = await timed(() =>
      Promise.race([mcpCall('hang-mcp-auto'), new Promise<undefined>((r) => setTimeout(() => r(undefined), bound))]),
    );
    console.log(
      `[upstream] hanging mcp (auto: Streamable HTTP, then SSE fallback): ${res ? `${res.status} ${res.body?.error?.code}` : 'no answer'} in ${Math.round(ms)} ms`,
    );
    expect(res, `no answer within ${bound / 1000} s`).toBeDefined();
    expect(res?.status).toBe(502);
    expect(res?.body.error.code).toBe('call_failed');
    expect(ms).toBeLessThan(MCP_TIMEOUT_MS + 2_000);
  }, 60_000);

  it('answers 502 call_failed at once when the MCP server resets the connection', async () => {
    const { value: res, ms } = await timed(() => mcpCall('reset-mcp'));
    console.log(`[upstream] resetting mcp: ${res.status} ${res.body?.error?.code} in ${Math.round(ms)} ms`);
    expect(res.status).toBe(502);
    expect(res.body.error.code).toBe('call_failed');
    expect(ms).toBeLessThan(5_000);
  });
});

describe(`after ${ROUNDS * PER_ROUND} failing upstream requests`, () => {
  const readings: number[] = [];
  let openAfter = -1;
  let statuses: Record<string, number> = {};
  let lateConnections: Record<string, number> = {};

  beforeAll(async () => {
    const jobs = (n: number) =>
      Array.from(
        { length: n },
        (_v, i) => () => (i % 3 === 0 ? execute(resetting.url) : i % 3 === 1 ? execute(hanging.url) : mcpCall('reset-mcp')),
      );
    const run = async (list: (() => Promise<{ status: number; body: any }>)[]) => {
      let next = 0;
      await Promise.all(
        Array.from({ length: CONCURRENCY }, async () => {
          while (next < list.length) {
            const res = await (list[next++] as () => Promise<{ status: number; body: any }>)();
            const key = `${res.status} ${res.body?.error?.code ?? ''}`.trim();
            statuses[key] = (statuses[key] ?? 0) + 1;
          }
        }),
      );
    };
    await run(jobs(PER_ROUND)); // warm-up: pools, caches, JIT
    await settle([hanging, resetting, mcpResetting]);
    statuses = {};
    readings.push(heapAfterGc());
    for (let round = 0; round < ROUNDS; round++) {
      await run(jobs(PER_ROUND));
      readings.push(heapAfterGc());
    }
    openAfter = await settle([hanging, resetting, mcpResetting]);
    // then nothing more may reach the upstreams: no retry, no reconnection in the background
    const upstreams = { hanging, resetting, 'mcp resetting': mcpResetting };
    const before = Object.fromEntries(Object.entries(upstreams).map(([name, u]) => [name, u.accepted()]));
    await new Promise((r) => setTimeout(r, QUIET_MS));
    lateConnections = Object.fromEntries(Object.entries(upstreams).map(([name, u]) => [name, u.accepted() - (before[name] as number)]));
  }, 240_000);

  it('answers every one of them 502 (execution_failed / call_failed)', () => {
    console.log(
      `[upstream] ${ROUNDS * PER_ROUND} requests after warm-up: ${JSON.stringify(statuses)}; upstream connections accepted: hanging ${hanging.accepted()}, resetting ${resetting.accepted()}, mcp resetting ${mcpResetting.accepted()}`,
    );
    expect(Object.keys(statuses).sort()).toEqual(['502 call_failed', '502 execution_failed']);
  });

  it('leaves ~0 connections open at the upstreams after a short settle', () => {
    console.log(
      `[upstream] open upstream connections after settle: ${openAfter} (hanging ${hanging.open()}, resetting ${resetting.open()}, mcp ${mcpResetting.open()}, mcp hanging ${mcpHanging.open()})`,
    );
    expect(openAfter).toBeLessThanOrEqual(1);
  });

  it(`opens no connection to the upstreams once the requests have been answered (${QUIET_MS / 1000} s of quiet)`, () => {
    console.log(
      `[upstream] connections reaching the upstreams in the ${QUIET_MS / 1000} s after the last answer: ${JSON.stringify(lateConnections)}`,
    );
    expect(lateConnections).toEqual({ hanging: 0, resetting: 0, 'mcp resetting': 0 });
  });

  it(`keeps the heap within ${HEAP_MARGIN_BYTES / 1024 / 1024} MiB of the post-warm-up reading (GC forced before each reading)`, () => {
    const mib = (n: number) => (n / 1024 / 1024).toFixed(1);
    const growth = (readings.at(-1) as number) - (readings[0] as number);
    console.log(
      `[upstream] heapUsed after GC, post-warm-up then after each round of ${PER_ROUND}: ${readings.map(mib).join(' → ')} MiB; growth ${mib(growth)} MiB (${Math.round(growth / (ROUNDS * PER_ROUND))} B/request)`,
    );
    expect(growth).toBeLessThan(HEAP_MARGIN_BYTES);
  });

  it('leaves no connection open at the hanging MCP server once its calls have failed', async () => {
    // The MCP hangs of the earlier tests have timed out by now; their connections must be gone.
    expect(await settle([mcpHanging], 20_000)).toBeLessThanOrEqual(1);
  }, 30_000);
});
