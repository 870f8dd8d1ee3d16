/**
 * One measured load run against one server: fork a load generator, let it warm up, then
 * measure the server's CPU time (/proc/<pid>/stat), its RSS (sampled VmRSS) and the machine's
 * busy time over the measured phase only, and count the audit rows it wrote against its 2xx
 * answers (the rows carrying the phase's X-Request-Id).
 */
import { randomUUID } from 'node:crypto';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import type pg from 'pg';
import { backendPids } from './database.ts';
import type { LoadResult, RunSpec } from './loadgen.ts';
import { cpuMs, cpuTimes, forkBench, machineTicks, memoryMb, nextMessage, stopChild } from './procs.ts';

export interface Scenario {
  /** Target label in the report: B0, B1, S, S-mcp, … */
  target: string;
  /** What is asked: evaluate, mcp_call, agents_list, … */
  scenario: string;
  /** The server's processes (one, or a supervisor and its workers): their CPU time and RSS are summed. */
  pids: number[];
  url: string;
  method: 'GET' | 'POST';
  headers: Record<string, string>;
  body?: string;
  /** application_name of the server's PostgreSQL sessions: their CPU time is read too. */
  dbApplication?: string;
  /** Rows the server writes per 2xx answer into `table` (exact check), if any. */
  audit?: { table: string; perOk: number };
}

export interface AuditCheck {
  table: string;
  written: number;
  expected: number;
  ok: boolean;
}

export interface Measured {
  target: string;
  scenario: string;
  mode: 'closed' | 'open';
  round: number;
  load: LoadResult;
  serverCpuMs: number;
  cpuMsPerRequest: number;
  /** Share of the server's CPU time spent in the kernel (system time: socket I/O mostly). */
  serverSystemPercent: number;
  /**
   * CPU time of the server's PostgreSQL backends (by application_name, the sessions open when
   * the phase began) per answer; WAL writer, checkpointer and Redis are not in it.
   */
  dbCpuMsPerRequest: number | null;
  dbBackends: number;
  /** Server CPU as a share of one core over the measured phase. */
  serverCorePercent: number;
  rssPeakMb: number;
  /** The whole machine's busy share (all cores) over the measured phase. */
  machineBusyPercent: number;
  /** The machine's 1-minute load average when the measured phase began (other work disturbs the figures). */
  loadAvg1: number;
  audit?: AuditCheck;
}

export interface RunOptions {
  connections: number;
  warmupSeconds: number;
  seconds: number;
  rate?: number;
  round: number;
  pool: pg.Pool;
  /** Open loop: write each request's due time, latency and status to a file in this folder (BENCH_TRACE). */
  traceDir?: string;
  /** Called when the measured phase starts/ends, with process.hrtime in µs (profile windows). */
  onMeasure?: (phase: 'start' | 'end', hrtimeUs: number) => void;
}

/** CPU ms of a process, or undefined when it is gone. */
const totalRss = (pids: number[]) => pids.reduce((sum, pid) => sum + memoryMb(pid).rss, 0);

function totalCpuTimes(pids: number[]): { user: number; system: number } {
  return pids.map(cpuTimes).reduce((a, b) => ({ user: a.user + b.user, system: a.system + b.system }));
}

function safeCpuMs(pid: number): number | undefined {
  try {
    return cpuMs(pid);
  } catch {
    return undefined;
  }
}

const nowUs = () => Number(process.hrtime.bigint() / 1000n);

/** Rows of the measured phase: its requests all carried X-Request-Id: requestId, recorded in each row. */
async function taggedRows(pool: pg.Pool, table: string, requestId: string): Promise<number> {
  const { rows } = await pool.query(`SELECT count(*)::bigint AS n FROM ${table} WHERE request_id = $1`, [requestId]);
  return Number(rows[0].n);
}

