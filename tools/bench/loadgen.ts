/**
 * The load generator, a child process of its own (so it never shares an event loop with a
 * server under test). One run per process, driven over IPC:
 *
 *   parent → { type: 'run', spec }      child warms up, drains, → { type: 'warm', rps }
 *   parent → { type: 'go', amount?, requestId }
 *                                       child measures, drains, → { type: 'result', result }
 *
 * Every request of the measured phase carries X-Request-Id: <requestId> (one UUID per run),
 * which Warden (and B1) record in the audit row: the parent counts exactly the rows of the
 * measured phase, whatever requests of the warm-up were still being finished.
 *
 * closed: autocannon, `connections` connections, pipelining 1. The warm-up runs for a
 *   duration; the measured phase sends a fixed number of requests (warm-up rate × seconds,
 *   given by the parent) so that every request sent is answered before the run ends: then
 *   the server's audit rows can be counted exactly against the 2xx answers.
 * open: a fixed-rate sender (http-sender.ts: raw keep-alive sockets, one request in flight per
 *   connection, at most 64). Request i is due at start + i/rate whatever the previous answers
 *   did; its latency runs from that due time to the end of its answer (so a stall counts in
 *   full: no coordinated omission). Waits for every answer (bounded).
 */
import { writeFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import autocannon from 'autocannon';
import { HttpSender, serialiseRequest } from './http-sender.ts';
import { fromParent } from './procs.ts';
import { percentiles } from './report.ts';

export interface RunSpec {
  mode: 'closed' | 'open';
  url: string;
  method: 'GET' | 'POST';
  headers: Record<string, string>;
  body?: string;
  /** closed: each `[<id>]` in the body becomes a fresh id per request (JSON-RPC ids within one MCP session). */
  idReplacement?: boolean;
  connections: number;
  warmupSeconds: number;
  seconds: number;
  /** open: requests per second. */
  rate?: number;
  /**
   * open: write every request of the measured phase here (due time since the phase began, latency,
   * status; tab-separated), with the phase's start as a Unix time in ms on the first line, to
   * line slow requests up with what the server logged (BENCH_TRACE=1).
   */
  traceFile?: string;
}

export interface LoadResult {
  mode: 'closed' | 'open';
  /** Answers received in the measured phase. */
  responses: number;
  ok2xx: number;
  non2xx: number;
  /** Connection errors and timeouts (no answer at all). */
  errors: number;
  statusCodes: Record<string, number>;
  durationS: number;
  /** Answers per second over the measured phase. */
  rps: number;
  latencyMs: { p50: number; p90: number; p99: number; p999: number; max: number; mean: number };
  /**
   * open only: the share of answers slower than 10 ms (the p99 target's threshold), in %. One
   * order statistic (p99) moves a lot between runs; this share says how far from the target a
   * run is, and compares two versions with more power.
   */
  over10msPercent?: number;
  /** open only: the target rate, and how late the sender itself was (its p99 lag behind schedule). */
  targetRate?: number;
  sendLagP99Ms?: number;
  /** open only: requests still unanswered when the drain timed out (counted in errors). */
  unanswered?: number;
  /** CPU time of the load generator itself during the measured phase (ms). */
  clientCpuMs?: number;
}

const DRAIN_TIMEOUT_MS = 30_000;
const REQUEST_TIMEOUT_S = 10;

function closedRun(spec: RunSpec, options: { duration?: number; amount?: number }): Promise<LoadResult> {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    let lastAnswer = started;
    const instance = autocannon(
      {
        url: spec.url,
        method: spec.method,
        headers: spec.headers,
        body: spec.body,
        connections: spec.connections,
        pipelining: 1,
        idReplacement: spec.idReplacement,
        timeout: REQUEST_TIMEOUT_S,
        sampleInt: 250,
        ...options,
      },
      (error, result) => {
        if (error) return reject(error);
        const statusCodes: Record<string, number> = {};
        let responses = 0;
        for (const [code, { count = 0 }] of Object.entries(result.statusCodeStats ?? {})) {
          statusCodes[code] = count;
          responses += count;
        }
        const durationS = (lastAnswer - started) / 1000;
        resolve({
          mode: 'closed',
          responses,
          ok2xx: result['2xx'],
          non2xx: result.non2xx,
          errors: result.errors,
          statusCodes,
          durationS,
          rps: durationS > 0 ? responses / durationS : 0,
          latencyMs: {
            p50: result.latency.p50,
            p90: result.latency.p90,
            p99: result.latency.p99,
            p999: result.latency.p99_9,
            max: result.latency.max,
            mean: result.latency.mean,
          },
        });
      },
    );
    instance.on('response', () => {
      lastAnswer = performance.now();
    });
  });
}

