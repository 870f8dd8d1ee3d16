/**
 * What a policy may cost. Decisions are evaluated in memory on the one event loop every tenant
 * shares, so one workspace's expensive policy (or an agent's crafted input against it) would
 * freeze every tenant. Two guards:
 *
 * 1. Static limits, checked when a policy is saved (400 `invalid_policy` naming the rule and
 *    the limit): sizes of rules, globs and conditions, per policy and per workspace
 *    (checkPolicyLimits, checkWorkspaceLimits here; condition limits in cel.ts).
 * 2. A runtime budget per decision that fails closed (400 `evaluation_failed`): the work of
 *    CEL conditions (AST nodes evaluated, comprehension iterations, characters and elements
 *    of the values they touch, errors they absorb) and of the glob searches whose cost grows
 *    with the value (text between two `*`), counted in cost units as they happen. Nothing is
 *    timed, so whether a decision is refused does not depend on the machine's load.
 *
 * One cost unit is meant as at most ~50 ns of work on the 2-core benchmark machine (Node 20);
 * measured, spending units cost 3–41 ns each, whatever the shape (see DECISION_BUDGET). The
 * worst decisions these limits admit are exercised in apps/server/test/policy-limits.unit.test.ts.
 */
import type { PolicyRule } from '@warden/contract';

/**
 * Cost units a decision may spend in conditions and glob searches. Spending all of it took
 * 0.2–1.6 ms (fastest of 31 runs; medians up to 2.6 ms on a busy machine) over the costliest
 * shapes found: 200-node condition chains in 1,000 rules, comprehensions, split/join/size over
 * large strings and lists, absorbed errors in long conditions, time zones, glob searches; the
 * unmetered rest of a decision the limits admit (1,000 rules, 2,000 globs) adds ≤ 0.5 ms. The
 * benchmark's decision (500 rules, 25 conditions) spends 520 units.
 */
export const DECISION_BUDGET = 40_000;

export const LIMITS = {
  /** Rules in one policy (also the schema's maxItems). */
  rulesPerPolicy: 100,
  /**
   * Rules in all policies of a workspace, enabled or not (enabling is a PATCH that is not
   * checked again). Bounds the per-rule work of a decision that reaches every rule (~30–60 ns
   * each without a condition) and the compilation of a policy set after each change.
   */
  rulesPerWorkspace: 1_000,
  /** Globs in one rule, all match fields together. */
  globsPerRule: 100,
  /** Globs in all policies of a workspace. */
  globsPerWorkspace: 2_000,
  /** Characters of one glob (also the schema's maxLength). */
  globLength: 256,
  /** Characters of all globs of a workspace: the unmetered part of matching is linear in the glob. */
  globCharactersPerWorkspace: 65_536,
  /** Expression nodes of one condition, as the parser counts them (literals, names, operators, calls). */
  conditionNodes: 200,
  /** Nesting of comprehensions (all, exists, exists_one, map, filter) in one condition. */
  comprehensionNesting: 2,
} as const;

/**
 * Cost units of the runtime budget. The per-character rates are the measured worst per
 * character of the operation against the ~50 ns unit (Node 20, 64 KiB strings).
 */
export const COST = {
  /**
   * Expression nodes, per evaluation (per iteration inside a comprehension). Measured per node
   * kind, the worst over dyn-typed operands: a function call dispatches on the runtime types of
   * its arguments (~300–900 ns), a comparison or arithmetic operator resolves its overload
   * (~100–350 ns), field access, names, literals and logic ~20–50 ns.
   */
  node: 1,
  call: 12,
  operator: 6,
  has: 8,
  /** Conversions that parse or format: timestamp() and duration() parse a date (~3.6 µs), string() formats a number (~1.2 µs). */
  parse: 70,
  convert: 25,
  /** A value element (list item, map entry) touched by an operation. */
  element: 1,
  /** Characters per unit for comparisons, searches and case changes (0.4–1 ns per character). */
  charsPerUnit: 64,
  /** size() counts code points: 13 ns per character. */
  sizeCharsPerUnit: 4,
  /** split() builds a string per part: up to 40 ns per character. */
  splitCharsPerUnit: 1,
  /** bytes() and the bytes methods (hex, base64, json): 4–10 ns per byte. */
  bytesCharsPerUnit: 8,
  /** join() checks each element, then joins: ~180 ns per element. */
  joinElement: 4,
  /** An error absorbed by `||`, `&&`, all() or exists(): up to ~10 µs (created without a stack trace, see cel.ts)... */
  error: 200,
  /** ...plus the source excerpt cel-js builds, ~7 ns per character of the source before the failing node. */
  errorSourceCharsPerUnit: 6,
  /** A timestamp method with a time zone builds an Intl formatter per call: ~345 µs. */
  timeZone: 7_000,
  /** Glob search (text between two `*`): characters of the value per unit, per 32 characters of the searched text (~5 ns per character and word). */
  globScanCharsPerUnit: 10,
} as const;

