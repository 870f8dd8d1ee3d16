/**
 * The what-if replay (issue 25): POST /policies/simulate over 100,000 recorded decisions,
 * against its target (≤ 2 s), and GET /health beside it (a replay must not hold other requests
 * up); then four full audit verifications of those events (issue 36), GET /health beside them. A phase of `npm run bench`, or alone: `npm run bench -- --only simulate`.
 *
 * A Warden of its own (one server process, so that the health probe reaches the process that
 * replays) on a database of its own; 20 agents and the live policies through the API; the
 * recorded decisions with COPY by the scale benchmark's seeder (scale-seed.ts), sealed by the
 * server before anything is timed. Then: GET /health alone; one unmeasured replay (it starts
 * the replay thread); BENCH_SIMULATE_RUNS replays of a realistic draft, and as many of a heavy
 * one, each with GET /health sent beside it in an open loop at HEALTH_RATE/s.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { Agent, request } from 'undici';
import type { BenchConfig } from './config.ts';
import { createBenchDatabase } from './database.ts';
import { cpuMs, ROOT, sleep } from './procs.ts';
import { median } from './report.ts';
import { type SeedAgent, seedAuditEvents } from './scale-seed.ts';
import { startWarden } from './targets.ts';
import { benchPolicies } from './workload.ts';

const OUT_DIR = join(ROOT, 'test-output/bench');
export const SIMULATE_TARGET_MS = 2_000;
export const HEALTH_TARGET_MS = 20;
const HEALTH_RATE = 100;
/** Full audit verifications measured (issue 36: another tenant's GET /health p99 under 50 ms beside four). */
const FULL_VERIFICATIONS = 4;
export const VERIFY_HEALTH_TARGET_MS = 50;
const ENVIRONMENTS = ['production', 'production', 'staging', 'development'] as const;

const positive = (name: string, fallback: number) => {
  const value = Number(process.env[name] || fallback);
  if (!Number.isInteger(value) || value <= 0) throw new Error(`${name} must be a positive integer`);
  return value;
};

/** What the workspace enforces while the decisions are recorded (as the scale benchmark's workspace). */
const LIVE_POLICIES = [
  { name: 'destructive-actions', priority: 100, rules: [{ id: 'r0', match: { action: ['*.delete', 'db.*.drop'] }, effect: 'block' }] },
  {
    name: 'payments-guard',
    priority: 99,
    rules: [{ id: 'r0', match: { action: ['payments.*'] }, condition: 'context.amount > 1000', effect: 'require_approval' }],
  },
  { name: 'baseline-allow', priority: 1, rules: [{ id: 'r0', match: { action: ['*'] }, effect: 'allow' }] },
];

/**
 * A realistic draft: the live set, changed as an admin would try it — a lower payments
 * threshold, approvals for production deploys, secrets blocked, a monitor-only condition on
 * e-mail, and MCP merges needing approval.
 */
export const REALISTIC_DRAFT = [
  LIVE_POLICIES[0],
  {
    name: 'payments-guard',
    priority: 99,
    rules: [{ id: 'r0', match: { action: ['payments.*'] }, condition: 'context.amount > 500', effect: 'require_approval' }],
  },
  {
    name: 'deploy-approvals',
    priority: 98,
    rules: [{ id: 'prod', match: { action: ['deploy.*'], environment: ['production'] }, effect: 'require_approval' }],
  },
  {
    name: 'secrets',
    priority: 97,
    rules: [{ id: 'no-secrets', match: { action: ['secrets.*'], resource: ['secrets/*'] }, effect: 'block' }],
  },
  {
    name: 'mail-watch',
    mode: 'monitor',
    priority: 96,
    rules: [{ id: 'big-mail', match: { action: ['email.send'] }, condition: 'context.amount > 4000', effect: 'block' }],
  },
  { name: 'merges', priority: 95, rules: [{ id: 'merge', match: { action: ['mcp.*.merge_*'] }, effect: 'require_approval' }] },
  LIVE_POLICIES[2],
];

/** GET /health in an open loop: latency from each request's due time (ms), and the sender's own lateness. */
export interface HealthFigures {
  p50: number;
  p99: number;
  max: number;
  samples: number;
  sendLagP99: number;
}

export interface ReplayFigures {
  /** Round trip of each measured replay (ms). */
  ms: number[];
  medianMs: number;
  /** duration_ms as the server reports it. */
  serverMedianMs: number;
  /** CPU time of the server process (all its threads) per replay. */
  serverCpuMedianMs: number;
  /** Decisions the draft decides otherwise than the live policies (its effect). */
  changed: number;
  /** Decisions the live policies decide otherwise than recorded (drift, not the draft's). */
  drifted: number;
  /** GET /health beside the replays: p50, p99, max (ms) and the answers counted. */
  health: HealthFigures;
}

