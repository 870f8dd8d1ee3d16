/** The benchmark's settings, from the environment and the command line (tools/bench/README.md). */
import { availableParallelism } from 'node:os';

export class UsageError extends Error {}

const env = (name: string): string | undefined => process.env[name] || undefined;
const flag = (name: string) => env(name) === '1' || env(name) === 'true';

/** A positive number from the environment (an integer when `integer`), or the fallback. */
export function positive(name: string, fallback: number, integer = true): number {
  const raw = env(name);
  if (raw === undefined) return fallback;
  const value = Number(raw);
  if (!Number.isFinite(value) || value <= 0 || (integer && !Number.isInteger(value)))
    throw new UsageError(`${name} must be a positive ${integer ? 'integer' : 'number'}, got '${raw}'`);
  return value;
}

export interface BenchConfig {
  databaseUrl: string;
  redisUrl: string;
  /** `--only=<scenario>` (or BENCH_ONLY): that scenario alone; otherwise the full run. */
  only?: string;
  /** The rest of the command line, for a scenario's own arguments (`--sizes`, `--keep`). */
  argv: string[];
  /** Measured and warm-up seconds of each load run; rounds of each interleaved comparison. */
  seconds: number;
  warmupSeconds: number;
  rounds: number;
  openRounds: number;
  connections: number;
  evaluatorDecisions: number;
  /** `--profile`: one Warden under --cpu-prof, one load (BENCH_PROFILE_SECONDS, at BENCH_PROFILE_RATE if set), the top functions. */
  profile: boolean;
  profileSeconds: number;
  profileRate?: number;
  /** The decision scenario's closed-loop B1/S rounds only (A/B a change of the hot path). */
  quick: boolean;
  /** The decision scenario's open-loop B1/S rounds only, at this rate (A/B latency). */
  openRate?: number;
  /** WARDEN_WORKERS: cores less one, which PostgreSQL and the load generator need (decision record 0007). */
  workers: number;
  /** Open-loop runs write every request's due time and latency to test-output/bench/trace/. */
  trace: boolean;
  /** Extra Node.js flags for each Warden (e.g. `--trace-gc`). */
  nodeFlags: string[];
  /** More environment for every Warden (`NAME=value …`), to try a setting in any scenario. */
  wardenEnv: Record<string, string>;
}

export function loadBenchConfig(argv: string[] = process.argv.slice(2)): BenchConfig {
  const databaseUrl = env('DATABASE_URL');
  if (!databaseUrl) {
    throw new UsageError(
      'DATABASE_URL is not set. `npm run bench` runs against a real PostgreSQL server: it creates databases ' +
        'warden_bench_<scenario>_<pid> there and drops them at the end. For example:\n' +
        '  DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres npm run bench',
    );
  }
  const seconds = positive('BENCH_SECONDS', 10, false);
  return {
    databaseUrl,
    redisUrl: env('REDIS_URL') ?? 'redis://127.0.0.1:6379',
    only: argv.find((arg) => arg.startsWith('--only='))?.slice('--only='.length) ?? env('BENCH_ONLY'),
    argv,
    seconds,
    warmupSeconds: Math.min(positive('BENCH_WARMUP_SECONDS', 2, false), seconds),
    rounds: positive('BENCH_ROUNDS', 3),
    openRounds: positive('BENCH_OPEN_ROUNDS', 5),
    connections: positive('BENCH_CONNECTIONS', 50),
    evaluatorDecisions: positive('BENCH_EVALUATOR_DECISIONS', 200_000),
    profile: argv.includes('--profile') || flag('BENCH_PROFILE'),
    profileSeconds: positive('BENCH_PROFILE_SECONDS', 10, false),
    profileRate: env('BENCH_PROFILE_RATE') ? positive('BENCH_PROFILE_RATE', 1) : undefined,
    quick: flag('BENCH_QUICK'),
    openRate: env('BENCH_OPEN_RATE') ? positive('BENCH_OPEN_RATE', 1) : undefined,
    workers: positive('BENCH_WORKERS', Math.max(1, availableParallelism() - 1)),
    trace: flag('BENCH_TRACE'),
    nodeFlags: (env('BENCH_NODE_FLAGS') ?? '').split(/\s+/).filter(Boolean),
    wardenEnv: Object.fromEntries(
      (env('BENCH_WARDEN_ENV') ?? '')
        .split(/\s+/)
        .filter(Boolean)
        .map((pair) => {
          const at = pair.indexOf('=');
          if (at < 1) throw new UsageError(`BENCH_WARDEN_ENV: '${pair}' is not NAME=value`);
          return [pair.slice(0, at), pair.slice(at + 1)];
        }),
    ),
  };
}
