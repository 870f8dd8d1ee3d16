/**
 * `npm run bench`: Warden against its baselines, in one run, on one machine and database.
 *
 *   B0  raw node:http answering fixed JSON (the HTTP ceiling)
 *   B1  raw node:http + one pg INSERT per request, answered after commit (the floor for
 *       "decide and durably record")
 *   S   Warden's POST /api/v1/policy/evaluate (50 policies × 10 rules, an agent key, one
 *       durable audit event per request); also POST /runtime/mcp/call (with and without an
 *       MCP session) and GET /agents?limit=100
 *
 * Order: the evaluator micro-benchmark (in-process decide()); each server primed once
 * (unmeasured); closed loop (autocannon, 50 connections) B0, (B1, S) × rounds, B0; open loop
 * at half of B1's median maximum, (B1, S) × BENCH_OPEN_ROUNDS, B0; then the other S operations. Medians
 * per target. Prints tables, then one JSON object as the last line of stdout; the JSON is
 * also written to test-output/bench/latest.json. Progress goes to stderr.
 *
 * Phases on Wardens of their own (README): the what-if replay (--only=simulate), metrics and
 * tracing on vs off (--only=observability), the MCP gateway (--only=mcp), one witness cosigning
 * every checkpoint (--only=witness).
 *
 * `npm run bench -- --profile` (or BENCH_PROFILE=1): one Warden under --cpu-prof, one
 * closed-loop evaluate load, SIGINT, and the top self-time functions of the server over the
 * load window (profile kept in test-output/bench/warden.cpuprofile).
 *
 * Settings (environment): DATABASE_URL (required), BENCH_SECONDS (10), BENCH_WARMUP_SECONDS
 * (2), BENCH_ROUNDS (3), BENCH_CONNECTIONS (50), BENCH_EVALUATOR_DECISIONS (200000),
 * REDIS_URL (redis://127.0.0.1:6379), BENCH_PROFILE_SECONDS (10). See tools/bench/README.md.
 */
import { execFileSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { cpus, freemem, loadavg, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { type CheckpointLag, measureCheckpointLag } from './checkpoint-lag.ts';
import { type BenchConfig, loadBenchConfig, UsageError } from './config.ts';
import { type BenchDatabase, createBenchDatabase, redact, serverFacts } from './database.ts';
import type { EvaluatorFigures } from './evaluator.ts';
import { benchMcpGateway, formatMcpBench, type McpBenchFigures } from './mcp-gateway.ts';
import { formatObservability, type ObservabilityFigures, observabilityBenchmark } from './observability.ts';
import { forkBench, killAllNow, memoryMb, nextMessage, ROOT, refuseNewChildren, stopAll, stopChild } from './procs.ts';
import { formatProfile, type ProfileSummary, summariseProfile } from './profile.ts';
import { formatEvaluator, formatTables, median, summarise } from './report.ts';
import { type Measured, type RunOptions, runLoad, type Scenario } from './runner.ts';
import { formatSimulate, type SimulateFigures, simulateBenchmark, simulateTargets } from './simulate.ts';
import { B1_APP_NAME, startBaseline, startMcpUpstream, startWarden, WARDEN_APP_NAME, type WardenTarget } from './targets.ts';
import { formatWitness, type WitnessFigures, witnessBenchmark, witnessTargets } from './witness.ts';
import { EVALUATE_BODY, jsonHeaders, MCP_CALL_BODY, seedWarden } from './workload.ts';
import { type InProcessFigures, seedShape, WORST_SHAPES } from './worst-case.ts';

const OUT_DIR = join(ROOT, 'test-output/bench');
/** Seconds each worst-decision shape is looped through the API, and the rate of the health probe beside it. */
const WORST_SECONDS = 3;
const HEALTH_RATE = 100;

interface WorstFigures {
  inProcess: InProcessFigures[];
  http: Array<{ shape: string; bodyBytes: number; p50: number; p99: number; rps: number }>;
  attack: string | null;
  healthAlone: number | null;
  healthUnderAttack: number | null;
}
const TRACE_DIR = join(OUT_DIR, 'trace');
const POLICIES = 50;

const log = (message: string) => process.stderr.write(`[bench] ${message}\n`);

// ---------------------------------------------------------------- cleanup, on every path

const cleanups: Array<() => Promise<void>> = [];
let cleaning: Promise<void> | undefined;
let aborted = false;

function cleanup(): Promise<void> {
  cleaning ??= (async () => {
    await stopAll().catch((error) => log(`stopping children: ${(error as Error).message}`));
    for (const step of cleanups.reverse()) {
      await step().catch((error) => log(`cleanup: ${(error as Error).message}`));
    }
  })();
  return cleaning;
}

for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
  process.once(signal, () => {
    log(`${signal}: stopping children and dropping the bench database`);
    aborted = true;
    refuseNewChildren();
    const hard = setTimeout(() => {
      killAllNow();
      process.exit(130);
    }, 30_000);
    void cleanup().finally(() => {
      clearTimeout(hard);
      process.exit(130);
    });
  });
}
process.once('exit', () => killAllNow());

// ---------------------------------------------------------------- facts

function machineInfo() {
  return {
    cores: cpus().length,
    cpuModel: cpus()[0]?.model ?? 'unknown',
    node: process.version,
    platform: `${process.platform} ${process.arch}`,
    totalMemMb: Math.round(totalmem() / 2 ** 20),
    freeMemMbAtStart: Math.round(freemem() / 2 ** 20),
    loadAvgAtStart: loadavg().map((v) => Number(v.toFixed(2))),
  };
}

/** Which code was measured: the commit and the files modified on top of it (apps/, packages/). */
function codeInfo(): { commit: string; modified: string[] } {
  const git = (args: string[]) => {
    try {
      return execFileSync('git', args, { cwd: ROOT, stdio: ['ignore', 'pipe', 'ignore'] })
        .toString()
        .trim();
    } catch {
      return '';
    }
  };
  return {
    commit: git(['rev-parse', '--short', 'HEAD']) || 'unknown',
    modified: git(['status', '--porcelain', '--', 'apps', 'packages'])
      .split('\n')
      .filter(Boolean)
      .map((line) => line.trim()),
  };
}

function reachable(url: string): Promise<boolean> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    const socket = connect(Number(port || 6379), hostname);
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(2_000, () => done(false));
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}

