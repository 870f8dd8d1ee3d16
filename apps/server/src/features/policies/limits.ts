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
 * One cost unit is meant as at most ~50 ns of work; the rates, the budget and how they were
 * measured: docs/decisions/0010-policy-cost-limits.md. The worst decisions these limits admit
 * are exercised in apps/server/test/policy-limits.unit.test.ts.
 */
import type { PolicyRule } from '@warden/contract';

/** Cost units a decision may spend in conditions and glob searches: about 2 ms of work at most. */
export const DECISION_BUDGET = 40_000;

export const LIMITS = {
  /** Rules in one policy (also the schema's maxItems). */
  rulesPerPolicy: 100,
  /**
   * Rules in all policies of a workspace, enabled or not (enabling is a PATCH that is not
   * checked again). Bounds the per-rule work of a decision that reaches every rule and the
   * compilation of a policy set after each change.
   */
  rulesPerWorkspace: 1_000,
  /**
   * Policies of a workspace, enabled or not: a policy without rules costs a decision nothing,
   * but every list that names them (a bundle's result, a draft) is bounded (the schemas' maxItems).
   */
  policiesPerWorkspace: 1_000,
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

/** Cost units of the runtime budget: the measured worst of each operation (docs/decisions/0010-policy-cost-limits.md). */
export const COST = {
  /** Expression nodes, per evaluation (per iteration inside a comprehension), by kind. */
  node: 1,
  call: 12,
  operator: 6,
  has: 8,
  /** Conversions that parse (timestamp(), duration()) or format (string()). */
  parse: 70,
  convert: 25,
  /** A value element (list item, map entry) touched by an operation. */
  element: 1,
  /** Characters per unit for comparisons, searches and case changes. */
  charsPerUnit: 64,
  /** size() counts code points. */
  sizeCharsPerUnit: 4,
  /** split() builds a string per part. */
  splitCharsPerUnit: 1,
  /** bytes() and the bytes methods (hex, base64, json). */
  bytesCharsPerUnit: 8,
  /** join() checks each element, then joins. */
  joinElement: 4,
  /** An error absorbed by `||`, `&&`, all() or exists() (created without a stack trace, see cel.ts)... */
  error: 200,
  /** ...plus the source excerpt cel-js builds, per character of the source before the failing node. */
  errorSourceCharsPerUnit: 6,
  /** A timestamp method with a time zone builds an Intl formatter per call. */
  timeZone: 7_000,
  /** Glob search (text between two `*`): characters of the value per unit, per 32 characters of the searched text. */
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

/** The policy limit, for a workspace that would have `count` policies: a message, or null. */
export const checkPolicyCount = (count: number): string | null =>
  count > LIMITS.policiesPerWorkspace
    ? `a workspace may have at most ${fmt(LIMITS.policiesPerWorkspace)} policies; it would have ${fmt(count)}`
    : null;

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
