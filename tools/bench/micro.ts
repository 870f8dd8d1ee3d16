/**
 * The decision's own cost, in-process (no HTTP, no database), in a child process of its own:
 *
 *   evaluator  compilePolicySet over the benchmark's policies (50 × 10 and 100 × 10 rules), then
 *              decide() over N varied inputs (seeded PRNG), each call timed; a batch mean without
 *              the per-call timer; the HTTP benchmark's own input alone.
 *   worst      the worst decisions the policy limits admit (issue 21): for each expensive shape
 *              a workspace's whole allowance (1,000 rules in 10 policies) spent on it, with the
 *              largest input the API carries; 20 unmeasured then 200 timed decisions.
 *
 * Forked by the scenarios (argv[2]: evaluator | worst); standalone it prints the figures.
 */
import { fileURLToPath } from 'node:url';
import type { PolicyRule } from '@warden/contract';
import {
  type AgentFacts,
  ConditionError,
  compilePolicySet,
  type DecisionInput,
  decide,
} from '../../apps/server/src/features/policies/engine.ts';
import { LIMITS } from '../../apps/server/src/features/policies/limits.ts';
import { type Percentiles, percentiles } from './report.ts';
import { benchPolicies, EVALUATE_BODY } from './workload.ts';

const AGENT: AgentFacts = {
  id: '00000000-0000-4000-8000-000000000001',
  slug: 'bench-agent',
  name: 'bench-agent',
  status: 'active',
  environment: 'production',
  risk_level: 'medium',
  allowed_tools: [],
  allowed_resources: [],
};

/** mulberry32: a small seeded PRNG, so every run decides the same inputs. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const timedUs = (work: () => unknown) => {
  const t0 = process.hrtime.bigint();
  work();
  return Number(process.hrtime.bigint() - t0) / 1000;
};

// ---------------------------------------------------------------- evaluator

export interface EvaluatorFigures {
  policies: number;
  decisions: number;
  compileMs: number;
  perDecisionUs: Percentiles;
  /** Mean of N calls timed as a whole: the timer's own cost is not in it. */
  batchMeanUs: number;
  /** The HTTP benchmark's input (allowed by the very last rule) alone. */
  benchInputUs: Percentiles;
  outcomes: Record<string, number>;
}

function variedInputs(count: number, policies: number): DecisionInput[] {
  const random = prng(42);
  const pick = <T>(list: readonly T[]): T => list[Math.floor(random() * list.length)] as T;
  const n = () => Math.floor(random() * policies);
  return Array.from({ length: count }, () => {
    const resource = pick(['docs/quarterly-report.pdf', `accounts/${n()}/ledger`, `secrets/${n()}/token`, 'team/private/notes', undefined]);
    const tool = pick(['reader', 'shell', 'exec-python', undefined]);
    return {
      action: pick([
        'files.read',
        'files.read',
        'files.write',
        'files.list',
        'payments.refund',
        'db.users.drop',
        'db.truncate',
        `svc${n()}.delete.all`,
        `report.${n()}.read`,
        'deploy.web',
        'email.send',
        'crm.contacts.write',
      ]),
      ...(resource && { resource }),
      ...(tool && { tool }),
      environment: 'production',
      context: {
        amount: Math.floor(random() * 3000),
        user: pick(['alice', 'bob', 'carol']),
        roles: random() < 0.2 ? ['admin', 'reader'] : ['reader'],
      },
    };
  });
}

export function evaluator(policyCount: number, decisions: number): EvaluatorFigures {
  const sources = benchPolicies(policyCount).map((p) => ({ ...p, mode: 'enforce' as const }));
  const compileUs = Array.from({ length: 25 }, () => timedUs(() => compilePolicySet(sources)));
  const set = compilePolicySet(sources);
  const inputs = variedInputs(decisions, policyCount);
  const outcomes: Record<string, number> = {};
  const once = (input: DecisionInput) => {
    try {
      return decide(set, input, AGENT).result;
    } catch {
      return 'condition_error';
    }
  };
  for (const input of inputs.slice(0, 50_000)) once(input); // the JIT's first compilations are not the steady cost
  const samples = inputs.map((input) =>
    timedUs(() => {
      const result = once(input);
      outcomes[result] = (outcomes[result] ?? 0) + 1;
    }),
  );
  const batchMeanUs = timedUs(() => inputs.forEach(once)) / decisions;
  const bench = EVALUATE_BODY.input as DecisionInput;
  return {
    policies: policyCount,
    decisions,
    compileMs: Number((percentiles(compileUs).p50 / 1000).toFixed(3)),
    perDecisionUs: percentiles(samples),
    batchMeanUs: Number(batchMeanUs.toFixed(3)),
    benchInputUs: percentiles(Array.from({ length: 20_000 }, () => timedUs(() => decide(set, bench, AGENT)))),
    outcomes,
  };
}

// ---------------------------------------------------------------- the worst decisions