async function worstInProcess(): Promise<InProcessFigures[]> {
  const child = forkBench('worst-case.ts', 'worst-case');
  try {
    const { figures } = await nextMessage<{ figures: InProcessFigures[] }>(
      child,
      (m) => m?.type === 'result',
      10 * 60_000,
      'worst decisions',
    );
    return figures;
  } finally {
    await stopChild(child, 'SIGKILL', 1_000);
  }
}

async function evaluatorBenchmark(decisions: number): Promise<EvaluatorFigures[]> {
  const child = forkBench('evaluator.ts', 'evaluator', [], { BENCH_EVALUATOR_DECISIONS: String(decisions) });
  try {
    const { figures } = await nextMessage<{ figures: EvaluatorFigures[] }>(
      child,
      (m) => m?.type === 'result',
      15 * 60_000,
      'evaluator micro-benchmark',
    );
    return figures;
  } finally {
    await stopChild(child, 'SIGKILL', 1_000);
  }
}

// ---------------------------------------------------------------- the environment of a run

interface Environment {
  db: BenchDatabase;
  warden: WardenTarget;
  mcpUrl: string;
  mcpPid: number;
  sessionId: string;
  dataDir: string;
}

async function prepare(config: BenchConfig, options: { nodeFlags?: string[]; label: string; workers?: number }): Promise<Environment> {
  const db = await createBenchDatabase(config.databaseUrl);
  cleanups.push(async () => {
    await db.drop();
    log(`dropped database ${db.name}`);
  });
  log(`created database ${db.name}`);
  const dataDir = mkdtempSync(join(tmpdir(), 'warden-bench-data-'));
  cleanups.push(async () => rmSync(dataDir, { recursive: true, force: true }));
  const mcp = await startMcpUpstream();
  log(`MCP upstream at ${mcp.url} (pid ${mcp.pid})`);
  const warden = await startWarden({
    databaseUrl: db.url,
    redisUrl: config.redisUrl,
    dataDir,
    logDir: OUT_DIR,
    nodeFlags: [...config.nodeFlags, ...(options.nodeFlags ?? [])],
    workers: options.workers ?? config.workers,
    label: options.label,
  });
  cleanups.push(() => warden.stop());
  log(
    `Warden at ${warden.baseUrl} (${warden.pids.length > 1 ? `supervisor pid ${warden.pid}, servers ${warden.pids.slice(1).join(', ')}` : `server pid ${warden.pid}`}; log ${warden.logFile})`,
  );
  const seeded = await seedWarden(warden.baseUrl, warden.key, mcp.url, POLICIES);
  log(`seeded: ${POLICIES} policies × 10 rules, 100 agents, MCP server 'tools', session ${seeded.sessionId}`);
  return { db, warden, mcpUrl: mcp.url, mcpPid: mcp.pid, sessionId: seeded.sessionId, dataDir };
}

// ---------------------------------------------------------------- the full benchmark

