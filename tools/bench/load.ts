/**
 * One measured load run against one server, and the meter every scenario reads: a load
 * generator forked per run (loadgen.ts) warms up; then, over the measured phase only, the
 * server's CPU time from /proc (its processes and its PostgreSQL backends), its peak RSS, the
 * machine's busy time; and the audit rows it wrote, counted against its 2xx answers by the
 * phase's X-Request-Id.
 */
import { randomUUID } from 'node:crypto';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { backendPids, type Target } from './lab.ts';
import type { LoadResult, RunSpec } from './loadgen.ts';
import { cpuTimes, forkBench, machineTicks, memoryMb, nextMessage, sleep, stopChild } from './procs.ts';
import { percentiles } from './report.ts';
import { EVALUATE_BODY, jsonHeaders } from './workload.ts';

export interface Usage {
  cpuMs: number;
  /** The kernel's share of that time (socket writes to PostgreSQL, Redis and the client). */
  systemPercent: number;
  /** CPU time of the server's PostgreSQL backends open when the meter started; null without any. */
  dbCpuMs: number | null;
  rssPeakMb: number;
  /** The whole machine's busy share (all cores). */
  machineBusyPercent: number;
  /** The 1-minute load average when the meter started (other work disturbs the figures). */
  loadAvg1: number;
}

/** Starts reading a server's usage; the answer stops and reports it. */
export async function meter(target: Target): Promise<() => Usage> {
  const total = () =>
    target.pids.map(cpuTimes).reduce((a, b) => ({ user: a.user + b.user, system: a.system + b.system }), { user: 0, system: 0 });
  const rss = () => target.pids.reduce((sum, pid) => sum + memoryMb(pid).rss, 0);
  const backends = target.pool && target.dbApp ? await backendPids(target.pool, target.dbApp) : [];
  const dbStart = new Map(backends.map((pid) => [pid, cpuTimes(pid)]));
  // per backend: one that closed meanwhile (a pool's idle timeout) counts for nothing rather than for less than nothing
  const dbCpu = () =>
    backends.reduce((sum, pid) => {
      const [before, after] = [dbStart.get(pid) as { user: number; system: number }, cpuTimes(pid)];
      return sum + Math.max(0, after.user + after.system - before.user - before.system);
    }, 0);
  let rssPeak = rss();
  const sampler = setInterval(() => {
    rssPeak = Math.max(rssPeak, rss());
  }, 100);
  const loadAvg1 = Number((loadavg()[0] ?? 0).toFixed(2));
  const [cpu0, machine0] = [total(), machineTicks()];
  return () => {
    clearInterval(sampler);
    const [cpu1, db, machine1] = [total(), dbCpu(), machineTicks()];
    const system = cpu1.system - cpu0.system;
    const cpuMs = cpu1.user - cpu0.user + system;
    return {
      cpuMs,
      systemPercent: cpuMs > 0 ? (100 * system) / cpuMs : Number.NaN,
      dbCpuMs: backends.length ? db : null,
      rssPeakMb: Math.max(rssPeak, rss()),
      machineBusyPercent: (100 * (machine1.busy - machine0.busy)) / Math.max(1, machine1.total - machine0.total),
      loadAvg1,
    };
  };
}

export interface Load {
  /** Labels in the report: who answers (B0, B1, S…) and what is asked (evaluate, agents_list…). */
  target: string;
  scenario: string;
  server: Target;
  url: string;
  method: 'GET' | 'POST';
  headers: Record<string, string>;
  body?: string;
  /** Each `[<id>]` in the body becomes a fresh id per request (closed loop). */
  idReplacement?: boolean;
  /** Rows the server writes per 2xx answer into `table` (checked exactly). */
  audit?: { table: string; perOk: number };
}

/** POST /policy/evaluate with the benchmark's one body, answered by `server` at `url`; `table`: the rows it writes, one per 2xx. */
export const evaluateLoad = (target: string, server: Target, url: string, key: string, table?: string): Load => ({
  target,
  scenario: 'evaluate',
  server,
  url,
  method: 'POST',
  headers: jsonHeaders(key),
  body: JSON.stringify(EVALUATE_BODY),
  ...(table && { audit: { table, perOk: 1 } }),
});

export interface Measured {
  target: string;
  scenario: string;
  mode: 'closed' | 'open';
  round: number;
  load: LoadResult;
  cpuMsPerRequest: number;
  dbCpuMsPerRequest: number | null;
  serverSystemPercent: number;
  /** Server CPU as a share of one core. */
  serverCorePercent: number;
  rssPeakMb: number;
  machineBusyPercent: number;
  loadAvg1: number;
  audit?: { written: number; expected: number; ok: boolean };
}

export interface RunOptions {
  mode: 'closed' | 'open';
  connections: number;
  warmupSeconds: number;
  seconds: number;
  /** open: requests per second. */
  rate?: number;
  round?: number;
  /** open: write each request's due time, latency and status to a file in this folder. */
  traceDir?: string;
  /** Called when the measured phase starts and ends, with process.hrtime in µs (a profile's window). */
  onMeasure?: (phase: 'start' | 'end', hrtimeUs: number) => void;
}