export interface WorstShape {
  name: string;
  what: string;
  rules: PolicyRule[];
  input: DecisionInput;
}

const many = (make: (i: number) => PolicyRule): PolicyRule[] => Array.from({ length: LIMITS.rulesPerWorkspace }, (_, i) => make(i));
const RESOURCE = `${'a'.repeat(1023)}c`;
const TOOL = 'a'.repeat(256);
/** The largest list and string a decision's context may carry. */
const LIST = Array.from({ length: 12_000 }, (_, i) => i);
const TEXT = 'ab,'.repeat(21_000);
/** 199 expression nodes, the most a condition may have, none of which short-circuits. */
const CHAIN = Array.from({ length: 40 }, (_, i) => `context.n == ${i}.5`).join(' || ');

export const WORST_SHAPES: WorstShape[] = [
  {
    name: 'rules',
    what: '1,000 rules, every one looked at (no match)',
    rules: many((i) => ({ match: { resource: [`x${i}/*`] }, effect: 'block' })),
    input: { action: 'worst.rules', resource: RESOURCE },
  },
  {
    name: 'globs',
    what: '2,000 globs of 32 characters searching a 1,024-character resource and a 256-character tool',
    rules: many(() => ({ match: { resource: [`*${'?a'.repeat(15)}b*`], tool: [`*${'a'.repeat(29)}b*`] }, effect: 'allow' })),
    input: { action: 'worst.globs', resource: RESOURCE, tool: TOOL },
  },
  {
    name: 'conditions',
    what: '1,000 conditions of 199 nodes',
    rules: many(() => ({ condition: CHAIN, effect: 'block' })),
    input: { action: 'worst.conditions', context: { n: 1000 } },
  },
  {
    name: 'comprehension',
    what: 'nested all/exists over a 12,000-element list (61 KB of context)',
    rules: many(() => ({ condition: 'context.l.all(a, context.l.exists(b, a + b < 0.0))', effect: 'block' })),
    input: { action: 'worst.comprehension', context: { l: LIST } },
  },
  {
    name: 'errors',
    what: 'an error absorbed per element of a 12,000-element list',
    rules: many(() => ({ condition: 'context.l.all(x, x.missing == 1)', effect: 'block' })),
    input: { action: 'worst.errors', context: { l: LIST } },
  },
  {
    name: 'strings',
    what: 'split, lowerAscii and contains over a 63 KB string',
    rules: many((i) => ({
      condition: i % 2 === 0 ? 'size(context.s.split(",")) < 0' : 'context.s.lowerAscii().contains("zz")',
      effect: 'block',
    })),
    input: { action: 'worst.strings', context: { s: TEXT } },
  },
  {
    name: 'time_zones',
    what: 'a time-zone conversion per rule',
    rules: many(() => ({ condition: 'timestamp(context.t).getHours("Europe/Paris") == 99', effect: 'block' })),
    input: { action: 'worst.time_zones', context: { t: '2026-01-01T10:00:00Z' } },
  },
];

/** The shape as policies of at most 100 rules each. */
export const shapePolicies = (shape: WorstShape) =>
  Array.from({ length: Math.ceil(shape.rules.length / LIMITS.rulesPerPolicy) }, (_, i) => ({
    name: `worst-${shape.name}-${i}`,
    priority: 100,
    rules: shape.rules.slice(i * LIMITS.rulesPerPolicy, (i + 1) * LIMITS.rulesPerPolicy),
  }));

export interface WorstFigures {
  shape: string;
  what: string;
  outcome: string;
  ms: Percentiles;
}

/** decide() on the shape's input, each time with a fresh action, so that no memo helps. */
export function worst(shape: WorstShape, runs = 200): WorstFigures {
  const set = compilePolicySet(shapePolicies(shape).map((p) => ({ ...p, mode: 'enforce' as const })));
  const outcomes = new Set<string>();
  const times: number[] = [];
  for (let i = -20; i < runs; i++) {
    const us = timedUs(() => {
      try {
        outcomes.add(decide(set, { ...shape.input, action: `${shape.input.action}.${i}` }, AGENT).result);
      } catch (error) {
        if (!(error instanceof ConditionError)) throw error;
        outcomes.add(error.message.startsWith('evaluation budget exceeded') ? 'budget_exceeded' : 'evaluation_failed');
      }
    });
    if (i >= 0) times.push(us / 1000);
  }
  return { shape: shape.name, what: shape.what, outcome: [...outcomes].join('+'), ms: percentiles(times) };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const decisions = Number(process.env.BENCH_EVALUATOR_DECISIONS || 200_000);
  const figures =
    process.argv[2] === 'worst' ? WORST_SHAPES.map((shape) => worst(shape)) : [evaluator(50, decisions), evaluator(100, decisions)];
  if (process.send) process.send({ type: 'result', figures }, undefined, {}, () => process.exit(0));
  else process.stdout.write(`${JSON.stringify(figures, null, 2)}\n`);
}