export async function runLoad(scenario: Scenario, mode: 'closed' | 'open', options: RunOptions): Promise<Measured> {
  const spec: RunSpec = {
    mode,
    url: scenario.url,
    method: scenario.method,
    headers: scenario.headers,
    body: scenario.body,
    connections: options.connections,
    warmupSeconds: options.warmupSeconds,
    seconds: options.seconds,
    rate: options.rate,
    traceFile:
      mode === 'open' && options.traceDir
        ? join(options.traceDir, `${scenario.target}-${scenario.scenario}-round${options.round}.tsv`)
        : undefined,
  };
  const what = `${scenario.target} ${scenario.scenario} ${mode}`;
  const child = forkBench('loadgen.ts', `load ${scenario.target}`);
  let sampler: NodeJS.Timeout | undefined;
  try {
    child.send({ type: 'run', spec });
    const warm = await nextMessage<{ rps: number }>(
      child,
      (m) => m?.type === 'warm',
      (options.warmupSeconds * 3 + 60) * 1000,
      `${what} (warm-up)`,
    );
    let rssPeak = totalRss(scenario.pids);
    sampler = setInterval(() => {
      try {
        rssPeak = Math.max(rssPeak, totalRss(scenario.pids));
      } catch {
        // the process is gone: the run fails below
      }
    }, 100);
    const loadAvg1 = Number((loadavg()[0] ?? 0).toFixed(2));
    const backends = scenario.dbApplication ? await backendPids(options.pool, scenario.dbApplication) : [];
    const db0 = new Map(backends.map((pid) => [pid, safeCpuMs(pid)]));
    const times0 = totalCpuTimes(scenario.pids);
    const machine0 = machineTicks();
    options.onMeasure?.('start', nowUs());
    // closed: as many requests as the warm-up rate gives in `seconds` (every one answered before the end)
    const amount = mode === 'closed' ? Math.max(options.connections, Math.round(warm.rps * options.seconds)) : undefined;
    const requestId = randomUUID();
    child.send({ type: 'go', amount, requestId });
    const { result } = await nextMessage<{ result: LoadResult }>(
      child,
      (m) => m?.type === 'result',
      (options.seconds * 4 + 90) * 1000,
      `${what} (measured)`,
    );
    options.onMeasure?.('end', nowUs());
    const times1 = totalCpuTimes(scenario.pids);
    let dbCpuMs = 0;
    for (const [pid, before] of db0) dbCpuMs += Math.max(0, (safeCpuMs(pid) ?? before ?? 0) - (before ?? 0));
    const machine1 = machineTicks();
    clearInterval(sampler);
    rssPeak = Math.max(rssPeak, totalRss(scenario.pids));
    let audit: AuditCheck | undefined;
    if (scenario.audit) {
      // Every request of the phase was answered, so every row it stands for is committed.
      const written = await taggedRows(options.pool, scenario.audit.table, requestId);
      const expected = result.ok2xx * scenario.audit.perOk;
      audit = { table: scenario.audit.table, written, expected, ok: written === expected };
    }
    const serverSystemMs = times1.system - times0.system;
    const serverCpuMs = times1.user - times0.user + serverSystemMs;
    const elapsed = machine1.total - machine0.total;
    return {
      target: scenario.target,
      scenario: scenario.scenario,
      mode,
      round: options.round,
      load: result,
      serverCpuMs,
      cpuMsPerRequest: result.responses ? serverCpuMs / result.responses : Number.NaN,
      serverSystemPercent: serverCpuMs > 0 ? (100 * serverSystemMs) / serverCpuMs : Number.NaN,
      dbCpuMsPerRequest: backends.length && result.responses ? dbCpuMs / result.responses : null,
      dbBackends: backends.length,
      serverCorePercent: result.durationS > 0 ? (100 * serverCpuMs) / (result.durationS * 1000) : Number.NaN,
      rssPeakMb: rssPeak,
      machineBusyPercent: elapsed > 0 ? (100 * (machine1.busy - machine0.busy)) / elapsed : Number.NaN,
      loadAvg1,
      audit,
    };
  } finally {
    if (sampler) clearInterval(sampler);
    await stopChild(child, 'SIGKILL', 1_000);
  }
}
