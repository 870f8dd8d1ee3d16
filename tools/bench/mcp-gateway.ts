/**
 * The MCP benchmark (issue 23): the same tool call made directly with the official SDK Client
 * on the upstream (an SDK-built Streamable HTTP server on loopback, mcp-upstream.ts), through
 * Warden's MCP gateway (`/api/v1/mcp/<slug>`, the SDK Client with the agent key as the bearer)
 * and through the REST runtime (`POST /runtime/mcp/call`), on the Warden and PostgreSQL of the
 * run, and through a bare reverse proxy (mcp-relay.ts) — the floor any gateway pays for one more
 * hop on this machine. What Warden adds:
 *
 * - sequential: `BENCH_MCP_WARMUP` unmeasured rounds, then `BENCH_MCP_CALLS` rounds of one
 *   call of each way, the order rotated every round (so drifting load disturbs all three
 *   alike); added latency = the way's percentile − direct's (and, per round, the paired
 *   difference). Targets: gateway p50 + ≤ 1.5 ms, p99 + ≤ 5 ms.
 * - concurrent: `BENCH_CONNECTIONS` calls in flight, each way for a warm-up and a measured
 *   phase, interleaved over `BENCH_ROUNDS` rounds; throughput (calls/s) and the servers' CPU
 *   time per call (Warden, its PostgreSQL sessions, the upstream). Target: gateway ≥ 0.8 × direct.
 *
 * Every gateway and runtime call is two audit events (the decision and the outcome): checked
 * per concurrent phase by the X-Request-Id its calls carried.
 */
import { randomUUID } from 'node:crypto';
import { loadavg } from 'node:os';
import type pg from 'pg';
import { backendPids } from './database.ts';
import type { ConcurrentResult, Indirect, Percentiles, SequentialResult, Targets, Way } from './mcp-gateway-load.ts';
import { cpuMs, forkBench, machineTicks, nextMessage, stopChild } from './procs.ts';
import { median } from './report.ts';
import { WARDEN_APP_NAME } from './targets.ts';
import { AGENT_KEY, jsonHeaders, MCP_CALL_BODY } from './workload.ts';

const WAYS: readonly Way[] = ['direct', 'relay', 'gateway', 'runtime'];

export interface McpBenchOptions {
  /** Warden's API base (…/api/v1), its bootstrap key and its server processes. */
  baseUrl: string;
  key: string;
  wardenPids: number[];
  upstreamUrl: string;
  upstreamPid: number;
  /** The bench database (audit rows, Warden's PostgreSQL sessions). */
  pool: pg.Pool;
  connections: number;
  warmupSeconds: number;
  seconds: number;
  rounds: number;
  log: (message: string) => void;
}

export interface McpConcurrentRun extends ConcurrentResult {
  round: number;
  wardenCpuMsPerCall: number | null;
  dbCpuMsPerCall: number | null;
  /** Transactions of the bench database per call (pg_stat_database; Warden's round trips, the sealer's too; flushed about once a second). */
  dbTransactionsPerCall: number | null;
  upstreamCpuMsPerCall: number | null;
  machineBusyPercent: number;
  loadAvg1: number;
  /** The measured phase, process.hrtime in µs (a server's --cpu-prof window). */
  windowUs: { startUs: number; endUs: number };
  audit: { written: number; expected: number; ok: boolean } | null;
}

export interface McpBenchFigures {
  settings: {
    sequentialCalls: number;
    sequentialWarmup: number;
    connections: number;
    warmupSeconds: number;
    seconds: number;
    rounds: number;
    /** The relay commits a row before forwarding and one after (BENCH_MCP_RELAY_COMMITS=1). */
    relayCommits: boolean;
  };
  loadAvgAtStart: number[];
  loadAvgAtEnd: number[];
  sequential: SequentialResult;
  concurrent: McpConcurrentRun[];
  headline: {
    relay_added_p50_ms: number;
    relay_added_p99_ms: number;
    gateway_added_p50_ms: number;
    gateway_added_p99_ms: number;
    runtime_added_p50_ms: number;
    runtime_added_p99_ms: number;
    gateway_paired_added_p50_ms: number;
    direct_rps_50: number;
    relay_rps_50: number;
    gateway_rps_50: number;
    runtime_rps_50: number;
    gateway_over_direct_rps: number;
    relay_over_direct_rps: number;
    runtime_over_direct_rps: number;
    gateway_over_direct_rps_per_round: number[];
    gateway_warden_cpu_ms_per_call: number;
    runtime_warden_cpu_ms_per_call: number;
    audit_ok: boolean;
  };
  targets: Record<string, boolean>;
}

