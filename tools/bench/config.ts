import { availableParallelism } from 'node:os';

/** The benchmark's settings, from the environment (all optional but DATABASE_URL). */

const env = (name: string): string | undefined => process.env[name] || undefined;

function positive(name: string, fallback: number, integer = false): number {
  const raw = env(name);
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isFinite(value) || value <= 0 || (integer && !Number.isInteger(value))) {
    throw new Error(`${name} must be a positive ${integer ? 'integer' : 'number'}, got '${raw}'`);
  }
  return value;
}

export interface BenchConfig {
  databaseUrl: string;
  /** Measured seconds of each load run (BENCH_SECONDS, default 10). */
  seconds: number;
  /** Warm-up seconds before each measured run (BENCH_WARMUP_SECONDS, default 2, at most BENCH_SECONDS). */
  warmupSeconds: number;
  /** Rounds of the headline pair B1/S (BENCH_ROUNDS, default 3, at least 1). */
  rounds: number;
  /** Rounds of the open-loop pair B1/S (BENCH_OPEN_ROUNDS, default 5: the p99 target is a median of 5). */
  openRounds: number;
  /** Connections of the closed loop (BENCH_CONNECTIONS, default 50). */
  connections: number;
  /** Decisions of the evaluator micro-benchmark per policy set (BENCH_EVALUATOR_DECISIONS, default 200000). */
  evaluatorDecisions: number;
  /** Shared rate-limit store of the Warden under test (REDIS_URL, default redis://127.0.0.1:6379). */
  redisUrl: string;
  /** Profile mode (`--profile` or BENCH_PROFILE=1): one Warden under --cpu-prof, one load, the top functions. */
  profile: boolean;
  /** Seconds of load in profile mode (BENCH_PROFILE_SECONDS, default 10). */
  profileSeconds: number;
  /** Requests per second of an open-loop load in profile mode instead of the closed loop (BENCH_PROFILE_RATE). */
  profileRate?: number;
  /** Closed-loop B1/S rounds only, for comparing two versions of the hot path (BENCH_QUICK=1). */
  quick: boolean;
  /** The worst decisions the policy limits admit, and /health beside them, only (BENCH_WORST=1). */
  worstOnly: boolean;
  /** Open-loop B1/S rounds only, at this rate, for comparing latency (BENCH_OPEN_RATE). */
  openRate?: number;
  /**
   * Warden's server processes (BENCH_WORKERS → WARDEN_WORKERS). Default: the machine's cores
   * less one, which PostgreSQL and the load generator need on this shared machine: on 2 cores a
   * second server bought no throughput and cost CPU (docs/decisions/0007-server-processes.md).
   */
  workers: number;
  /** Open-loop runs write every request's due time and latency to test-output/bench/trace/ (BENCH_TRACE=1). */
  trace: boolean;
  /** Extra Node.js flags for the Warden under test, space-separated (BENCH_NODE_FLAGS, e.g. `--trace-gc`). */
  nodeFlags: string[];
}

export class UsageError extends Error {}

export function loadBenchConfig(argv: string[] = process.argv.slice(2)): BenchConfig {
  const databaseUrl = env('DATABASE_URL');
  if (!databaseUrl) {
    throw new UsageError(
      'DATABASE_URL is not set. `npm run bench` runs against a real PostgreSQL server: it creates a database ' +
        'warden_bench_<time> there and drops it at the end. For example:\n' +
        '  DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres npm run bench',
    );
  }
  const seconds = positive('BENCH_SECONDS', 10);
  return {
    databaseUrl,
    seconds,
    warmupSeconds: Math.min(positive('BENCH_WARMUP_SECONDS', 2), seconds),
    rounds: positive('BENCH_ROUNDS', 3, true),
    openRounds: positive('BENCH_OPEN_ROUNDS', 5, true),
    connections: positive('BENCH_CONNECTIONS', 50, true),
    evaluatorDecisions: positive('BENCH_EVALUATOR_DECISIONS', 200_000, true),
    redisUrl: env('REDIS_URL') ?? 'redis://127.0.0.1:6379',
    profile: argv.includes('--profile') || env('BENCH_PROFILE') === '1' || env('BENCH_PROFILE') === 'true',
    profileSeconds: positive('BENCH_PROFILE_SECONDS', 10),
    profileRate: env('BENCH_PROFILE_RATE') ? positive('BENCH_PROFILE_RATE', 1, true) : undefined,
    quick: env('BENCH_QUICK') === '1' || env('BENCH_QUICK') === 'true',
    worstOnly: env('BENCH_WORST') === '1' || env('BENCH_WORST') === 'true',
    openRate: env('BENCH_OPEN_RATE') ? positive('BENCH_OPEN_RATE', 1, true) : undefined,
    workers: positive('BENCH_WORKERS', Math.max(1, availableParallelism() - 1), true),
    trace: env('BENCH_TRACE') === '1' || env('BENCH_TRACE') === 'true',
    nodeFlags: (env('BENCH_NODE_FLAGS') ?? '').split(/\s+/).filter(Boolean),
  };
}
