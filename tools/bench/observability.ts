/**
 * What metrics and tracing cost (issue 26): Warden's POST /policy/evaluate with both on —
 * Prometheus metrics scraped every second, requests traced by Warden's default sampler (1 in 10;
 * BENCH_OTEL_TRACES_SAMPLER=always_on: every request) and exported over OTLP/HTTP to a
 * sink on 127.0.0.1 — against the same server with both off, each beside B1 in the same rounds
 * (closed loop). Target: S/B1 with both on ≥ 0.9 × S/B1 with both off (medians over the rounds).
 *
 * Each Warden has a database of its own, seeded alike (50 policies × 10 rules, 100 agents); B1
 * writes into the first. Each target is primed once, unmeasured; then the order of the three
 * runs rotates from round to round, so neither Warden always follows the other.
 */

import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import type { BenchConfig } from './config.ts';
import { type BenchDatabase, createBenchDatabase } from './database.ts';
import { freePort, ROOT } from './procs.ts';
import { median } from './report.ts';
import { type Measured, runLoad, type Scenario } from './runner.ts';
import { B1_APP_NAME, startBaseline, startMcpUpstream, startWarden, WARDEN_APP_NAME, type WardenTarget } from './targets.ts';
import { EVALUATE_BODY, jsonHeaders, seedWarden } from './workload.ts';

const OUT_DIR = join(ROOT, 'test-output/bench');
const POLICIES = 50;
const SCRAPE_EVERY_MS = 1000;

export interface ObservabilityFigures {
  /** Closed-loop requests per second of each target, per round. */
  rounds: Array<{ round: number; order: string[]; b1: number; off: number; on: number }>;
  /** Medians over the rounds of S/B1, with both off and with both on. */
  ratioOff: number;
  ratioOn: number;
  /** ratioOn / ratioOff: the target is ≥ 0.9. */
  relative: number;
  /** CPU ms per request of each Warden (medians). */
  cpuMsPerRequest: { off: number; on: number };
  /** What the on Warden sent and served: OTLP export requests and bytes, metric scrapes. */
  exported: { otlpRequests: number; otlpBytes: number; scrapes: number; scrapeBytes: number };
  /** What the on Warden had on: `both` unless BENCH_OBSERVABILITY said `metrics` or `tracing`; and the OTEL_* variables given to it. */
  on: { which: string; otel: Record<string, string> };
  loadAvgAtStart: number[];
}