async function benchmark(config: BenchConfig): Promise<void> {
  const startedAt = new Date().toISOString();
  const machine = machineInfo();
  const code = codeInfo();
  mkdirSync(OUT_DIR, { recursive: true });
  if (machine.loadAvgAtStart[0] !== undefined && machine.loadAvgAtStart[0] > machine.cores * 0.5) {
    log(
      `warning: load average ${machine.loadAvgAtStart.join(' ')} on ${machine.cores} cores: other work on this machine will disturb the figures`,
    );
  }
  const redisUp = await reachable(config.redisUrl);
  if (!redisUp) log(`warning: ${config.redisUrl} does not answer: Warden's rate limiter will count in memory (its insurance)`);

  log(`evaluator micro-benchmark (${config.evaluatorDecisions} decisions per set)…`);
  const evaluator = config.worstOnly ? [] : await evaluatorBenchmark(config.evaluatorDecisions);
  // the what-if replay on a Warden of its own, before the others start (not in the A/B modes)
  const simulate = config.quick || config.worstOnly || config.openRate ? null : await simulatePhase(config);
  // metrics and tracing on vs off, also on Wardens of their own
  const observability = config.quick || config.worstOnly || config.openRate ? null : await observabilityPhase(config);

  const env = await prepare(config, { label: 'warden' });
  const postgres = await serverFacts(env.db.pool);
  const b0 = await startBaseline('b0', env.db.url);
  const b1 = await startBaseline('b1', env.db.url);
  log(`B0 at ${b0.origin} (pid ${b0.pid}), B1 at ${b1.origin} (pid ${b1.pid})`);

  const headers = jsonHeaders(env.warden.key);
  const body = JSON.stringify(EVALUATE_BODY);
  const scenarios: Record<string, Scenario> = {
    B0: { target: 'B0', scenario: 'evaluate', pids: [b0.pid], url: `${b0.origin}/api/v1/policy/evaluate`, method: 'POST', headers, body },
    B1: {
      target: 'B1',
      scenario: 'evaluate',
      pids: [b1.pid],
      dbApplication: B1_APP_NAME,
      url: `${b1.origin}/api/v1/policy/evaluate`,
      method: 'POST',
      headers,
      body,
      audit: { table: 'bench_audit_events', perOk: 1 },
    },
    S: {
      target: 'S',
      scenario: 'evaluate',
      pids: env.warden.pids,
      dbApplication: WARDEN_APP_NAME,
      url: `${env.warden.baseUrl}/policy/evaluate`,
      method: 'POST',
      headers,
      body,
      audit: { table: 'audit_events', perOk: 1 },
    },
    agents: {
      target: 'S',
      scenario: 'agents_list',
      pids: env.warden.pids,
      dbApplication: WARDEN_APP_NAME,
      url: `${env.warden.baseUrl}/agents?limit=100`,
      method: 'GET',
      headers: { authorization: headers.authorization },
    },
    mcpSession: {
      target: 'S',
      scenario: 'mcp_call_session',
      pids: env.warden.pids,
      dbApplication: WARDEN_APP_NAME,
      url: `${env.warden.baseUrl}/runtime/mcp/call`,
      method: 'POST',
      headers,
      body: JSON.stringify(MCP_CALL_BODY(env.sessionId)),
      audit: { table: 'audit_events', perOk: 2 }, // the decision and the execution's outcome
    },
    mcpOneShot: {
      target: 'S',
      scenario: 'mcp_call_no_session',
      pids: env.warden.pids,
      dbApplication: WARDEN_APP_NAME,
      url: `${env.warden.baseUrl}/runtime/mcp/call`,
      method: 'POST',
      headers,
      body: JSON.stringify(MCP_CALL_BODY(undefined)),
      audit: { table: 'audit_events', perOk: 2 },
    },
  };

  const runs: Measured[] = [];
  const failures: Array<{ run: string; error: string }> = [];
  const base: Omit<RunOptions, 'round' | 'rate'> = {
    connections: config.connections,
    warmupSeconds: config.warmupSeconds,
    seconds: config.seconds,
    pool: env.db.pool,
    traceDir: config.trace ? TRACE_DIR : undefined,
  };
  if (config.trace) {
    rmSync(TRACE_DIR, { recursive: true, force: true });
    mkdirSync(TRACE_DIR, { recursive: true });
  }
  const run = (key: string, mode: 'closed' | 'open', round: number, rate?: number) => runOne(key, mode, { round, rate });
  async function runOne(key: string, mode: 'closed' | 'open', options: Partial<RunOptions> = {}): Promise<Measured | undefined> {
    const scenario = scenarios[key] as Scenario;
    const { round = 1, rate } = options;
    const label = `${scenario.target} ${scenario.scenario} ${mode}${rate ? ` @${Math.round(rate)}/s` : ''} (round ${round})`;
    if (aborted) throw new Error('aborted');
    log(`${label}…`);
    try {
      const measured = await runLoad(scenario, mode, { ...base, round, ...options });
      runs.push(measured);
      const l = measured.load;
      log(
        `  ${l.rps.toFixed(0)} req/s, p50 ${l.latencyMs.p50.toFixed(2)} ms, p99 ${l.latencyMs.p99.toFixed(2)} ms, ` +
          `${measured.cpuMsPerRequest.toFixed(3)} CPU ms/req (+ ${measured.dbCpuMsPerRequest?.toFixed(3) ?? '–'} in PostgreSQL), errors ${l.errors + l.non2xx}` +
          (measured.audit ? `, audit ${measured.audit.written}/${measured.audit.expected}` : ''),
      );
      return measured;
    } catch (error) {
      if (aborted) throw error;
      log(`  FAILED: ${(error as Error).message}`);
      failures.push({ run: label, error: (error as Error).message });
      return undefined;
    }
  }
  const worst: WorstFigures = { inProcess: [], http: [], attack: null, healthAlone: null, healthUnderAttack: null };
  let mcp = null as McpBenchFigures | null;

  // 0. prime each server once (JIT, caches, pools), unmeasured, so round 1 is not a cold start
  const primeSeconds = Math.min(5, config.seconds);
  for (const key of config.worstOnly ? [] : ['B0', 'B1', 'S']) {
    if (aborted) throw new Error('aborted');
    const scenario = scenarios[key] as Scenario;
    log(`priming ${scenario.target} (${primeSeconds} s closed loop, not counted)…`);
    const primed = await runLoad(scenario, 'closed', { ...base, warmupSeconds: 1, seconds: primeSeconds, round: 0 }).catch(
      (error: Error) => {
        if (aborted) throw error;
        log(`  priming failed: ${error.message}`);
        return undefined;
      },
    );
    if (primed) log(`  ${primed.load.rps.toFixed(0)} req/s`);
  }

  // 1. closed loop, interleaved: B0, (B1, S) × rounds, B0 (not with BENCH_OPEN_RATE)
  // The wall-clock windows of S's closed-loop runs: the checkpoint lag is read for their events.
  const sClosedWindows: Array<[Date, Date]> = [];
  let checkpointLag: CheckpointLag | null = null;
  if (!config.openRate && !config.worstOnly) {
    await run('B0', 'closed', 1);
    for (let round = 1; round <= config.rounds; round++) {
      await run('B1', 'closed', round);
      const from = new Date();
      await run('S', 'closed', round);
      sClosedWindows.push([from, new Date()]);
    }
    await run('B0', 'closed', 2);
    checkpointLag = await measureCheckpointLag(env.db.pool, sClosedWindows).catch((error: Error) => {
      log(`checkpoint lag: FAILED: ${error.message}`);
      return null;
    });
    if (checkpointLag) {
      log(
        `checkpoint lag of S's ${checkpointLag.events} events: p50 ${checkpointLag.p50Ms} ms, p99 ${checkpointLag.p99Ms} ms, max ${checkpointLag.maxMs} ms` +
          `${checkpointLag.uncovered ? `; ${checkpointLag.uncovered} not yet in a checkpoint` : ''}`,
      );
    }
  }

  // 2. open loop at half of B1's maximum (or BENCH_OPEN_RATE), interleaved: (B1, S) × open rounds, B0
  const b1Max = median(runs.filter((m) => m.target === 'B1' && m.scenario === 'evaluate' && m.mode === 'closed').map((m) => m.load.rps));
  const halfRate = config.openRate ?? (Number.isFinite(b1Max) && b1Max > 0 ? Math.max(10, Math.round(b1Max / 2)) : 100);
  if (!config.quick && !config.worstOnly) await latencyAndOtherOperations();
  async function latencyAndOtherOperations() {
    for (let round = 1; round <= config.openRounds; round++) {
      await run('B1', 'open', round, halfRate);
      await run('S', 'open', round, halfRate);
    }
    if (config.openRate) return;
    await run('B0', 'open', 1, halfRate);

    // 3. the other operations of S: closed, then open at half of their own maximum
    for (const key of ['agents', 'mcpSession', 'mcpOneShot']) {
      const closed = await run(key, 'closed', 1);
      const rate = closed && closed.load.rps > 0 ? Math.max(5, Math.round(closed.load.rps / 2)) : undefined;
      if (rate) await run(key, 'open', 1, rate);
    }
    mcp = await mcpBenchmark(config, env);

    await worstDecisions();
  }

  async function worstDecisions() {
    // 4. the worst decisions the limits admit: each shape in a workspace of its own, one client
    // looping its decisions; then GET /health at a fixed rate, alone and while one client loops
    // the shape slowest through the API
    log('worst decisions: in-process…');
    worst.inProcess = await worstInProcess();
    for (const f of worst.inProcess) log(`  ${f.shape}: p50 ${f.ms.p50} ms, p99 ${f.ms.p99} ms, max ${f.ms.max} ms (${f.outcome})`);
    for (const shape of WORST_SHAPES) {
      const seeded = await seedShape(env.warden.baseUrl, env.db.url, shape);
      const key = `worst_${shape.name}`;
      scenarios[key] = {
        target: 'S',
        scenario: key,
        pids: env.warden.pids,
        dbApplication: WARDEN_APP_NAME,
        url: `${env.warden.baseUrl}/policy/evaluate`,
        method: 'POST',
        headers: { authorization: `Bearer ${seeded.key}`, 'content-type': 'application/json' },
        body: seeded.body,
      };
      const looped = await runOne(key, 'closed', { connections: 1, warmupSeconds: 1, seconds: WORST_SECONDS });
      if (looped) worst.http.push({ shape: shape.name, bodyBytes: seeded.body.length, ...looped.load.latencyMs, rps: looped.load.rps });
    }
    const slowest = [...worst.http].sort((a, b) => b.p50 - a.p50)[0];
    scenarios.health = {
      target: 'S',
      scenario: 'health',
      pids: env.warden.pids,
      url: `${env.warden.baseUrl}/health`,
      method: 'GET',
      headers: {},
    };
    worst.healthAlone = (await runOne('health', 'open', { rate: HEALTH_RATE }))?.load.latencyMs.p99 ?? null;
    if (slowest) {
      worst.attack = slowest.shape;
      const [health] = await Promise.all([
        runOne('health', 'open', { rate: HEALTH_RATE }),
        runOne(`worst_${slowest.shape}`, 'closed', {
          connections: 1,
          warmupSeconds: config.warmupSeconds + 1,
          seconds: config.seconds + 1,
        }),
      ]);
      worst.healthUnderAttack = health?.load.latencyMs.p99 ?? null;
    }
  }
  if (config.worstOnly) await worstDecisions();

  const wardenHwm = (() => {
    try {
      return env.warden.pids.reduce((sum, pid) => sum + memoryMb(pid).hwm, 0);
    } catch {
      return Number.NaN;
    }
  })();

  log('stopping the servers…');
  await cleanup();

  const summaries = summarise(runs);
  const find = (target: string, scenario: string, mode: 'closed' | 'open') =>
    summaries.find((s) => s.target === target && s.scenario === scenario && s.mode === mode);
  const s = find('S', 'evaluate', 'closed');
  const b1s = find('B1', 'evaluate', 'closed');
  const b0s = find('B0', 'evaluate', 'closed');
  const sOpen = find('S', 'evaluate', 'open');
  const b1Open = find('B1', 'evaluate', 'open');
  const ratio = (a: number | null | undefined, b: number | null | undefined) => (a && b ? Number((a / b).toFixed(3)) : null);
  const sRuns = runs.filter((m) => m.target === 'S' && m.scenario === 'evaluate');
  const ev50 = evaluator.find((f) => f.policies === 50);
  // Each round's S against the B1 run just before it: robust to load that drifts between rounds.
  const closedEvaluate = (target: string, round: number) =>
    runs.find((m) => m.target === target && m.scenario === 'evaluate' && m.mode === 'closed' && m.round === round);
  const perRound: number[] = [];
  for (let round = 1; round <= config.rounds; round++) {
    const pair = [closedEvaluate('S', round), closedEvaluate('B1', round)];
    if (pair[0] && pair[1]) perRound.push(Number((pair[0].load.rps / pair[1].load.rps).toFixed(3)));
  }
  const headline = {
    s_over_b1_rps: ratio(s?.rps.median, b1s?.rps.median),
    s_over_b1_rps_per_round: perRound,
    s_over_b1_rps_median_of_rounds: perRound.length ? Number(median(perRound).toFixed(3)) : null,
    s_over_b0_rps: ratio(s?.rps.median, b0s?.rps.median),
    b1_over_b0_rps: ratio(b1s?.rps.median, b0s?.rps.median),
    s_rps: s?.rps.median ?? null,
    b1_rps: b1s?.rps.median ?? null,
    b0_rps: b0s?.rps.median ?? null,
    open_rate: halfRate,
    s_p50_ms: sOpen?.latencyMs.p50 ?? null,
    s_p99_ms: sOpen?.latencyMs.p99 ?? null,
    b1_p50_ms: b1Open?.latencyMs.p50 ?? null,
    b1_p99_ms: b1Open?.latencyMs.p99 ?? null,
    s_p99_over_b1_p99: ratio(sOpen?.latencyMs.p99, b1Open?.latencyMs.p99),
    checkpoint_lag_p50_ms: checkpointLag?.p50Ms ?? null,
    checkpoint_lag_p99_ms: checkpointLag?.p99Ms ?? null,
    checkpoint_lag_uncovered: checkpointLag?.uncovered ?? null,
    s_over_10ms_percent: sOpen?.over10msPercent ?? null,
    b1_over_10ms_percent: b1Open?.over10msPercent ?? null,
    s_cpu_ms_per_req: s?.cpuMsPerRequest ?? null,
    b1_cpu_ms_per_req: b1s?.cpuMsPerRequest ?? null,
    s_over_b1_cpu_per_req: ratio(s?.cpuMsPerRequest, b1s?.cpuMsPerRequest),
    s_db_cpu_ms_per_req: s?.dbCpuMsPerRequest ?? null,
    b1_db_cpu_ms_per_req: b1s?.dbCpuMsPerRequest ?? null,
    s_rss_peak_mb: Math.max(...sRuns.map((m) => m.rssPeakMb)),
    s_errors: sRuns.reduce((a, m) => a + m.load.errors + m.load.non2xx, 0),
    s_audit_rows_ok: sRuns.every((m) => m.audit?.ok === true),
    evaluator_p50_us_50x10: ev50?.perDecisionUs.p50 ?? null,
    worst_decision_p50_ms: worst.inProcess.length ? Math.max(...worst.inProcess.map((f) => f.ms.p50)) : null,
    worst_decision_p99_ms: worst.inProcess.length ? Math.max(...worst.inProcess.map((f) => f.ms.p99)) : null,
    worst_decision_http_p50_ms: worst.http.length ? Math.max(...worst.http.map((f) => f.p50)) : null,
    health_p99_ms_alone: worst.healthAlone,
    health_p99_ms_under_worst_decisions: worst.healthUnderAttack,
    simulate_median_ms: simulate?.realistic.medianMs ?? null,
    simulate_heavy_median_ms: simulate?.heavy.medianMs ?? null,
    simulate_health_p99_ms: simulate ? Math.max(simulate.realistic.health.p99, simulate.heavy.health.p99) : null,
    observability_on_over_off: observability?.relative ?? null,
  };
  const targets = {
    's_over_b1 >= 0.9 (Merkle sealing on)': headline.s_over_b1_rps !== null && headline.s_over_b1_rps >= 0.9,
    'checkpoint lag p99 <= 2 s (closed loop)':
      headline.checkpoint_lag_p99_ms !== null && headline.checkpoint_lag_p99_ms <= 2000 && headline.checkpoint_lag_uncovered === 0,
    'S p99 <= 2 x B1 p99 (open loop at half of B1 max, medians)': headline.s_p99_over_b1_p99 !== null && headline.s_p99_over_b1_p99 <= 2,
    'no errors (S evaluate)': headline.s_errors === 0,
    'no lost audit rows (S evaluate)': headline.s_audit_rows_ok,
    'evaluator p50 <= 10 us (50 x 10)': headline.evaluator_p50_us_50x10 !== null && headline.evaluator_p50_us_50x10 <= 10,
    'worst admitted decision <= 5 ms (in-process p99, every shape)':
      headline.worst_decision_p99_ms !== null && headline.worst_decision_p99_ms <= 5,
    'GET /health p99 <= 20 ms while one client loops the worst decision':
      headline.health_p99_ms_under_worst_decisions !== null && headline.health_p99_ms_under_worst_decisions <= 20,
    ...mcp?.targets,
    ...(simulate ? simulateTargets(simulate) : {}),
    ...(observability ? { 'S/B1 with metrics and tracing on >= 0.9 x with both off': observability.relative >= 0.9 } : {}),
  };

  const result = {
    benchmark: 'warden',
    version: 1,
    startedAt,
    finishedAt: new Date().toISOString(),
    machine: {
      ...machine,
      loadAvgAtEnd: loadavg().map((v) => Number(v.toFixed(2))),
      postgres,
      redis: { url: config.redisUrl, reachable: redisUp },
    },
    config: {
      seconds: config.seconds,
      warmupSeconds: config.warmupSeconds,
      rounds: config.rounds,
      connections: config.connections,
      policies: `${POLICIES} x 10`,
      database: env.db.name,
      wardenEnv: {
        NODE_ENV: 'production',
        WARDEN_RATE_LIMIT_PER_MINUTE: '100000000',
        REDIS_URL: config.redisUrl,
        WARDEN_EGRESS_ALLOWLIST: '127.0.0.1/32',
        validateResponses: false,
      },
      wardenCommand: 'npx tsx apps/server/src/main.ts',
      wardenWorkers: config.workers,
      wardenProcessTree: env.warden.tree,
      requestBody: EVALUATE_BODY,
    },
    code,
    headline,
    targets,
    evaluator,
    worst,
    mcp,
    simulate,
    observability,
    summaries,
    wardenPeakRssMbOverall: Number.isFinite(wardenHwm) ? Number(wardenHwm.toFixed(1)) : null,
    runs: runs.map((m) => ({ ...m, load: { ...m.load } })),
    failures,
  };

  const out: string[] = [];
  out.push('');
  out.push(`Warden benchmark — ${startedAt}`);
  if ((machine.loadAvgAtStart[0] ?? 0) > machine.cores * 0.5) {
    out.push(
      `WARNING: load average ${machine.loadAvgAtStart.join(' ')} at start on ${machine.cores} cores: other work shared this machine; the figures are disturbed (see loadAvg1 per run in the JSON)`,
    );
  }
  out.push(
    `machine: ${machine.cores} cores (${machine.cpuModel}), node ${machine.node}, ${machine.totalMemMb} MB RAM, load average at start ${machine.loadAvgAtStart.join(' ')}, at end ${result.machine.loadAvgAtEnd.join(' ')}`,
  );
  out.push(
    `postgres: ${postgres.version}, synchronous_commit=${postgres.synchronous_commit}, fsync=${postgres.fsync}; database ${env.db.name} (${redact(config.databaseUrl).replace(/\/[^/]*$/, '/…')}), dropped at the end`,
  );
  out.push(
    `Warden: npx tsx apps/server/src/main.ts, WARDEN_WORKERS=${config.workers} (${config.workers > 1 ? `a supervisor and ${config.workers} server processes; CPU and RSS summed over all` : 'one process'}), NODE_ENV=production (no response validation), rate limit 100000000/min in Redis at ${config.redisUrl}${redisUp ? '' : ' (NOT REACHABLE: in-memory insurance)'}`,
  );
  out.push(
    `load: ${config.connections} connections closed loop; ${config.warmupSeconds} s warm-up + ${config.seconds} s measured per run; ${config.rounds} rounds B1/S interleaved`,
  );
  out.push(
    `code: commit ${code.commit}${code.modified.length ? ` + ${code.modified.length} modified/new paths under apps/ packages/ (listed in the JSON)` : ', clean'}`,
  );
  out.push(`same body for B0/B1/S: ${JSON.stringify(EVALUATE_BODY)}`);
  out.push('');
  out.push(`Evaluator micro-benchmark (in-process decide(), per call):`);
  out.push(formatEvaluator(evaluator));
  out.push('');
  out.push(formatTables(summaries));
  out.push('');
  out.push('Headline (medians):');
  out.push(`  S/B1 requests/s = ${headline.s_over_b1_rps}   (S ${headline.s_rps}/s, B1 ${headline.b1_rps}/s; target ≥ 0.9)`);
  out.push(
    `  S/B1 per round (S against the B1 run just before it): ${perRound.join(', ')}; median ${headline.s_over_b1_rps_median_of_rounds}`,
  );
  out.push(`  S/B0 requests/s = ${headline.s_over_b0_rps}   (B0 ${headline.b0_rps}/s)`);
  out.push(
    `  open loop at ${halfRate}/s (${config.openRate ? 'BENCH_OPEN_RATE' : "half of B1's max"}, ${config.openRounds} rounds): S p50 ${headline.s_p50_ms} ms, p99 ${headline.s_p99_ms} ms, ${headline.s_over_10ms_percent} % over 10 ms; B1 p50 ${headline.b1_p50_ms} ms, p99 ${headline.b1_p99_ms} ms, ${headline.b1_over_10ms_percent} % over 10 ms (target S p99 ≤ 2 × B1 p99: ${headline.s_p99_over_b1_p99} ×)`,
  );
  out.push(
    `  checkpoint lag (an event's write to the first signed checkpoint covering it, S's closed-loop events): p50 ${headline.checkpoint_lag_p50_ms} ms, p99 ${headline.checkpoint_lag_p99_ms} ms (target ≤ 2 s)`,
  );
  out.push(
    `  CPU per request: S ${headline.s_cpu_ms_per_req} ms, B1 ${headline.b1_cpu_ms_per_req} ms (S/B1 ${headline.s_over_b1_cpu_per_req}); ` +
      `in their PostgreSQL backends: S ${headline.s_db_cpu_ms_per_req} ms, B1 ${headline.b1_db_cpu_ms_per_req} ms`,
  );
  out.push(
    `  S errors ${headline.s_errors}; audit rows == 2xx in every S run: ${headline.s_audit_rows_ok}; Warden peak RSS ${headline.s_rss_peak_mb.toFixed(0)} MB`,
  );
  out.push(`  evaluator p50 ${headline.evaluator_p50_us_50x10} µs per decision with 50 × 10 rules (target ≤ 10 µs)`);
  if (worst.inProcess.length) {
    out.push('  worst decisions the limits admit (1,000 rules each; in-process decide(), then through the API with one client):');
    for (const f of worst.inProcess) {
      const http = worst.http.find((h) => h.shape === f.shape);
      out.push(
        `    ${f.shape.padEnd(14)} in-process p50 ${f.ms.p50} ms, p99 ${f.ms.p99} ms, max ${f.ms.max} ms (${f.outcome}); ` +
          `API p50 ${http?.p50.toFixed(2) ?? '–'} ms, p99 ${http?.p99.toFixed(2) ?? '–'} ms (body ${http?.bodyBytes ?? '–'} B) — ${f.what}`,
      );
    }
    out.push(
      `  GET /health at ${HEALTH_RATE}/s: p99 ${worst.healthAlone} ms alone, ${worst.healthUnderAttack} ms while one client loops '${worst.attack}' (target ≤ 20 ms)`,
    );
  }
  if (mcp) out.push(...formatMcpBench(mcp));
  if (simulate) out.push(formatSimulate(simulate));
  if (observability) out.push(...formatObservability(observability));
  out.push('Targets:');
  for (const [name, ok] of Object.entries(targets)) out.push(`  ${ok ? 'PASS' : 'FAIL'}  ${name}`);
  if (failures.length) {
    out.push('Failed runs:');
    for (const f of failures) out.push(`  ${f.run}: ${f.error}`);
  }
  out.push(`(JSON also in ${join(OUT_DIR, 'latest.json')}; Warden log in ${env.warden.logFile})`);
  const json = JSON.stringify(result);
  writeFileSync(join(OUT_DIR, 'latest.json'), `${JSON.stringify(result, null, 2)}\n`);
  process.stdout.write(`${out.join('\n')}\n${json}\n`);
  if (failures.length) process.exitCode = 1;
}