const hrtimeUs = () => Number(process.hrtime.bigint() / 1000n);

export async function runLoad(load: Load, options: RunOptions): Promise<Measured> {
  const { mode, round = 1 } = options;
  const spec: RunSpec = {
    mode,
    url: load.url,
    method: load.method,
    headers: load.headers,
    body: load.body,
    idReplacement: load.idReplacement,
    connections: options.connections,
    warmupSeconds: options.warmupSeconds,
    seconds: options.seconds,
    rate: options.rate,
    traceFile:
      mode === 'open' && options.traceDir ? join(options.traceDir, `${load.target}-${load.scenario}-round${round}.tsv`) : undefined,
  };
  const what = `${load.target} ${load.scenario} ${mode}`;
  const child = forkBench('loadgen.ts', `load ${load.target}`);
  try {
    child.send({ type: 'run', spec });
    const warm = await nextMessage<{ rps: number }>(child, 'warm', (options.warmupSeconds * 3 + 60) * 1000, `${what} (warm-up)`);
    const stop = await meter(load.server);
    options.onMeasure?.('start', hrtimeUs());
    // closed: as many requests as the warm-up rate gives in `seconds`, so every one is answered before the end
    const amount = mode === 'closed' ? Math.max(options.connections, Math.round(warm.rps * options.seconds)) : undefined;
    const requestId = randomUUID();
    child.send({ type: 'go', amount, requestId });
    const { result } = await nextMessage<{ result: LoadResult }>(child, 'result', (options.seconds * 4 + 90) * 1000, `${what} (measured)`);
    options.onMeasure?.('end', hrtimeUs());
    if (result.responses === 0) throw new Error(`${what}: no answer in the measured phase (${result.errors} errors)`);
    const usage = stop();
    let audit: Measured['audit'];
    if (load.audit && load.server.pool) {
      const { rows } = await load.server.pool.query(`SELECT count(*)::bigint AS n FROM ${load.audit.table} WHERE request_id = $1`, [
        requestId,
      ]);
      const [written, expected] = [Number(rows[0].n), result.ok2xx * load.audit.perOk];
      audit = { written, expected, ok: written === expected };
    }
    const per = (ms: number | null) => (ms !== null && result.responses ? ms / result.responses : null);
    return {
      target: load.target,
      scenario: load.scenario,
      mode,
      round,
      load: result,
      cpuMsPerRequest: per(usage.cpuMs) ?? Number.NaN,
      dbCpuMsPerRequest: per(usage.dbCpuMs),
      serverSystemPercent: usage.systemPercent,
      serverCorePercent: (100 * usage.cpuMs) / Math.max(1, result.durationS * 1000),
      rssPeakMb: usage.rssPeakMb,
      machineBusyPercent: usage.machineBusyPercent,
      loadAvg1: usage.loadAvg1,
      audit,
    };
  } finally {
    await stopChild(child, 'SIGKILL', 1_000);
  }
}

/** The one line a run leaves in the log. */
export const describeRun = (m: Measured) =>
  `  ${m.load.rps.toFixed(0)} req/s, p50 ${m.load.latencyMs.p50.toFixed(2)} ms, p99 ${m.load.latencyMs.p99.toFixed(2)} ms, ` +
  `${m.cpuMsPerRequest.toFixed(3)} CPU ms/req (+ ${m.dbCpuMsPerRequest?.toFixed(3) ?? '–'} in PostgreSQL), errors ${m.load.errors + m.load.non2xx}` +
  (m.audit ? `, audit ${m.audit.written}/${m.audit.expected}` : '');

/**
 * GET `url` in an open loop at `rate`/s beside other work, from this process: request i is due
 * at start + i/rate, its latency counted from then (no coordinated omission). The answer stops
 * it and reports the latencies and how late the sender itself was.
 */
export function probe(url: string, rate = 100) {
  const latencies: number[] = [];
  const lags: number[] = [];
  const inFlight = new Set<Promise<void>>();
  let stopped = false;
  const start = performance.now();
  const loop = (async () => {
    for (let i = 0; !stopped; i++) {
      const due = start + (i * 1000) / rate;
      if (due > performance.now()) await sleep(due - performance.now());
      if (stopped) break;
      lags.push(performance.now() - due);
      const sent: Promise<void> = fetch(url)
        .then(async (res) => {
          await res.text();
          if (res.status === 200) latencies.push(performance.now() - due);
        })
        .catch(() => undefined)
        .finally(() => inFlight.delete(sent));
      inFlight.add(sent);
    }
  })();
  return async () => {
    stopped = true;
    await loop;
    await Promise.all(inFlight);
    const { p50, p99, max } = percentiles(latencies);
    return { p50, p99, max, samples: latencies.length, sendLagP99: percentiles(lags).p99 };
  };
}
