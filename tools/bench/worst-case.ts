/**
 * The worst decisions the policy limits admit (issue 21): for each expensive shape, a
 * workspace's whole allowance (1,000 rules in 10 policies of 100) spent on it, and the largest
 * input that carries it through the API (a 1,024-character resource, a 256-character tool, a
 * context of up to ~300 KB). Every shape passes the limits checked at save.
 *
 * Measured twice: in-process (compilePolicySet + decide(), the decision's own cost; target
 * ≤ 5 ms), and through the API on S, where one client loops the worst shape's decisions while
 * another asks GET /health at a fixed rate (target: the health p99 ≤ 20 ms).
 *
 * Standalone: `npx tsx tools/bench/worst-case.ts` prints the in-process figures; `npm run bench`
 * forks it and reads them as a message.
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import type { PolicyRule } from '@warden/contract';
import {
  type AgentFacts,
  ConditionError,
  compilePolicySet,
  type DecisionInput,
  decide,
  type PolicySource,
} from '../../apps/server/src/features/policies/engine.ts';
import { LIMITS } from '../../apps/server/src/features/policies/limits.ts';
import { ROOT } from './procs.ts';

export interface WorstShape {
  name: string;
  what: string;
  rules: PolicyRule[];
  input: DecisionInput;
}

const RULES = LIMITS.rulesPerWorkspace;
const many = (make: (i: number) => PolicyRule): PolicyRule[] => Array.from({ length: RULES }, (_, i) => make(i));
const RESOURCE = `${'a'.repeat(1023)}c`;
const TOOL = 'a'.repeat(256);
/** The largest list and string a decision's context may carry (MAX_CONTEXT_BYTES of JSON). */
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
export function shapePolicies(shape: WorstShape): Array<{ name: string; priority: number; rules: PolicyRule[] }> {
  const policies = [];
  for (let i = 0; i < shape.rules.length; i += LIMITS.rulesPerPolicy) {
    policies.push({
      name: `worst-${shape.name}-${i / LIMITS.rulesPerPolicy}`,
      priority: 100,
      rules: shape.rules.slice(i, i + LIMITS.rulesPerPolicy),
    });
  }
  return policies;
}

const AGENT: AgentFacts = {
  id: '00000000-0000-4000-8000-000000000002',
  slug: 'worst-agent',
  name: 'worst-agent',
  status: 'active',
  environment: 'production',
  risk_level: 'high',
  allowed_tools: [],
  allowed_resources: [],
};

export interface InProcessFigures {
  shape: string;
  what: string;
  decisions: number;
  outcome: string;
  ms: { p50: number; p99: number; max: number };
  compileMs: number;
}

/** Unmeasured decisions first: the JIT's first compilations are not the steady cost. */
const WARMUP = 20;

const percentile = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))] ?? Number.NaN;
const round = (ms: number) => Number(ms.toFixed(3));

/** decide() on the shape's input, `runs` times (a fresh action each time, so no memo helps). */
export function measureInProcess(shape: WorstShape, runs = 200): InProcessFigures {
  const t0 = performance.now();
  const set = compilePolicySet(shapePolicies(shape).map((p): PolicySource => ({ ...p, mode: 'enforce' })));
  const compileMs = performance.now() - t0;
  const times: number[] = [];
  const outcomes = new Set<string>();
  for (let i = -WARMUP; i < runs; i++) {
    const started = performance.now();
    try {
      outcomes.add(decide(set, { ...shape.input, action: `${shape.input.action}.${i}` }, AGENT).result);
    } catch (error) {
      if (!(error instanceof ConditionError)) throw error;
      outcomes.add(error.message.startsWith('evaluation budget exceeded') ? 'budget_exceeded' : 'evaluation_failed');
    }
    if (i >= 0) times.push(performance.now() - started);
  }
  times.sort((a, b) => a - b);
  return {
    shape: shape.name,
    what: shape.what,
    decisions: runs,
    outcome: [...outcomes].join('+'),
    ms: { p50: round(percentile(times, 0.5)), p99: round(percentile(times, 0.99)), max: round(times.at(-1) ?? Number.NaN) },
    compileMs: round(compileMs),
  };
}

const run = promisify(execFile);

/** A workspace of its own for a shape, with a key holding every permission (through the CLI). */
async function workspaceKey(databaseUrl: string, slug: string): Promise<string> {
  const cli = (...args: string[]) =>
    run('npx', ['tsx', 'apps/server/src/cli/main.ts', ...args, '--json'], {
      cwd: ROOT,
      env: { ...process.env, DATABASE_URL: databaseUrl },
    });
  await cli('workspaces', 'create', '--slug', slug);
  const { stdout } = await cli('keys', 'create', '--workspace', slug, '--permissions', '*');
  return (JSON.parse(stdout) as { key: string }).key;
}

/** Seeds the shape into a new workspace of a running Warden; answers its key and the request body to loop. */
export async function seedShape(baseUrl: string, databaseUrl: string, shape: WorstShape): Promise<{ key: string; body: string }> {
  const key = await workspaceKey(databaseUrl, `worst-${shape.name.replace(/_/g, '-')}`);
  const post = async (path: string, body: unknown) => {
    const res = await fetch(`${baseUrl}${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    if (res.status !== 201) throw new Error(`POST ${path} for shape ${shape.name}: ${res.status} ${await res.text()}`);
  };
  await post('/agents', { name: AGENT.slug, slug: AGENT.slug, provider: 'local', environment: 'production' });
  for (const policy of shapePolicies(shape)) await post('/policies', { ...policy, enabled: true });
  return { key, body: JSON.stringify({ input: { ...shape.input, agent: AGENT.slug } }) };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const figures = WORST_SHAPES.map((shape) => measureInProcess(shape));
  if (process.send)
    process.send({ type: 'result', figures }, undefined, {}, () => process.exit(0)); // forked by npm run bench
  else
    for (const f of figures) {
      process.stdout.write(
        `${f.shape.padEnd(14)} p50 ${f.ms.p50} ms  p99 ${f.ms.p99} ms  max ${f.ms.max} ms  (${f.outcome}; compile ${f.compileMs} ms)\n`,
      );
    }
}