// ---------------------------------------------------------------- the MCP gateway (issue 23)

function mcpBenchmark(config: BenchConfig, env: Environment): Promise<McpBenchFigures | null> {
  return benchMcpGateway({
    baseUrl: env.warden.baseUrl,
    key: env.warden.key,
    wardenPids: env.warden.pids,
    upstreamUrl: env.mcpUrl,
    upstreamPid: env.mcpPid,
    pool: env.db.pool,
    connections: config.connections,
    warmupSeconds: config.warmupSeconds,
    seconds: config.seconds,
    rounds: config.rounds,
    log,
  }).catch((error: Error) => {
    if (aborted) throw error;
    log(`MCP benchmark FAILED: ${error.message}`);
    return null;
  });
}

/** `npm run bench -- --only=mcp`: the MCP scenario alone, on a Warden of its own. */
async function mcpOnly(config: BenchConfig): Promise<void> {
  const env = await prepare(config, { label: 'warden-mcp' });
  const figures = await mcpBenchmark(config, env);
  // SIGINT, waited for: a server under BENCH_NODE_FLAGS=--cpu-prof writes its profile as it exits
  await env.warden.stop('SIGINT');
  await cleanup();
  if (!figures) {
    process.exitCode = 1;
    return;
  }
  writeFileSync(join(OUT_DIR, 'mcp-latest.json'), `${JSON.stringify({ code: codeInfo(), ...figures }, null, 2)}\n`);
  process.stdout.write(
    `${formatMcpBench(figures).join('\n')}\n${JSON.stringify({ benchmark: 'warden-mcp', code: codeInfo(), ...figures })}\n`,
  );
}

