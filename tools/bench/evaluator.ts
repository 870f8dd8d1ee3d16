/**
 * The evaluator micro-benchmark, in-process (no HTTP, no database): compilePolicySet over the
 * benchmark's policies (50 × 10 and 100 × 10 rules), then decide() for N varied inputs, each
 * call timed with process.hrtime.bigint(). Reports p50/p90/p99 per decision in µs, a batch
 * mean (N calls timed as a whole, without the per-call timer), the compile time, and the
 * same for the HTTP benchmark's own input alone (which walks every rule).
 *
 * Run by `npm run bench` in a child process; also standalone: `npx tsx tools/bench/evaluator.ts`.
 */
import {
  type AgentFacts,
  compilePolicySet,
  type DecisionInput,
  decide,
  type PolicySource,
} from '../../apps/server/src/features/policies/engine.ts';
import { benchPolicies, EVALUATE_BODY } from './workload.ts';

export interface EvaluatorFigures {
  policies: number;
  rules: number;
  decisions: number;
  compileMs: { median: number; min: number };
  perDecisionUs: { p50: number; p90: number; p99: number; p999: number; max: number; mean: number };
  /** Mean of the batch timing (no per-call timer): the timer's own cost is not in it. */
  batchMeanUs: number;
  /** The HTTP benchmark's input (files.read, allowed by the last rule) alone. */
  benchInputUs: { p50: number; p99: number };
  outcomes: Record<string, number>;
  conditionErrors: number;
}

const AGENT: AgentFacts = {
  id: '00000000-0000-4000-8000-000000000001',
  slug: 'bench-agent',
  name: 'Bench agent',
  status: 'active',
  environment: 'production',
  risk_level: 'medium',
  allowed_tools: [],
  allowed_resources: [],
};

/** A small deterministic PRNG (mulberry32), so every run decides the same inputs. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function variedInputs(count: number, policies: number): DecisionInput[] {
  const random = prng(42);
  const pick = <T>(list: readonly T[]): T => list[Math.floor(random() * list.length)] as T;
  const n = () => Math.floor(random() * policies);
  const actions = () => [
    'files.read',
    'files.read',
    'files.write',
    'files.list',
    `payments.refund`,
    `db.users.drop`,
    'db.truncate',
    `svc${n()}.delete.all`,
    `report.${n()}.read`,
    'deploy.web',
    'email.send',
    'crm.contacts.write',
  ];
  const resources = () => ['docs/quarterly-report.pdf', `accounts/${n()}/ledger`, `secrets/${n()}/token`, 'team/private/notes', undefined];
  const inputs: DecisionInput[] = [];
  for (let i = 0; i < count; i++) {
    const resource = pick(resources());
    const tool = pick(['reader', 'shell', 'exec-python', undefined] as const);
    inputs.push({
      action: pick(actions()),
      ...(resource !== undefined ? { resource } : {}),
      ...(tool !== undefined ? { tool } : {}),
      environment: 'production',
      context: {
        amount: Math.floor(random() * 3000),
        user: pick(['alice', 'bob', 'carol']),
        roles: random() < 0.2 ? ['admin', 'reader'] : ['reader'],
      },
    });
  }
  return inputs;
}

const toSource = (count: number): PolicySource[] =>
  benchPolicies(count).map((p) => ({ name: p.name, mode: 'enforce', priority: p.priority, rules: p.rules }));

function sortedUs(samples: Float64Array): Float64Array {
  return samples.sort();
}

function pct(sorted: Float64Array, q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))] as number;
}

const round = (value: number, digits = 3) => Number(value.toFixed(digits));

export function runEvaluatorBenchmark(policyCount: number, decisions: number): EvaluatorFigures {
  const sources = toSource(policyCount);
  // compile
  const compileTimes: number[] = [];
  for (let i = 0; i < 25; i++) {
    const t0 = process.hrtime.bigint();
    compilePolicySet(sources);
    compileTimes.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  compileTimes.sort((a, b) => a - b);
  const set = compilePolicySet(sources);

  const inputs = variedInputs(decisions, policyCount);
  const outcomes: Record<string, number> = {};
  let conditionErrors = 0;
  const once = (input: DecisionInput) => {
    try {
      return decide(set, input, AGENT).result;
    } catch {
      conditionErrors += 1;
      return 'condition_error';
    }
  };
  // warm-up (JIT), not measured
  for (let i = 0; i < Math.min(50_000, decisions); i++) once(inputs[i] as DecisionInput);
  conditionErrors = 0;

  // per call
  const samples = new Float64Array(decisions);
  for (let i = 0; i < decisions; i++) {
    const input = inputs[i] as DecisionInput;
    const t0 = process.hrtime.bigint();
    const result = once(input);
    samples[i] = Number(process.hrtime.bigint() - t0) / 1000;
    outcomes[result] = (outcomes[result] ?? 0) + 1;
  }
  const sorted = sortedUs(samples);
  let sum = 0;
  for (const value of sorted) sum += value;

  // batch (no per-call timer)
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < decisions; i++) once(inputs[i] as DecisionInput);
  const batchMeanUs = Number(process.hrtime.bigint() - t0) / 1000 / decisions;

  // the HTTP benchmark's input alone
  const bench = { ...EVALUATE_BODY.input } as DecisionInput;
  const benchSamples = new Float64Array(20_000);
  for (let i = 0; i < benchSamples.length; i++) {
    const s0 = process.hrtime.bigint();
    decide(set, bench, AGENT);
    benchSamples[i] = Number(process.hrtime.bigint() - s0) / 1000;
  }
  const benchSorted = sortedUs(benchSamples);

  return {
    policies: policyCount,
    rules: set.rules.length,
    decisions,
    compileMs: { median: round(compileTimes[Math.floor(compileTimes.length / 2)] as number), min: round(compileTimes[0] as number) },
    perDecisionUs: {
      p50: round(pct(sorted, 0.5)),
      p90: round(pct(sorted, 0.9)),
      p99: round(pct(sorted, 0.99)),
      p999: round(pct(sorted, 0.999)),
      max: round(sorted[sorted.length - 1] as number),
      mean: round(sum / sorted.length),
    },
    batchMeanUs: round(batchMeanUs),
    benchInputUs: { p50: round(pct(benchSorted, 0.5)), p99: round(pct(benchSorted, 0.99)) },
    outcomes,
    conditionErrors,
  };
}

export function runEvaluatorSuite(decisions: number): EvaluatorFigures[] {
  return [runEvaluatorBenchmark(50, decisions), runEvaluatorBenchmark(100, decisions)];
}

// As a child of `npm run bench` (IPC) or standalone.
if (import.meta.url === `file://${process.argv[1]}`) {
  const variable = 'BENCH_EVALUATOR_DECISIONS';
  const decisions = Number(process.env[variable] || 200_000);
  const figures = runEvaluatorSuite(decisions);
  if (process.send) process.send({ type: 'result', figures }, undefined, {}, () => process.exit(0));
  else process.stdout.write(`${JSON.stringify(figures, null, 2)}\n`);
}