export interface SimulateFigures {
  decisions: number;
  seedSeconds: number;
  sealSeconds: number | null;
  firstReplayMs: number;
  healthAlone: HealthFigures;
  realistic: ReplayFigures;
  heavy: ReplayFigures;
  /** GET /audit/verify?full=true over the same log, FULL_VERIFICATIONS times, one after another (the server runs them one at a time). */
  verify: { ms: number[]; medianMs: number; serverCpuMedianMs: number; health: HealthFigures };
  loadAvgAtStart: number[];
  loadAvgAtEnd: number[];
}

const percentile = (sorted: number[], p: number) =>
  sorted.length ? (sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] as number) : Number.NaN;
const round = (value: number) => Number(value.toFixed(2));

/** GET /health in an open loop: request i is due at start + i/rate, its latency counted from then (no coordinated omission). */
function healthProbe(url: string, dispatcher: Agent) {
  const latencies: number[] = [];
  /** How late each request left this process (a busy machine delays the sender too; then the latency says less about the server). */
  const lags: number[] = [];
  let stopped = false;
  const start = performance.now();
  const inFlight = new Set<Promise<void>>();
  const loop = (async () => {
    for (let i = 0; !stopped; i++) {
      const due = start + (i * 1000) / HEALTH_RATE;
      const wait = due - performance.now();
      if (wait > 0) await sleep(wait);
      if (stopped) break;
      lags.push(performance.now() - due);
      const sent: Promise<void> = request(url, { dispatcher })
        .then(async (res) => {
          await res.body.text();
          if (res.statusCode === 200) latencies.push(performance.now() - due);
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
    const sorted = [...latencies].sort((a, b) => a - b);
    const lag = [...lags].sort((a, b) => a - b);
    return {
      p50: round(percentile(sorted, 50)),
      p99: round(percentile(sorted, 99)),
      max: round(sorted.at(-1) ?? Number.NaN),
      samples: sorted.length,
      sendLagP99: round(percentile(lag, 99)),
    };
  };
}

/** Runs the phase; everything it starts is also handed to `register` (stopped on Ctrl-C) and stopped at its end. */
export async function simulateBenchmark(
  config: BenchConfig,
  register: (cleanup: () => Promise<void>) => void,
  log: (message: string) => void,
): Promise<SimulateFigures> {
  const decisions = positive('BENCH_SIMULATE_DECISIONS', 100_000);
  const runs = positive('BENCH_SIMULATE_RUNS', 5);
  const loadAvgAtStart = loadavg().map((v) => round(v));
  const steps: Array<() => Promise<void>> = [];
  const own = (step: () => Promise<void>) => {
    let done: Promise<void> | undefined;
    const once = () => (done ??= step());
    steps.push(once);
    register(once);
  };
  const dispatcher = new Agent({ headersTimeout: 0, bodyTimeout: 0, connections: 8 });
  own(() => dispatcher.close());
  try {
    const db = await createBenchDatabase(config.databaseUrl, `warden_bench_simulate_${process.pid}`);
    own(async () => {
      await db.drop();
      log(`dropped database ${db.name}`);
    });
    const dataDir = mkdtempSync(join(tmpdir(), 'warden-bench-simulate-'));
    own(async () => rmSync(dataDir, { recursive: true, force: true }));
    const warden = await startWarden({
      databaseUrl: db.url,
      redisUrl: config.redisUrl,
      dataDir,
      logDir: OUT_DIR,
      nodeFlags: config.nodeFlags,
      label: 'warden-simulate',
      workers: 1,
    });
    own(() => warden.stop());
    log(`simulate: Warden at ${warden.baseUrl} (server pid ${warden.pid}; log ${warden.logFile}), database ${db.name}`);
    const call = async (method: 'GET' | 'POST', path: string, body?: unknown) => {
      const res = await request(`${warden.baseUrl}${path}`, {
        method,
        headers: { authorization: `Bearer ${warden.key}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
        body: body === undefined ? undefined : JSON.stringify(body),
        dispatcher,
      });
      const text = await res.body.text();
      if (res.statusCode >= 300) throw new Error(`${method} ${path} answered ${res.statusCode}: ${text.slice(0, 400)}`);
      return JSON.parse(text);
    };

    // ---- the workspace, through the API
    const agents: SeedAgent[] = [];
    for (let i = 1; i <= 20; i++) {
      const n = String(i).padStart(2, '0');
      const environment = ENVIRONMENTS[i % ENVIRONMENTS.length] as string;
      const created = await call('POST', '/agents', {
        name: `Replay agent ${n}`,
        slug: `scale-agent-${n}`,
        provider: i % 2 ? 'anthropic' : 'openai',
        environment,
        ...(i % 5 === 0 ? { allowed_tools: ['reader', 'writer', 'sql', 'stripe', 'create_issue'] } : {}),
      });
      agents.push({ id: created.data.id, slug: created.data.slug, environment });
    }
    for (const policy of LIVE_POLICIES) await call('POST', '/policies', policy);
    const { rows } = await db.pool.query('SELECT workspace_id FROM agents WHERE id = $1', [agents[0]?.id]);
    const workspaceId = rows[0]?.workspace_id as string;

    // ---- the recorded decisions: COPY, then sealed by the server itself
    const seeder = new pg.Client({ connectionString: db.url, application_name: 'bench-simulate-seed' });
    await seeder.connect();
    const seedStart = Date.now();
    await seedAuditEvents(seeder, workspaceId, agents, decisions, { eventsPerDay: decisions, endMs: seedStart - 1_000 }).finally(() =>
      seeder.end(),
    );
    const seedSeconds = (Date.now() - seedStart) / 1000;
    log(
      `simulate: ${decisions.toLocaleString('en')} decisions seeded in ${seedSeconds.toFixed(1)} s; waiting for the server to seal them…`,
    );
    const sealStart = Date.now();
    let sealSeconds: number | null = null;
    for (;;) {
      const queued = await db.pool.query('SELECT count(*)::int AS n FROM audit_unsealed WHERE workspace_id = $1', [workspaceId]);
      if (queued.rows[0].n === 0) {
        sealSeconds = (Date.now() - sealStart) / 1000;
        break;
      }
      if (Date.now() - sealStart > 600_000) {
        log(`simulate: warning: ${queued.rows[0].n} events still unsealed after 600 s; measuring beside the sealer`);
        break;
      }
      await sleep(1_000);
    }
    await db.pool.query('VACUUM (ANALYZE) audit_events');
    log(`simulate: sealed in ${sealSeconds?.toFixed(1) ?? '>600'} s`);

    // ---- GET /health alone
    const stopAlone = healthProbe(`${warden.baseUrl}/health`, dispatcher);
    await sleep(3_000);
    const healthAlone = await stopAlone();

    const replay = async (policies: unknown) => {
      const cpuBefore = cpuMs(warden.pid);
      const started = performance.now();
      const body = await call('POST', '/policies/simulate', { policies, limit: decisions });
      const ms = performance.now() - started;
      if (body.data.replayed !== decisions) throw new Error(`the replay replayed ${body.data.replayed} decisions, not ${decisions}`);
      return {
        ms,
        serverMs: body.data.duration_ms as number,
        cpu: cpuMs(warden.pid) - cpuBefore,
        changed: body.data.changed as number,
        drifted: body.data.drift.changed as number,
      };
    };
    const first = await replay(REALISTIC_DRAFT);
    log(`simulate: first replay (starts the replay thread) ${first.ms.toFixed(0)} ms`);

    const measure = async (name: string, policies: unknown): Promise<ReplayFigures> => {
      const done: Array<Awaited<ReturnType<typeof replay>>> = [];
      const stopProbe = healthProbe(`${warden.baseUrl}/health`, dispatcher);
      for (let i = 0; i < runs; i++) {
        const r = await replay(policies);
        done.push(r);
        log(
          `simulate: ${name} ${i + 1}/${runs}: ${r.ms.toFixed(0)} ms (server ${r.serverMs} ms, server CPU ${r.cpu.toFixed(0)} ms), load ${loadavg()[0]?.toFixed(1)}`,
        );
      }
      const health = await stopProbe();
      return {
        ms: done.map((r) => Math.round(r.ms)),
        medianMs: Math.round(median(done.map((r) => r.ms))),
        serverMedianMs: Math.round(median(done.map((r) => r.serverMs))),
        serverCpuMedianMs: Math.round(median(done.map((r) => r.cpu))),
        changed: done[0]?.changed ?? 0,
        drifted: done[0]?.drifted ?? 0,
        health,
      };
    };
    const realistic = await measure('realistic draft', REALISTIC_DRAFT);
    const heavy = await measure('heavy draft (50 policies × 10 rules)', benchPolicies(50));

    // ---- issue 36: four full verifications of the same log, GET /health beside them
    const verifications: Array<{ ms: number; cpu: number }> = [];
    const stopVerifyProbe = healthProbe(`${warden.baseUrl}/health`, dispatcher);
    for (let i = 0; i < FULL_VERIFICATIONS; i++) {
      const cpuBefore = cpuMs(warden.pid);
      const started = performance.now();
      const body = await call('GET', '/audit/verify?full=true');
      const ms = performance.now() - started;
      if (!body.data.valid || body.data.checked < decisions) throw new Error(`a full verification answered ${JSON.stringify(body.data)}`);
      verifications.push({ ms, cpu: cpuMs(warden.pid) - cpuBefore });
      log(
        `simulate: full verification ${i + 1}/${FULL_VERIFICATIONS}: ${ms.toFixed(0)} ms (server CPU ${(cpuMs(warden.pid) - cpuBefore).toFixed(0)} ms)`,
      );
    }
    const verify = {
      ms: verifications.map((v) => Math.round(v.ms)),
      medianMs: Math.round(median(verifications.map((v) => v.ms))),
      serverCpuMedianMs: Math.round(median(verifications.map((v) => v.cpu))),
      health: await stopVerifyProbe(),
    };
    return {
      verify,
      decisions,
      seedSeconds,
      sealSeconds,
      firstReplayMs: Math.round(first.ms),
      healthAlone,
      realistic,
      heavy,
      loadAvgAtStart,
      loadAvgAtEnd: loadavg().map((v) => round(v)),
    };
  } finally {
    for (const step of steps.reverse()) await step().catch((error) => log(`simulate cleanup: ${(error as Error).message}`));
  }
}

export function simulateTargets(f: SimulateFigures | null): Record<string, boolean> {
  return {
    [`POST /policies/simulate, 100,000 decisions, median ≤ ${SIMULATE_TARGET_MS} ms (realistic draft)`]:
      f !== null && f.realistic.medianMs <= SIMULATE_TARGET_MS,
    [`GET /health p99 ≤ ${HEALTH_TARGET_MS} ms while replays run`]:
      f !== null && f.realistic.health.p99 <= HEALTH_TARGET_MS && f.heavy.health.p99 <= HEALTH_TARGET_MS,
    [`GET /health p99 ≤ ${VERIFY_HEALTH_TARGET_MS} ms while ${FULL_VERIFICATIONS} full audit verifications run`]:
      f !== null && f.verify.health.p99 <= VERIFY_HEALTH_TARGET_MS,
  };
}

export function formatSimulate(f: SimulateFigures): string {
  const line = (name: string, r: ReplayFigures) =>
    `  ${name}: median ${r.medianMs} ms round trip (runs ${r.ms.join(', ')}), server ${r.serverMedianMs} ms, server CPU ${r.serverCpuMedianMs} ms; ` +
    `${r.changed.toLocaleString('en')} changed by the draft, ${r.drifted.toLocaleString('en')} drifted; GET /health beside it p50 ${r.health.p50} ms, p99 ${r.health.p99} ms, max ${r.health.max} ms (${r.health.samples} answers; sender late by up to ${r.health.sendLagP99} ms at p99)`;
  return [
    `What-if replay (POST /policies/simulate, limit ${f.decisions.toLocaleString('en')}; one server process; load average ${f.loadAvgAtStart.join(' ')} at start, ${f.loadAvgAtEnd.join(' ')} at end):`,
    `  seeded ${f.decisions.toLocaleString('en')} decisions in ${f.seedSeconds.toFixed(1)} s, sealed in ${f.sealSeconds?.toFixed(1) ?? '–'} s; first replay ${f.firstReplayMs} ms (starts the replay thread)`,
    `  GET /health at ${HEALTH_RATE}/s alone: p50 ${f.healthAlone.p50} ms, p99 ${f.healthAlone.p99} ms, max ${f.healthAlone.max} ms (sender late by up to ${f.healthAlone.sendLagP99} ms at p99)`,
    line(`realistic draft (${REALISTIC_DRAFT.length} policies)`, f.realistic),
    line('heavy draft (50 × 10 rules, conditions on most actions)', f.heavy),
    `  target: realistic median ≤ ${SIMULATE_TARGET_MS} ms; health p99 ≤ ${HEALTH_TARGET_MS} ms beside the replays`,
    `  ${FULL_VERIFICATIONS} full audit verifications (GET /audit/verify?full=true) of the ${f.decisions.toLocaleString('en')} events: median ${f.verify.medianMs} ms (runs ${f.verify.ms.join(', ')}), server CPU ${f.verify.serverCpuMedianMs} ms; ` +
      `GET /health beside them p50 ${f.verify.health.p50} ms, p99 ${f.verify.health.p99} ms, max ${f.verify.health.max} ms (target p99 ≤ ${VERIFY_HEALTH_TARGET_MS} ms)`,
  ].join('\n');
}