// ---------------------------------------------------------------- the what-if replay (issue 25)

function simulatePhase(config: BenchConfig): Promise<SimulateFigures | null> {
  log('what-if replay (POST /policies/simulate) on a Warden of its own…');
  return simulateBenchmark(config, (step) => cleanups.push(step), log).catch((error: Error) => {
    if (aborted) throw error;
    log(`what-if replay benchmark FAILED: ${error.message}`);
    return null;
  });
}

// ---------------------------------------------------------------- metrics and tracing (issue 26)

function observabilityPhase(config: BenchConfig): Promise<ObservabilityFigures | null> {
  log('metrics and tracing on vs off (two Wardens of their own, beside B1)…');
  return observabilityBenchmark(config, (step) => cleanups.push(step), log).catch((error: Error) => {
    if (aborted) throw error;
    log(`metrics and tracing benchmark FAILED: ${error.message}`);
    return null;
  });
}

/** `npm run bench -- --only=observability`: the metrics and tracing overhead alone. */
async function observabilityOnly(config: BenchConfig): Promise<void> {
  const machine = machineInfo();
  const figures = await observabilityPhase(config);
  await cleanup();
  if (!figures) {
    process.exitCode = 1;
    return;
  }
  const targets = { 'S/B1 with metrics and tracing on >= 0.9 x with both off': figures.relative >= 0.9 };
  const result = { benchmark: 'warden-observability', code: codeInfo(), machine, ...figures, targets };
  writeFileSync(join(OUT_DIR, 'observability-latest.json'), `${JSON.stringify(result, null, 2)}\n`);
  const lines = [
    ...formatObservability(figures),
    'Targets:',
    ...Object.entries(targets).map(([name, ok]) => `  ${ok ? 'PASS' : 'FAIL'}  ${name}`),
  ];
  process.stdout.write(`${lines.join('\n')}\n${JSON.stringify(result)}\n`);
}

