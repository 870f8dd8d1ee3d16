/**
 * The MCP benchmark's load generator (a child process of its own, driven over IPC by
 * mcp-gateway.ts). Three ways to make the same tool call (`echo` on the bench upstream):
 *
 *   direct   the official SDK Client on the upstream itself (one session)
 *   relay    the same Client through a bare reverse proxy (mcp-relay.ts): one more hop, nothing else
 *   gateway  the official SDK Client on Warden's /api/v1/mcp/<slug> (the agent key as the bearer)
 *   runtime  POST /api/v1/runtime/mcp/call (fetch, keep-alive; no governed session)
 *
 * parent → { type: 'sequential', spec }   warm-up, then `calls` rounds of one call of each way,
 *                                          the order rotated every round → { type: 'sequential-result' }
 * parent → { type: 'concurrent', spec }   one way, `connections` calls in flight: warm-up, then
 *                                          → { type: 'measuring' }, the parent answers { type: 'go' }
 *                                          (it reads the servers' CPU), measured seconds, drain,
 *                                          → { type: 'concurrent-result' }
 */
import { performance } from 'node:perf_hooks';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

export type Way = 'direct' | 'relay' | 'gateway' | 'runtime';
export const WAYS: readonly Way[] = ['direct', 'relay', 'gateway', 'runtime'];
/** The ways compared with direct. */
export type Indirect = Exclude<Way, 'direct'>;
const INDIRECT: readonly Indirect[] = ['relay', 'gateway', 'runtime'];

export interface Targets {
  directUrl: string;
  relayUrl: string;
  gatewayUrl: string;
  gatewayHeaders: Record<string, string>;
  runtimeUrl: string;
  runtimeHeaders: Record<string, string>;
  runtimeBody: string;
  tool: string;
  arguments: Record<string, unknown>;
}

export interface Percentiles {
  p50: number;
  p90: number;
  p99: number;
  max: number;
  mean: number;
}

export interface SequentialResult {
  calls: number;
  warmup: number;
  ms: Record<Way, Percentiles>;
  /** Per round, relay − direct, gateway − direct and runtime − direct (the same round's calls): their percentiles. */
  pairedAddedMs: Record<Indirect, Percentiles>;
  errors: Record<Way, number>;
  /** The measured rounds' start and end, process.hrtime in µs (CLOCK_MONOTONIC: a server's --cpu-prof window). */
  windowUs: { startUs: number; endUs: number };
}

export interface ConcurrentResult {
  way: Way;
  connections: number;
  calls: number;
  errors: number;
  durationS: number;
  rps: number;
  ms: Percentiles;
  /** CPU time of this generator over the measured phase (ms). */
  clientCpuMs: number;
  /** Calls that succeeded in all phases (warm-up and drain too): what the audit log must hold. */
  succeeded: number;
}

const hrtimeUs = () => Number(process.hrtime.bigint() / 1000n);

const percentiles = (values: number[]): Percentiles => {
  const sorted = Float64Array.from(values).sort();
  const at = (q: number) =>
    sorted.length ? (sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))] as number) : Number.NaN;
  const round = (v: number) => Number(v.toFixed(3));
  const mean = sorted.length ? sorted.reduce((a, b) => a + b, 0) / sorted.length : Number.NaN;
  return { p50: round(at(0.5)), p90: round(at(0.9)), p99: round(at(0.99)), max: round(at(1)), mean: round(mean) };
};

/**
 * The SDK transport's fetch, with the transport's long-lived abort signal kept off its POSTs.
 * On Node 20, undici's fetch leaves one abort listener on that signal per request answered
 * with an SSE stream (1,701 after 40 rounds of 50 concurrent calls on the bench upstream), and
 * each one past the limit prints a warning: 26,967 warnings in one run, a cost of the direct
 * and relay ways only (the gateway answers JSON). GETs, the one long-lived stream, keep the
 * signal, so close() still ends them; no POST is in flight when a client closes.
 */
const withoutLeakingListeners: typeof fetch = (input, init) =>
  fetch(input, init?.method === 'POST' ? { ...init, signal: undefined } : init);

async function sdkClient(url: string, headers: Record<string, string>): Promise<Client> {
  const client = new Client({ name: 'warden-bench', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers }, fetch: withoutLeakingListeners }));
  return client;
}

/** One call of each way, as a function that throws unless the tool ran. */
async function callers(
  targets: Targets,
  requestId?: string,
): Promise<{ call: Record<Way, () => Promise<void>>; close: () => Promise<void> }> {
  const tag: Record<string, string> = requestId ? { 'x-request-id': requestId } : {};
  const direct = await sdkClient(targets.directUrl, {});
  const relay = await sdkClient(targets.relayUrl, {});
  const gateway = await sdkClient(targets.gatewayUrl, { ...targets.gatewayHeaders, ...tag });
  const params = { name: targets.tool, arguments: targets.arguments };
  const viaSdk = (client: Client) => async () => {
    const result = await client.callTool(params);
    if (result.isError) throw new Error(`tool error: ${JSON.stringify(result.content).slice(0, 300)}`);
  };
  const runtimeHeaders = { ...targets.runtimeHeaders, ...tag };
  return {
    call: {
      direct: viaSdk(direct),
      relay: viaSdk(relay),
      gateway: viaSdk(gateway),
      runtime: async () => {
        const res = await fetch(targets.runtimeUrl, { method: 'POST', headers: runtimeHeaders, body: targets.runtimeBody });
        const text = await res.text();
        if (res.status !== 200) throw new Error(`runtime answered ${res.status}: ${text.slice(0, 300)}`);
        const body = JSON.parse(text) as { data?: { allowed?: boolean; execution?: { isError?: boolean } } };
        if (body.data?.allowed !== true || body.data.execution?.isError !== false)
          throw new Error(`runtime call not executed: ${text.slice(0, 300)}`);
      },
    },
    close: async () => {
      await Promise.allSettled([direct.close(), relay.close(), gateway.close()]);
    },
  };
}