async function openRun(spec: RunSpec, sender: HttpSender, request: Buffer, seconds: number, traceFile?: string): Promise<LoadResult> {
  const rate = spec.rate ?? 0;
  if (!(rate > 0)) throw new Error('open loop: rate must be positive');
  const total = Math.max(1, Math.floor(seconds * rate));
  const trace = traceFile ? ['due_ms\tlatency_ms\tstatus'] : undefined;
  const interval = 1000 / rate;
  const latencies = new Float64Array(total);
  const lags = new Float64Array(total);
  const statusCodes: Record<string, number> = {};
  let answered = 0;
  let ok2xx = 0;
  let errors = 0;
  let inFlight = 0;
  let sent = 0;
  let lastAnswer = 0;
  let drained: (() => void) | undefined;

  const fire = (due: number) => {
    inFlight += 1;
    lags[sent] = performance.now() - due;
    sender.send(request, (outcome) => {
      if ('status' in outcome) {
        const now = performance.now();
        lastAnswer = now;
        latencies[answered] = now - due;
        if (trace) trace.push(`${(due - start).toFixed(3)}\t${(now - due).toFixed(3)}\t${outcome.status}`);
        answered += 1;
        statusCodes[outcome.status] = (statusCodes[outcome.status] ?? 0) + 1;
        if (outcome.status >= 200 && outcome.status < 300) ok2xx += 1;
      } else {
        errors += 1;
        if (trace) trace.push(`${(due - start).toFixed(3)}\t\terror`);
      }
      inFlight -= 1;
      if (inFlight === 0 && sent === total) drained?.();
    });
  };

  const start = performance.now() + 5;
  await new Promise<void>((allSent) => {
    const pump = () => {
      const now = performance.now();
      while (sent < total && start + sent * interval <= now) {
        fire(start + sent * interval);
        sent += 1;
      }
      if (sent < total) setTimeout(pump, Math.max(0, Math.min(1, start + sent * interval - now)));
      else allSent();
    };
    setTimeout(pump, 5);
  });
  if (inFlight > 0) {
    await new Promise<void>((resolve) => {
      drained = resolve;
      setTimeout(resolve, DRAIN_TIMEOUT_MS).unref();
    });
  }
  const unanswered = inFlight;
  const answers = latencies.subarray(0, answered);
  const durationS = ((answered > 0 ? lastAnswer : performance.now()) - start) / 1000;
  if (trace && traceFile) writeFileSync(traceFile, `# start_unix_ms ${(performance.timeOrigin + start).toFixed(1)}\n${trace.join('\n')}\n`);
  const { p50, p90, p99, p999, max, mean } = percentiles(answers);
  return {
    mode: 'open',
    responses: answered,
    ok2xx,
    non2xx: answered - ok2xx,
    errors: errors + unanswered,
    statusCodes,
    durationS,
    rps: durationS > 0 ? answered / durationS : 0,
    latencyMs: { p50, p90, p99, p999, max, mean },
    over10msPercent: (100 * answers.filter((ms) => ms > 10).length) / (answered || Number.NaN),
    targetRate: rate,
    sendLagP99Ms: percentiles(lags.subarray(0, sent)).p99,
    unanswered,
  };
}

const tagged = (spec: RunSpec, requestId: string): RunSpec => ({ ...spec, headers: { ...spec.headers, 'x-request-id': requestId } });

function cpuMsSince(start: NodeJS.CpuUsage): number {
  const used = process.cpuUsage(start);
  return (used.user + used.system) / 1000;
}

async function main(): Promise<void> {
  const { spec } = await fromParent<{ spec: RunSpec }>('run');
  let result: LoadResult;
  if (spec.mode === 'closed') {
    const warm = await closedRun(spec, { duration: spec.warmupSeconds });
    process.send?.({ type: 'warm', rps: warm.rps, warm });
    const { amount, requestId } = await fromParent<{ amount: number; requestId: string }>('go');
    const cpu = process.cpuUsage();
    result = await closedRun(tagged(spec, requestId), { amount: Math.max(amount, spec.connections) });
    result.clientCpuMs = cpuMsSince(cpu);
  } else {
    const url = new URL(spec.url);
    const request = (headers: Record<string, string>) =>
      serialiseRequest({
        origin: url.origin,
        method: spec.method,
        path: `${url.pathname}${url.search}`,
        headers,
        body: spec.body === undefined ? undefined : Buffer.from(spec.body),
      });
    const sender = new HttpSender({
      origin: url.origin,
      maxConnections: Math.max(spec.connections, 64),
      timeoutMs: REQUEST_TIMEOUT_S * 1000,
    });
    const warm = await openRun(spec, sender, request(spec.headers), spec.warmupSeconds);
    process.send?.({ type: 'warm', rps: warm.rps, warm });
    const { requestId } = await fromParent<{ requestId: string }>('go');
    const cpu = process.cpuUsage();
    result = await openRun(spec, sender, request(tagged(spec, requestId).headers), spec.seconds, spec.traceFile);
    result.clientCpuMs = cpuMsSince(cpu);
    await sender.close();
  }
  process.send?.({ type: 'result', result }, undefined, {}, () => process.exit(0));
}

process.on('disconnect', () => process.exit(0));
main().catch((error) => {
  process.stderr.write(`loadgen failed: ${(error as Error).stack}\n`);
  process.exit(1);
});