// ---------------------------------------------------------------- a witness cosigning (issue 36)

/** `npm run bench -- --only=witness`: one witness's cost, on two Wardens of their own. */
async function witnessOnly(config: BenchConfig): Promise<void> {
  const machine = machineInfo();
  log('one witness on vs none (two Wardens of their own, beside B1)…');
  const figures: WitnessFigures | null = await witnessBenchmark(config, (step) => cleanups.push(step), log).catch((error: Error) => {
    if (aborted) throw error;
    log(`witness benchmark FAILED: ${error.message}`);
    return null;
  });
  await cleanup();
  if (!figures) {
    process.exitCode = 1;
    return;
  }
  const targets = witnessTargets(figures);
  const result = { benchmark: 'warden-witness', code: codeInfo(), machine, ...figures, targets };
  writeFileSync(join(OUT_DIR, 'witness-latest.json'), `${JSON.stringify(result, null, 2)}\n`);
  const lines = [
    ...formatWitness(figures),
    'Targets:',
    ...Object.entries(targets).map(([name, ok]) => `  ${ok ? 'PASS' : 'FAIL'}  ${name}`),
  ];
  process.stdout.write(`${lines.join('\n')}\n${JSON.stringify(result)}\n`);
}

/** `npm run bench -- --only=simulate`: the what-if replay alone. */
async function simulateOnly(config: BenchConfig): Promise<void> {
  const machine = machineInfo();
  const figures = await simulatePhase(config);
  await cleanup();
  if (!figures) {
    process.exitCode = 1;
    return;
  }
  const targets = simulateTargets(figures);
  const result = { benchmark: 'warden-simulate', code: codeInfo(), machine, ...figures, targets };
  writeFileSync(join(OUT_DIR, 'simulate-latest.json'), `${JSON.stringify(result, null, 2)}\n`);
  const lines = [formatSimulate(figures), 'Targets:', ...Object.entries(targets).map(([name, ok]) => `  ${ok ? 'PASS' : 'FAIL'}  ${name}`)];
  process.stdout.write(`${lines.join('\n')}\n${JSON.stringify(result)}\n`);
}