/**
 * The budget of the decision being evaluated. Module state: decide() runs synchronously from
 * start to end, so one decision is metered at a time; decide() resets it.
 */
export const meter = { remaining: DECISION_BUDGET, exceeded: false };

export class BudgetExceeded extends Error {
  constructor() {
    super(
      `evaluation budget exceeded: a decision may spend ${DECISION_BUDGET.toLocaleString('en-US')} cost units ` +
        '(about 2 ms) in conditions and glob searches; make conditions touch less of the input (fewer or smaller lists and strings, less nesting)',
    );
    this.name = 'BudgetExceeded';
  }
}

/** Thrown as is every time (creating an error costs microseconds; this is thrown in loops). */
export const BUDGET_EXCEEDED = new BudgetExceeded();

/** Starts the budget of a decision. */
export function startDecisionBudget(units: number = DECISION_BUDGET): void {
  meter.remaining = units;
  meter.exceeded = false;
}

/** Spends `units`; throws BUDGET_EXCEEDED (and remembers it) when the budget runs out. */
export function charge(units: number): void {
  meter.remaining -= units;
  if (meter.remaining < 0) {
    meter.exceeded = true;
    throw BUDGET_EXCEEDED;
  }
}

export const budgetExceeded = (): boolean => meter.exceeded;

export type MatchFieldName = keyof NonNullable<PolicyRule['match']>;

/** Globs of a rule, every match field. */
export function ruleGlobs(rule: PolicyRule): string[] {
  const match = rule.match as Record<string, string[] | undefined> | undefined;
  if (!match) return [];
  return Object.values(match).flatMap((patterns) => patterns ?? []);
}

/** What a policy's rules add to its workspace's totals. */
export interface RuleTotals {
  rules: number;
  globs: number;
  globCharacters: number;
}

export function ruleTotals(rules: readonly PolicyRule[]): RuleTotals {
  let globs = 0;
  let globCharacters = 0;
  for (const rule of rules) {
    for (const glob of ruleGlobs(rule)) {
      globs += 1;
      globCharacters += glob.length;
    }
  }
  return { rules: rules.length, globs, globCharacters };
}

const fmt = (n: number) => n.toLocaleString('en-US');
const ruleName = (rule: PolicyRule, index: number) => (rule.id ? `rules[${index}] ('${rule.id}')` : `rules[${index}]`);

/** The limits one policy can break by itself; the first broken one as a message, or null. */
export function checkPolicyLimits(rules: readonly PolicyRule[]): string | null {
  if (rules.length > LIMITS.rulesPerPolicy) {
    return `a policy may have at most ${fmt(LIMITS.rulesPerPolicy)} rules; this one has ${fmt(rules.length)}`;
  }
  for (const [index, rule] of rules.entries()) {
    const globs = ruleGlobs(rule);
    if (globs.length > LIMITS.globsPerRule) {
      return `${ruleName(rule, index)}.match: a rule may have at most ${fmt(LIMITS.globsPerRule)} globs in all; this one has ${fmt(globs.length)}`;
    }
    const long = globs.find((glob) => glob.length > LIMITS.globLength);
    if (long !== undefined) {
      return `${ruleName(rule, index)}.match: a glob may have at most ${fmt(LIMITS.globLength)} characters; one has ${fmt(long.length)}`;
    }
  }
  const totals = ruleTotals(rules);
  return checkWorkspaceLimits(totals, { rules: 0, globs: 0, globCharacters: 0 });
}

/**
 * The workspace limits, for a policy's rules (`own`) added to those of the workspace's other
 * policies (`others`); the first broken one as a message, or null.
 */
export function checkWorkspaceLimits(own: RuleTotals, others: RuleTotals): string | null {
  const total = (key: keyof RuleTotals) => own[key] + others[key];
  const over = (key: keyof RuleTotals, limit: number, what: string) =>
    total(key) > limit
      ? `a workspace may have at most ${fmt(limit)} ${what} in all its policies; with this policy's ${fmt(own[key])} it would have ${fmt(total(key))}`
      : null;
  return (
    over('rules', LIMITS.rulesPerWorkspace, 'rules') ??
    over('globs', LIMITS.globsPerWorkspace, 'globs') ??
    over('globCharacters', LIMITS.globCharactersPerWorkspace, 'glob characters')
  );
}