const integer = (name: string, fallback: number, min = 1): number => {
  const raw = process.env[name];
  if (!raw) return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < min) throw new Error(`${name} must be an integer ≥ ${min}, got '${raw}'`);
  return value;
};

const hrtimeUs = () => Number(process.hrtime.bigint() / 1000n);
const round3 = (v: number) => (Number.isFinite(v) ? Number(v.toFixed(3)) : Number.NaN);
const safeCpu = (pid: number) => {
  try {
    return cpuMs(pid);
  } catch {
    return Number.NaN;
  }
};

async function sampleCpu(options: McpBenchOptions) {
  const backends = await backendPids(options.pool, WARDEN_APP_NAME);
  const { rows } = await options.pool.query(
    'SELECT (xact_commit + xact_rollback)::bigint AS n FROM pg_stat_database WHERE datname = current_database()',
  );
  return {
    transactions: Number(rows[0].n),
    warden: options.wardenPids.reduce((sum, pid) => sum + safeCpu(pid), 0),
    upstream: safeCpu(options.upstreamPid),
    db: new Map(backends.map((pid) => [pid, safeCpu(pid)])),
    machine: machineTicks(),
  };
}

export async function benchMcpGateway(options: McpBenchOptions): Promise<McpBenchFigures> {
  const sequentialCalls = integer('BENCH_MCP_CALLS', 500);
  const sequentialWarmup = integer('BENCH_MCP_WARMUP', 100);
  // 0: the sequential part only (e.g. to profile it)
  const rounds = integer('BENCH_MCP_ROUNDS', options.rounds, 0);
  const { log } = options;
  // BENCH_MCP_RELAY_COMMITS=1: the relay also commits a row before forwarding and one after (mcp-relay.ts)
  const commits = process.env.BENCH_MCP_RELAY_COMMITS === '1';
  const relayArgs = commits ? [options.upstreamUrl, String(options.pool.options.connectionString)] : [options.upstreamUrl];
  const relay = forkBench('mcp-relay.ts', 'relay', relayArgs);
  const relayUrl = (await nextMessage<{ url: string }>(relay, (m) => m?.type === 'ready', 30_000, 'start the MCP relay')).url;
  const targets: Targets = {
    directUrl: options.upstreamUrl,
    relayUrl,
    gatewayUrl: `${options.baseUrl}/mcp/tools`,
    gatewayHeaders: { authorization: `Bearer ${AGENT_KEY}` },
    runtimeUrl: `${options.baseUrl}/runtime/mcp/call`,
    runtimeHeaders: jsonHeaders(options.key),
    runtimeBody: JSON.stringify(MCP_CALL_BODY(undefined)),
    tool: 'echo',
    arguments: MCP_CALL_BODY(undefined).arguments,
  };
  const loadAvgAtStart = loadavg().map((v) => Number(v.toFixed(2)));
  const child = forkBench('mcp-gateway-load.ts', 'load mcp');
  const failedOn = (m: { type?: unknown } | null | undefined) => m?.type === 'error';
  const answer = async <T>(type: string, timeoutMs: number, what: string): Promise<T> => {
    const message = await nextMessage<{ type: string; result?: T; error?: string }>(
      child,
      (m) => m?.type === type || failedOn(m),
      timeoutMs,
      what,
    );
    if (message.type === 'error') throw new Error(`${what}: ${message.error}`);
    return message.result as T;
  };
  try {
    log(`MCP sequential: ${sequentialWarmup} warm-up + ${sequentialCalls} rounds of direct / gateway / runtime, order rotated…`);
    child.send({ type: 'sequential', targets, spec: { warmup: sequentialWarmup, calls: sequentialCalls } });
    const sequential = await answer<SequentialResult>(
      'sequential-result',
      (sequentialWarmup + sequentialCalls) * 3 * 1_000 + 60_000,
      'MCP sequential',
    );
    for (const way of WAYS) {
      const p = sequential.ms[way];
      log(`  ${way.padEnd(7)} p50 ${p.p50} ms, p90 ${p.p90} ms, p99 ${p.p99} ms, max ${p.max} ms, errors ${sequential.errors[way]}`);
    }

    const concurrent: McpConcurrentRun[] = [];
    for (let round = 1; round <= rounds; round++) {
      for (let i = 0; i < WAYS.length; i++) {
        const way = WAYS[(round - 1 + i) % WAYS.length] as Way;
        const requestId = randomUUID();
        log(`MCP ${way} at ${options.connections} concurrent (round ${round})…`);
        child.send({
          type: 'concurrent',
          targets,
          spec: { way, connections: options.connections, warmupSeconds: options.warmupSeconds, seconds: options.seconds, requestId },
        });
        await answer('measuring', (options.warmupSeconds * 3 + 60) * 1000, `MCP ${way} warm-up`);
        const before = await sampleCpu(options);
        const loadAvg1 = Number((loadavg()[0] ?? 0).toFixed(2));
        const startUs = hrtimeUs();
        child.send({ type: 'go' });
        await answer('measured', (options.seconds * 4 + 60) * 1000, `MCP ${way} measured`);
        const windowUs = { startUs, endUs: hrtimeUs() };
        const after = await sampleCpu(options);
        const result = await answer<ConcurrentResult>('concurrent-result', 90_000, `MCP ${way} drain`);
        let db = 0;
        for (const [pid, cpu] of before.db) db += Math.max(0, (after.db.get(pid) ?? safeCpu(pid)) - cpu);
        const perCall = (ms: number) => (result.calls > 0 && Number.isFinite(ms) ? round3(ms / result.calls) : null);
        const throughWarden = way === 'gateway' || way === 'runtime';
        let audit: McpConcurrentRun['audit'] = null;
        if (throughWarden) {
          const { rows } = await options.pool.query('SELECT count(*)::bigint AS n FROM audit_events WHERE request_id = $1', [requestId]);
          const written = Number(rows[0].n);
          audit = { written, expected: result.succeeded * 2, ok: written === result.succeeded * 2 };
        }
        const elapsed = after.machine.total - before.machine.total;
        const run: McpConcurrentRun = {
          ...result,
          round,
          wardenCpuMsPerCall: throughWarden ? perCall(after.warden - before.warden) : null,
          dbCpuMsPerCall: throughWarden ? perCall(db) : null,
          dbTransactionsPerCall: throughWarden ? perCall(after.transactions - before.transactions) : null,
          upstreamCpuMsPerCall: perCall(after.upstream - before.upstream),
          machineBusyPercent: elapsed > 0 ? Number(((100 * (after.machine.busy - before.machine.busy)) / elapsed).toFixed(1)) : Number.NaN,
          loadAvg1,
          windowUs,
          audit,
        };
        concurrent.push(run);
        log(
          `  ${run.rps} calls/s, p50 ${run.ms.p50} ms, p99 ${run.ms.p99} ms, errors ${run.errors}; CPU ms/call: Warden ${run.wardenCpuMsPerCall ?? '–'}, ` +
            `its PostgreSQL ${run.dbCpuMsPerCall ?? '–'} (${run.dbTransactionsPerCall ?? '–'} transactions/call), upstream ${run.upstreamCpuMsPerCall ?? '–'}, client ${round3(run.clientCpuMs / Math.max(1, run.calls))}` +
            (audit ? `; audit ${audit.written}/${audit.expected}` : ''),
        );
      }
    }

    const rps = (way: Way) => median(concurrent.filter((r) => r.way === way).map((r) => r.rps));
    const cpu = (way: Way) => median(concurrent.filter((r) => r.way === way).map((r) => r.wardenCpuMsPerCall ?? Number.NaN));
    const perRound: number[] = [];
    for (let round = 1; round <= rounds; round++) {
      const of = (way: Way) => concurrent.find((r) => r.way === way && r.round === round)?.rps;
      const [g, d] = [of('gateway'), of('direct')];
      if (g && d) perRound.push(round3(g / d));
    }
    const added = (way: Indirect, p: keyof Percentiles) => round3(sequential.ms[way][p] - sequential.ms.direct[p]);
    const headline = {
      relay_added_p50_ms: added('relay', 'p50'),
      relay_added_p99_ms: added('relay', 'p99'),
      gateway_added_p50_ms: added('gateway', 'p50'),
      gateway_added_p99_ms: added('gateway', 'p99'),
      runtime_added_p50_ms: added('runtime', 'p50'),
      runtime_added_p99_ms: added('runtime', 'p99'),
      gateway_paired_added_p50_ms: sequential.pairedAddedMs.gateway.p50,
      direct_rps_50: rps('direct'),
      relay_rps_50: rps('relay'),
      gateway_rps_50: rps('gateway'),
      runtime_rps_50: rps('runtime'),
      gateway_over_direct_rps: round3(rps('gateway') / rps('direct')),
      relay_over_direct_rps: round3(rps('relay') / rps('direct')),
      runtime_over_direct_rps: round3(rps('runtime') / rps('direct')),
      gateway_over_direct_rps_per_round: perRound,
      gateway_warden_cpu_ms_per_call: round3(cpu('gateway')),
      runtime_warden_cpu_ms_per_call: round3(cpu('runtime')),
      audit_ok: concurrent.every((r) => r.audit === null || r.audit.ok),
    };
    const noErrors = concurrent.every((r) => r.errors === 0) && WAYS.every((w) => sequential.errors[w] === 0);
    return {
      settings: {
        sequentialCalls,
        sequentialWarmup,
        connections: options.connections,
        warmupSeconds: options.warmupSeconds,
        seconds: options.seconds,
        rounds,
        relayCommits: commits,
      },
      loadAvgAtStart,
      loadAvgAtEnd: loadavg().map((v) => Number(v.toFixed(2))),
      sequential,
      concurrent,
      headline,
      targets: {
        'MCP gateway added p50 <= 1.5 ms (sequential)': headline.gateway_added_p50_ms <= 1.5,
        'MCP gateway added p99 <= 5 ms (sequential)': headline.gateway_added_p99_ms <= 5,
        [`MCP gateway throughput >= 0.8 x direct (${options.connections} concurrent)`]: headline.gateway_over_direct_rps >= 0.8,
        'MCP calls: no errors, 2 audit events per governed call': noErrors && headline.audit_ok,
      },
    };
  } finally {
    await stopChild(child, 'SIGKILL', 1_000);
    await stopChild(relay);
  }
}