// ---------------------------------------------------------------- profile mode

async function profile(config: BenchConfig): Promise<void> {
  mkdirSync(OUT_DIR, { recursive: true });
  const code = codeInfo();
  const profDir = mkdtempSync(join(tmpdir(), 'warden-cpu-prof-'));
  cleanups.push(async () => rmSync(profDir, { recursive: true, force: true }));
  // One server process: one profile.
  const env = await prepare(config, { nodeFlags: ['--cpu-prof', `--cpu-prof-dir=${profDir}`], label: 'warden-profiled', workers: 1 });
  const headers = jsonHeaders(env.warden.key);
  const scenario: Scenario = {
    target: 'S',
    scenario: 'evaluate',
    pids: env.warden.pids,
    dbApplication: WARDEN_APP_NAME,
    url: `${env.warden.baseUrl}/policy/evaluate`,
    method: 'POST',
    headers,
    body: JSON.stringify(EVALUATE_BODY),
    audit: { table: 'audit_events', perOk: 1 },
  };
  const window = { startUs: 0, endUs: 0 };
  const mode = config.profileRate ? 'open' : 'closed';
  const load = config.profileRate ? `open-loop evaluate load at ${config.profileRate}/s` : 'closed-loop evaluate load';
  log(`profiling: ${config.warmupSeconds} s warm-up + ${config.profileSeconds} s ${load}, server pid ${env.warden.pid}`);
  const measured = await runLoad(scenario, mode, {
    connections: config.connections,
    rate: config.profileRate,
    warmupSeconds: config.warmupSeconds,
    seconds: config.profileSeconds,
    round: 1,
    pool: env.db.pool,
    onMeasure: (phase, us) => {
      if (phase === 'start') window.startUs = us;
      else window.endUs = us;
    },
  });
  log(`  ${measured.load.rps.toFixed(0)} req/s under the profiler; SIGINT to the server so it writes its profile…`);
  const serverPid = env.warden.pid;
  await env.warden.stop('SIGINT');
  // CPU.<date>.<time>.<pid>.<thread>.<seq>.cpuprofile: the server's main thread is thread 0.
  const file = readdirSync(profDir).find((name) => {
    const parts = name.split('.');
    return name.endsWith('.cpuprofile') && parts[3] === String(serverPid) && parts[4] === '0';
  });
  if (!file) throw new Error(`no .cpuprofile of pid ${serverPid} in ${profDir} (found: ${readdirSync(profDir).join(', ') || 'nothing'})`);
  const kept = join(OUT_DIR, 'warden.cpuprofile');
  copyFileSync(join(profDir, file), kept);
  const summary: ProfileSummary = summariseProfile(kept, window, 15);
  writeFileSync(join(OUT_DIR, 'profile-summary.json'), `${JSON.stringify({ code, summary, load: measured }, null, 2)}\n`);
  await cleanup();
  const out = [
    '',
    `Warden (commit ${code.commit}${code.modified.length ? ` + ${code.modified.length} modified` : ''}) under --cpu-prof: ${measured.load.rps.toFixed(0)} req/s, ` +
      `${measured.cpuMsPerRequest.toFixed(3)} CPU ms/req (${measured.serverSystemPercent.toFixed(0)}% in the kernel; profiler overhead included), ` +
      `+ ${measured.dbCpuMsPerRequest?.toFixed(3) ?? '–'} ms/req in its PostgreSQL backends, audit ${measured.audit?.written}/${measured.audit?.expected}`,
    formatProfile(summary),
    `(profile kept in ${kept}; open it in Chrome DevTools → Performance, or speedscope)`,
  ];
  process.stdout.write(
    `${out.join('\n')}\n${JSON.stringify({ benchmark: 'warden-profile', code, summary, load: measured.load, cpuMsPerRequest: measured.cpuMsPerRequest })}\n`,
  );
}