async function sequential(targets: Targets, spec: { warmup: number; calls: number }): Promise<SequentialResult> {
  const { call, close } = await callers(targets);
  try {
    const samples: Record<Way, number[]> = { direct: [], relay: [], gateway: [], runtime: [] };
    const errors: Record<Way, number> = { direct: 0, relay: 0, gateway: 0, runtime: 0 };
    const paired: Record<Indirect, number[]> = { relay: [], gateway: [], runtime: [] };
    const windowUs = { startUs: 0, endUs: 0 };
    for (let round = 0; round < spec.warmup + spec.calls; round++) {
      const measured = round >= spec.warmup;
      if (round === spec.warmup) windowUs.startUs = hrtimeUs();
      const took: Partial<Record<Way, number>> = {};
      // the order rotates, so that no way is always first after the others (or after a pause)
      for (let i = 0; i < WAYS.length; i++) {
        const way = WAYS[(round + i) % WAYS.length] as Way;
        const started = performance.now();
        try {
          await call[way]();
          took[way] = performance.now() - started;
        } catch (error) {
          if (!measured) throw error;
          errors[way] += 1;
        }
      }
      if (!measured) continue;
      for (const way of WAYS) if (took[way] !== undefined) samples[way].push(took[way] as number);
      const direct = took.direct;
      if (direct !== undefined) for (const way of INDIRECT) if (took[way] !== undefined) paired[way].push((took[way] as number) - direct);
    }
    return {
      calls: spec.calls,
      warmup: spec.warmup,
      ms: {
        direct: percentiles(samples.direct),
        relay: percentiles(samples.relay),
        gateway: percentiles(samples.gateway),
        runtime: percentiles(samples.runtime),
      },
      pairedAddedMs: { relay: percentiles(paired.relay), gateway: percentiles(paired.gateway), runtime: percentiles(paired.runtime) },
      errors,
      windowUs: { ...windowUs, endUs: hrtimeUs() },
    };
  } finally {
    await close();
  }
}

const cpuNow = () => {
  const usage = process.cpuUsage();
  return (usage.user + usage.system) / 1000;
};

function waitFor(type: string): Promise<void> {
  return new Promise((resolve) => {
    const onMessage = (message: { type?: string }) => {
      if (message?.type !== type) return;
      process.off('message', onMessage);
      resolve();
    };
    process.on('message', onMessage);
  });
}

async function concurrent(
  targets: Targets,
  spec: { way: Way; connections: number; warmupSeconds: number; seconds: number; requestId: string },
): Promise<ConcurrentResult> {
  const { call, close } = await callers(targets, spec.requestId);
  const run = call[spec.way];
  try {
    let phase: 'warmup' | 'measure' | 'drain' = 'warmup';
    const latencies: number[] = [];
    let errors = 0;
    let succeeded = 0;
    let firstError: unknown;
    const worker = async () => {
      while (phase !== 'drain') {
        const started = performance.now();
        try {
          await run();
          succeeded += 1;
          // the calls answered inside the measured phase count (a closed loop's throughput)
          if (phase === 'measure') latencies.push(performance.now() - started);
        } catch (error) {
          firstError ??= error;
          if (phase === 'measure') errors += 1;
          // a way that fails while warming up is broken: the run stops (reported below)
          if (phase === 'warmup') return;
        }
      }
    };
    const workers = Array.from({ length: spec.connections }, worker);
    await new Promise((resolve) => setTimeout(resolve, spec.warmupSeconds * 1000));
    if (firstError) {
      phase = 'drain';
      await Promise.allSettled(workers);
      throw new Error(`${spec.way} failed while warming up: ${(firstError as Error).message}`);
    }
    process.send?.({ type: 'measuring' });
    await waitFor('go');
    phase = 'measure';
    const cpu0 = cpuNow();
    const started = performance.now();
    await new Promise((resolve) => setTimeout(resolve, spec.seconds * 1000));
    const durationS = (performance.now() - started) / 1000;
    phase = 'drain';
    const clientCpuMs = cpuNow() - cpu0;
    const calls = latencies.length;
    process.send?.({ type: 'measured' });
    await Promise.allSettled(workers);
    if (calls === 0 && firstError) throw firstError;
    return {
      way: spec.way,
      connections: spec.connections,
      calls,
      errors,
      durationS: Number(durationS.toFixed(3)),
      rps: Number((calls / durationS).toFixed(1)),
      ms: percentiles(latencies),
      clientCpuMs: Number(clientCpuMs.toFixed(0)),
      succeeded,
    };
  } finally {
    await close();
  }
}

process.on('message', (message: { type?: string; targets?: Targets; spec?: never }) => {
  const reply = (type: string, work: Promise<unknown>) =>
    work.then(
      (result) => process.send?.({ type, result }),
      (error: Error) => process.send?.({ type: 'error', error: error.stack ?? String(error) }),
    );
  if (message?.type === 'sequential') void reply('sequential-result', sequential(message.targets as Targets, message.spec as never));
  if (message?.type === 'concurrent') void reply('concurrent-result', concurrent(message.targets as Targets, message.spec as never));
});
process.on('disconnect', () => process.exit(0));