/** An OTLP/HTTP receiver that counts what it is sent and keeps nothing. */
async function startOtlpSink() {
  const counts = { requests: 0, bytes: 0 };
  const server = createServer((req, res) => {
    req.on('data', (chunk: Buffer) => {
      counts.bytes += chunk.length;
    });
    req.on('end', () => {
      counts.requests += 1;
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    counts,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

export async function observabilityBenchmark(
  config: BenchConfig,
  register: (cleanup: () => Promise<void>) => void,
  log: (message: string) => void,
): Promise<ObservabilityFigures> {
  const loadAvgAtStart = loadavg().map((v) => Math.round(v * 100) / 100);
  mkdirSync(OUT_DIR, { recursive: true });
  const sink = await startOtlpSink();
  register(sink.close);
  const mcp = await startMcpUpstream();
  register(mcp.stop);

  const start = async (label: string, env: Record<string, string>): Promise<{ db: BenchDatabase; warden: WardenTarget }> => {
    const db = await createBenchDatabase(config.databaseUrl, `${label.replaceAll('-', '_')}_${process.pid}`);
    register(async () => {
      await db.drop();
      log(`dropped database ${db.name}`);
    });
    const dataDir = mkdtempSync(join(tmpdir(), `${label}-`));
    register(async () => rmSync(dataDir, { recursive: true, force: true }));
    const warden = await startWarden({
      databaseUrl: db.url,
      redisUrl: config.redisUrl,
      dataDir,
      logDir: OUT_DIR,
      nodeFlags: config.nodeFlags,
      label,
      workers: config.workers,
      env,
    });
    register(() => warden.stop());
    await seedWarden(warden.baseUrl, warden.key, mcp.url, POLICIES);
    log(`${label}: Warden at ${warden.baseUrl} (pids ${warden.pids.join(', ')}), database ${db.name}`);
    return { db, warden };
  };

  const off = await start('warden-obs-off', {});
  const metricsPort = await freePort();
  // BENCH_OBSERVABILITY=metrics|tracing turns on one of the two only, to tell their costs apart.
  const which = process.env.BENCH_OBSERVABILITY || 'both';
  if (!['both', 'metrics', 'tracing'].includes(which))
    throw new Error(`BENCH_OBSERVABILITY must be both, metrics or tracing, got '${which}'`);
  // BENCH_OTEL_<NAME> reaches that Warden as OTEL_<NAME> (a sampler, the OTLP protocol…).
  const passedOn = Object.fromEntries(
    Object.entries(process.env)
      .filter(([name, value]) => name.startsWith('BENCH_OTEL_') && value)
      .map(([name, value]) => [name.slice('BENCH_'.length), value as string]),
  );
  const on = await start('warden-obs-on', {
    ...(which !== 'tracing' && { WARDEN_METRICS_PORT: String(metricsPort) }),
    ...(which !== 'metrics' && {
      OTEL_EXPORTER_OTLP_ENDPOINT: sink.url,
      OTEL_SERVICE_NAME: 'warden-bench',
      ...passedOn,
    }),
  });
  const b1 = await startBaseline('b1', off.db.url);
  register(b1.stop);

  // A Prometheus that scrapes the on Warden every second for the whole phase.
  const scrapes = { count: 0, bytes: 0 };
  const scraper = setInterval(() => {
    fetch(`http://127.0.0.1:${metricsPort}/metrics`)
      .then(async (res) => {
        const text = await res.text();
        if (res.ok) {
          scrapes.count += 1;
          scrapes.bytes += text.length;
        }
      })
      .catch(() => undefined);
  }, SCRAPE_EVERY_MS);
  register(async () => clearInterval(scraper));

  const body = JSON.stringify(EVALUATE_BODY);
  const wardenScenario = (label: string, warden: WardenTarget): Scenario => ({
    target: label,
    scenario: 'evaluate',
    pids: warden.pids,
    dbApplication: WARDEN_APP_NAME,
    url: `${warden.baseUrl}/policy/evaluate`,
    method: 'POST',
    headers: jsonHeaders(warden.key),
    body,
    audit: { table: 'audit_events', perOk: 1 },
  });
  const targets = {
    b1: {
      scenario: {
        target: 'B1',
        scenario: 'evaluate',
        pids: [b1.pid],
        dbApplication: B1_APP_NAME,
        url: `${b1.origin}/api/v1/policy/evaluate`,
        method: 'POST',
        headers: jsonHeaders(off.warden.key),
        body,
        audit: { table: 'bench_audit_events', perOk: 1 },
      } satisfies Scenario,
      pool: off.db.pool,
    },
    off: { scenario: wardenScenario('S (metrics and tracing off)', off.warden), pool: off.db.pool },
    on: { scenario: wardenScenario('S (metrics and tracing on)', on.warden), pool: on.db.pool },
  };

  const order = ['b1', 'off', 'on'] as const;
  // Each target primed once, unmeasured (JIT, pools, caches), as the full run primes its S.
  for (const name of order) {
    const { scenario, pool } = targets[name];
    log(`observability: priming ${scenario.target} (5 s, not counted)…`);
    await runLoad(scenario, 'closed', {
      connections: config.connections,
      warmupSeconds: 1,
      seconds: Math.min(5, config.seconds),
      round: 0,
      pool,
    });
  }
  const rounds: ObservabilityFigures['rounds'] = [];
  const cpu: { off: number[]; on: number[] } = { off: [], on: [] };
  for (let round = 1; round <= config.rounds; round++) {
    const shift = (round - 1) % order.length;
    const turn = [...order.slice(shift), ...order.slice(0, shift)];
    const rps: Record<string, number> = {};
    for (const name of turn) {
      const { scenario, pool } = targets[name];
      log(`observability: ${scenario.target} closed loop (round ${round})…`);
      const measured: Measured = await runLoad(scenario, 'closed', {
        connections: config.connections,
        warmupSeconds: config.warmupSeconds,
        seconds: config.seconds,
        round,
        pool,
      });
      const l = measured.load;
      if (l.errors + l.non2xx > 0) throw new Error(`${scenario.target}: ${l.errors + l.non2xx} errors in round ${round}`);
      if (measured.audit && !measured.audit.ok)
        throw new Error(`${scenario.target}: audit ${measured.audit.written}/${measured.audit.expected}`);
      rps[name] = l.rps;
      if (name !== 'b1') cpu[name].push(measured.cpuMsPerRequest);
      log(`  ${l.rps.toFixed(0)} req/s, p50 ${l.latencyMs.p50.toFixed(2)} ms, ${measured.cpuMsPerRequest.toFixed(3)} CPU ms/req`);
    }
    rounds.push({ round, order: turn, b1: rps.b1 as number, off: rps.off as number, on: rps.on as number });
  }
  clearInterval(scraper);

  const ratioOff = median(rounds.map((r) => r.off / r.b1));
  const ratioOn = median(rounds.map((r) => r.on / r.b1));
  const r3 = (v: number) => Math.round(v * 1000) / 1000;
  return {
    rounds: rounds.map((r) => ({ ...r, b1: Math.round(r.b1), off: Math.round(r.off), on: Math.round(r.on) })),
    ratioOff: r3(ratioOff),
    ratioOn: r3(ratioOn),
    relative: r3(ratioOn / ratioOff),
    cpuMsPerRequest: { off: r3(median(cpu.off)), on: r3(median(cpu.on)) },
    exported: { otlpRequests: sink.counts.requests, otlpBytes: sink.counts.bytes, scrapes: scrapes.count, scrapeBytes: scrapes.bytes },
    on: { which, otel: passedOn },
    loadAvgAtStart,
  };
}

export function formatObservability(f: ObservabilityFigures): string[] {
  return [
    'Metrics and tracing (closed loop, POST /policy/evaluate; rounds of B1, S off, S on in rotating order):',
    `  on: ${f.on.which === 'both' ? 'metrics and tracing' : `${f.on.which} only`}; ${
      Object.entries(f.on.otel)
        .map(([k, v]) => `${k}=${v}`)
        .join(' ') || "Warden's default sampler (parent-based, 1 in 10 of the traces started here)"
    }`,
    ...f.rounds.map((r) => `  round ${r.round} (${r.order.join(', ')}): B1 ${r.b1}/s, S off ${r.off}/s, S on ${r.on}/s`),
    `  S/B1 with both off ${f.ratioOff}, with both on ${f.ratioOn}: ${f.relative} × (target ≥ 0.9)`,
    `  CPU ms per request: off ${f.cpuMsPerRequest.off}, on ${f.cpuMsPerRequest.on}`,
    `  exported: ${f.exported.otlpRequests} OTLP requests (${(f.exported.otlpBytes / 1e6).toFixed(1)} MB), ${f.exported.scrapes} scrapes (${(f.exported.scrapeBytes / 1e3).toFixed(0)} KB)`,
  ];
}