// ---------------------------------------------------------------- main

async function main(): Promise<void> {
  let config: BenchConfig;
  try {
    config = loadBenchConfig();
  } catch (error) {
    process.stderr.write(`${(error as Error).message}\n`);
    process.exit(error instanceof UsageError ? 2 : 1);
  }
  const only = process.argv.find((arg) => arg.startsWith('--only='))?.slice('--only='.length) ?? process.env.BENCH_ONLY;
  if (only !== undefined && !['mcp', 'simulate', 'observability', 'witness'].includes(only)) {
    process.stderr.write(`--only: unknown scenario '${only}' (known: mcp, simulate, observability, witness)\n`);
    process.exit(2);
  }
  if (!existsSync('/proc/self/stat')) {
    process.stderr.write('npm run bench reads /proc for CPU time and memory: it runs on Linux only\n');
    process.exit(2);
  }
  try {
    mkdirSync(OUT_DIR, { recursive: true });
    if (config.profile) await profile(config);
    else if (only === 'mcp') await mcpOnly(config);
    else if (only === 'simulate') await simulateOnly(config);
    else if (only === 'observability') await observabilityOnly(config);
    else if (only === 'witness') await witnessOnly(config);
    else await benchmark(config);
  } catch (error) {
    log(`failed: ${(error as Error).stack ?? error}`);
    process.exitCode = 1;
  } finally {
    await cleanup();
  }
}

await main();