/** The readable part of the report. */
export function formatMcpBench(f: McpBenchFigures): string[] {
  const h = f.headline;
  const s = f.sequential;
  const out = [
    `MCP tool call (echo on an SDK-built Streamable HTTP upstream): direct SDK Client vs the same through a bare relay vs Warden's /mcp/tools (SDK Client, agent key as bearer) vs POST /runtime/mcp/call`,
    `  load average ${f.loadAvgAtStart.join(' ')} at start, ${f.loadAvgAtEnd.join(' ')} at end`,
    `  sequential (${s.calls} rounds after ${s.warmup} warm-up, order rotated):`,
  ];
  for (const way of WAYS) {
    const p = s.ms[way];
    out.push(
      `    ${way.padEnd(8)} p50 ${p.p50} ms  p90 ${p.p90} ms  p99 ${p.p99} ms  max ${p.max} ms  mean ${p.mean} ms  errors ${s.errors[way]}`,
    );
  }
  out.push(
    `    added by the gateway: p50 +${h.gateway_added_p50_ms} ms (target ≤ 1.5), p99 +${h.gateway_added_p99_ms} ms (target ≤ 5); paired per round: p50 +${s.pairedAddedMs.gateway.p50} ms, p99 +${s.pairedAddedMs.gateway.p99} ms`,
  );
  out.push(
    `    added by ${f.settings.relayCommits ? 'a relay that commits before and after (one more hop, two PostgreSQL commits, nothing decided)' : 'a bare relay (one more hop, nothing else)'}: p50 +${h.relay_added_p50_ms} ms, p99 +${h.relay_added_p99_ms} ms; the gateway beyond it: p50 +${round3(h.gateway_added_p50_ms - h.relay_added_p50_ms)} ms, p99 +${round3(h.gateway_added_p99_ms - h.relay_added_p99_ms)} ms`,
  );
  out.push(`    added by /runtime/mcp/call: p50 +${h.runtime_added_p50_ms} ms, p99 +${h.runtime_added_p99_ms} ms`);
  out.push(
    `  ${f.settings.connections} concurrent (${f.settings.warmupSeconds} s warm-up + ${f.settings.seconds} s measured, ${f.settings.rounds} rounds interleaved):`,
  );
  for (const r of f.concurrent) {
    out.push(
      `    round ${r.round} ${r.way.padEnd(8)} ${String(r.rps).padStart(7)} calls/s  p50 ${r.ms.p50} ms  p99 ${r.ms.p99} ms  errors ${r.errors}  ` +
        `CPU ms/call Warden ${r.wardenCpuMsPerCall ?? '–'} + PostgreSQL ${r.dbCpuMsPerCall ?? '–'} (${r.dbTransactionsPerCall ?? '–'} tx/call), upstream ${r.upstreamCpuMsPerCall ?? '–'}  machine ${r.machineBusyPercent} % busy` +
        (r.audit ? `  audit ${r.audit.written}/${r.audit.expected}` : ''),
    );
  }
  out.push(
    `    medians: direct ${h.direct_rps_50}/s, relay ${h.relay_rps_50}/s (${h.relay_over_direct_rps} × direct), gateway ${h.gateway_rps_50}/s (${h.gateway_over_direct_rps} × direct; per round ${h.gateway_over_direct_rps_per_round.join(', ')}; target ≥ 0.8), runtime ${h.runtime_rps_50}/s (${h.runtime_over_direct_rps} × direct)`,
  );
  for (const [name, ok] of Object.entries(f.targets)) out.push(`  ${ok ? 'PASS' : 'FAIL'}  ${name}`);
  return out;
}
