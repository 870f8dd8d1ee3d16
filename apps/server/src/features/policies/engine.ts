/**
 * The policy engine: compiles a workspace's enabled policies once per policy version and
 * decides in memory, with no database access per rule or per decision.
 *
 * Block and approval rules match a URL, path or resource in every spelling an upstream may read
 * as the same (acts/readings.ts); allow rules match only the form that is sent.
 *
 * Precedence: an agent's own allow-lists (allowed_tools, allowed_resources) act first, as
 * implicit block rules; then among matching rules of enforcing policies, block beats
 * require_approval beats allow, and among equal effects the policy with the higher priority
 * (then the earlier policy and rule) is the one reported. No match: the workspace's default
 * decision for the environment (workspace settings, compiled into the set): allow or block.
 * Monitor policies are evaluated too, and what they would have decided is reported for the
 * audit record, never enforced.
 */
import type { PolicyRule, RuleEffect, Severity } from '@warden/contract';
import type { ExecutionFacts } from '../acts/act.ts';
import { foldedReadings } from '../acts/readings.ts';
import { type CompiledCondition, compileCondition, evaluateCondition } from './cel.ts';
import { compileGlobs, type Matcher } from './glob.ts';
import { budgetExceeded, startDecisionBudget } from './limits.ts';

export interface DecisionInput {
  action: string;
  resource?: string;
  environment?: string;
  tool?: string;
  context?: Record<string, unknown>;
  /** What will run, when Warden's proxy runs it; absent for a bare evaluation. */
  execution?: ExecutionFacts | null;
}

export interface AgentFacts {
  id: string;
  slug: string;
  name: string;
  status: string;
  environment: string;
  risk_level: string | null;
  provider?: string;
  tags?: string[];
  allowed_tools: string[];
  allowed_resources: string[];
}

/** What CEL sees of the agent: these fields only, never its key hash or whatever else its row holds. */
function celAgent(agent: AgentFacts): Record<string, unknown> {
  return {
    id: agent.id,
    slug: agent.slug,
    name: agent.name,
    status: agent.status,
    environment: agent.environment,
    risk_level: agent.risk_level,
    provider: agent.provider ?? null,
    tags: agent.tags ?? [],
    allowed_tools: agent.allowed_tools,
    allowed_resources: agent.allowed_resources,
  };
}

export interface PolicySource {
  name: string;
  mode: string;
  priority: number;
  version?: number;
  rules: PolicyRule[];
}

/** Match fields of the declared input and the agent. */
const INPUT_FIELDS = ['action', 'resource', 'agent', 'environment', 'tool'] as const;
/** Match fields read from the execution (never from what the caller declares). */
const HTTP_FIELDS = ['method', 'host', 'path', 'url'] as const;
const MATCH_FIELDS = [...INPUT_FIELDS, ...HTTP_FIELDS, 'server'] as const;
type MatchField = (typeof MATCH_FIELDS)[number];

interface CompiledRule {
  policy: string;
  policyVersion: number | null;
  monitor: boolean;
  ruleId: string | null;
  effect: RuleEffect;
  severity: Severity;
  message: string | null;
  requireProxy: boolean;
  matchers: Array<[MatchField, Matcher]>;
  condition: CompiledCondition | null;
  /** Why a saved condition no longer compiles: the rule fails every decision that reaches it. */
  conditionError: string | null;
}

export interface PolicySet {
  /** Enforcing rules, best first (priority, then policy and rule order). */
  rules: CompiledRule[];
  monitorRules: CompiledRule[];
  /** Whether any enforcing rule matches on environment (then the caller must state one). */
  usesEnvironment: boolean;
  /**
   * The rules (enforcing, monitor) whose action patterns admit `action`, in order. Matching an
   * action is pure, and agents repeat a handful of actions, so the answer is memoised per
   * action: a decision then walks only the rules that can match it.
   */
  forAction(action: string): { rules: CompiledRule[]; monitorRules: CompiledRule[] };
  /** The workspace's decision, per environment, when no enforcing rule matches. */
  defaultDecision: DefaultDecisions;
  /** The setting "agents hold no credentials": an HTTP act whose own headers carry one is refused (decisions.ts). */
  agentsHoldNoCredentials?: boolean;
  /** What audit events keep of an MCP act's arguments (acts/act.ts); redacted when not said. */
  auditMcpArguments?: 'redacted' | 'digest';
}

/** The decision per environment when no enforcing rule matches; an environment not named allows. */
export type DefaultDecisions = Readonly<Partial<Record<string, 'allow' | 'block'>>>;

const ACTION_MEMO_LIMIT = 4096;

/** The action matcher of a rule is checked by forAction; decide skips it. A search that exhausts the decision's budget fails the decision. */
const actionAdmits = (rule: CompiledRule, action: string) => {
  try {
    return rule.matchers.every(([field, matcher]) => field !== 'action' || matcher(action));
  } catch (error) {
    throw new ConditionError(rule.policy, rule.ruleId, (error as Error).message);
  }
};

export interface Decision {
  allowed: boolean;
  effect: RuleEffect;
  matched: boolean;
  policy: string | null;
  policyVersion: number | null;
  ruleId: string | null;
  severity: Severity;
  message: string;
  result: 'allowed' | 'blocked' | 'approval_required';
  requireProxy: boolean;
  /** What monitor policies would have decided (recorded, not enforced). */
  monitored: Array<{ policy: string; effect: RuleEffect; rule: string | null }>;
}

/** A rule's CEL condition failed at run time: the decision fails closed. */
export class ConditionError extends Error {
  constructor(
    readonly policy: string,
    readonly ruleId: string | null,
    message: string,
  ) {
    super(message);
  }
}

const RANK: Record<RuleEffect, number> = { allow: 0, require_approval: 1, block: 2 };
const RESULT: Record<RuleEffect, Decision['result']> = { allow: 'allowed', require_approval: 'approval_required', block: 'blocked' };

/** Compiles rules' conditions, reporting the first that does not compile (for saving policies). */
export function checkConditions(rules: readonly PolicyRule[]): { index: number; message: string; position: number | null } | null {
  for (const [index, rule] of rules.entries()) {
    if (rule.condition === undefined) continue;
    const compiled = compileCondition(rule.condition);
    if (!compiled.ok) return { index, message: compiled.message, position: compiled.position };
  }
  return null;
}

/** Fields an upstream may read in another spelling than the one sent (acts/readings.ts). */
const READ_FIELDS: ReadonlySet<MatchField> = new Set(['resource', 'url', 'path']);

/**
 * A block or approval rule's matcher of a URL, path or resource: the value as sent, or any
 * spelling an upstream may read as the same (case folded, decoded twice, PHP's parameter names).
 */
function restrictiveMatcher(patterns: readonly string[]): Matcher {
  const exact = compileGlobs(patterns, true);
  const folded = compileGlobs(
    patterns.map((p) => p.toLowerCase()),
    true,
  );
  return (value) => exact(value) || foldedReadings(value).some(folded);
}

function compileRule(policy: PolicySource, rule: PolicyRule, index: number): CompiledRule {
  const matchers: Array<[MatchField, Matcher]> = [];
  for (const field of MATCH_FIELDS) {
    const patterns = rule.match?.[field];
    if (!patterns?.length) continue;
    // metered: searches spend the decision's budget; allow rules match the exact form only
    matchers.push([field, rule.effect !== 'allow' && READ_FIELDS.has(field) ? restrictiveMatcher(patterns) : compileGlobs(patterns, true)]);
  }
  let condition: CompiledCondition | null = null;
  let conditionError: string | null = null;
  if (rule.condition !== undefined) {
    const compiled = compileCondition(rule.condition);
    // Saved policies were checked when saved. One that no longer compiles (a rule stricter
    // since) never matches silently: every decision that reaches it fails closed.
    if (compiled.ok) condition = compiled.condition;
    else conditionError = `the condition of rule ${index} no longer compiles (${compiled.message}); fix the policy`;
  }
  return {
    policy: policy.name,
    policyVersion: policy.version ?? null,
    monitor: policy.mode === 'monitor',
    ruleId: rule.id ?? null,
    effect: rule.effect,
    severity: rule.severity ?? 'medium',
    message: rule.message ?? null,
    requireProxy: rule.require_execution_proxy ?? false,
    matchers,
    condition,
    conditionError,
  };
}

export function compilePolicySet(policies: readonly PolicySource[], defaultDecision: DefaultDecisions = {}): PolicySet {
  const ordered = [...policies].sort((a, b) => b.priority - a.priority);
  const all = ordered.flatMap((policy) => policy.rules.map((rule, index) => compileRule(policy, rule, index)));
  const rules = all.filter((rule) => !rule.monitor);
  const monitorRules = all.filter((rule) => rule.monitor);
  const memo = new Map<string, { rules: CompiledRule[]; monitorRules: CompiledRule[] }>();
  return {
    rules,
    monitorRules,
    usesEnvironment: rules.some((rule) => rule.matchers.some(([field]) => field === 'environment')),
    forAction(action) {
      let entry = memo.get(action);
      if (!entry) {
        if (memo.size >= ACTION_MEMO_LIMIT) memo.clear(); // bounded: an agent may invent actions
        entry = { rules: rules.filter((r) => actionAdmits(r, action)), monitorRules: monitorRules.filter((r) => actionAdmits(r, action)) };
        memo.set(action, entry);
      }
      return entry;
    },
    defaultDecision,
  };
}

/** Whether the input's (or agent's) value for `field` matches; no allocation on the hot path. */
function fieldMatches(field: MatchField, matcher: Matcher, input: DecisionInput, agent: AgentFacts): boolean {
  switch (field) {
    case 'agent':
      return matcher(agent.slug) || (agent.name !== agent.slug && matcher(agent.name));
    case 'method':
    case 'host':
    case 'path':
    case 'url':
      return input.execution?.mode === 'http_proxy' && matcher(input.execution[field]);
    case 'server':
      return input.execution?.mode === 'mcp_proxy' && matcher(input.execution.server);
    default: {
      const value = input[field];
      return value !== undefined && matcher(value);
    }
  }
}

/**
 * Whether a rule matches; its action patterns were already checked by PolicySet.forAction.
 * `anyCall`: whether it may match some call with these facts whatever it is sent with: a rule
 * whose condition reads what differs between calls (cel.ts, readsCall) is taken to match when
 * it does not block and not to match when it does, so no such rule makes every call refused.
 */
function ruleMatches(
  rule: CompiledRule,
  input: DecisionInput,
  agent: AgentFacts,
  celVars: () => Parameters<typeof evaluateCondition>[1],
  anyCall = false,
): boolean {
  try {
    // a glob search or a condition that exhausts the decision's budget (limits.ts) throws too
    for (const [field, matcher] of rule.matchers) {
      if (field !== 'action' && !fieldMatches(field, matcher, input, agent)) return false;
    }
    if (rule.conditionError !== null) throw new Error(rule.conditionError);
    if (!rule.condition) return true;
    if (anyCall && rule.condition.readsCall) return rule.effect !== 'block';
    return evaluateCondition(rule.condition, celVars());
  } catch (error) {
    throw new ConditionError(rule.policy, rule.ruleId, (error as Error).message);
  }
}

/** Compiled allow-lists, by content: agents' rows are read per request, their lists rarely change. */
const allowListMatchers = new Map<string, Matcher>();
function allowList(list: string[]): Matcher {
  const key = list.join('\u0000');
  let matcher = allowListMatchers.get(key);
  if (!matcher) {
    if (allowListMatchers.size >= ACTION_MEMO_LIMIT) allowListMatchers.clear();
    matcher = compileGlobs(list, true); // metered, like rules' globs
    allowListMatchers.set(key, matcher);
  }
  return matcher;
}

function agentAllowListBlock(input: DecisionInput, agent: AgentFacts): Decision | null {
  const check = (field: 'tool' | 'resource', list: string[]) => {
    const value = input[field];
    if (value === undefined || list.length === 0 || allowList(list)(value)) return null;
    return `${field} '${value}' is not in the agent's allowed_${field}s`;
  };
  let reason: string | null;
  try {
    reason = check('tool', agent.allowed_tools) ?? check('resource', agent.allowed_resources);
  } catch (error) {
    throw new ConditionError(`agent:${agent.slug}`, null, (error as Error).message); // the decision's budget is spent
  }
  if (!reason) return null;
  return {
    allowed: false,
    effect: 'block',
    matched: true,
    policy: `agent:${agent.slug}`,
    policyVersion: null,
    ruleId: null,
    severity: 'high',
    message: reason,
    result: 'blocked',
    requireProxy: false,
    monitored: [],
  };
}

/**
 * `sharedBudget`: go on spending the budget of the decision this one is part of (decideStrictest) instead of starting one.
 * `anyCall`: decide whether some call with these facts may not be blocked (ruleMatches), as for a tool list; monitors are not asked.
 */
export function decide(set: PolicySet, input: DecisionInput, agent: AgentFacts, sharedBudget = false, anyCall = false): Decision {
  if (!sharedBudget) startDecisionBudget();
  let vars: Parameters<typeof evaluateCondition>[1] | undefined;
  const celVars = () => {
    if (vars) return vars;
    const { execution, ...declared } = input;
    vars = {
      input: { ...declared, agent: agent.slug } as Record<string, unknown>,
      context: input.context ?? {},
      execution: (execution ?? null) as Record<string, unknown> | null,
      agent: celAgent(agent),
    };
    return vars;
  };
  const candidates = set.forAction(input.action);
  const monitored = (anyCall ? [] : candidates.monitorRules)
    .filter((rule) => {
      try {
        return ruleMatches(rule, input, agent, celVars);
      } catch (error) {
        if (budgetExceeded()) throw error; // the decision's budget is spent: it fails, whichever policy spent it
        return false; // a monitor policy never decides, not even by failing
      }
    })
    .map((rule) => ({ policy: rule.policy, effect: rule.effect, rule: rule.ruleId }));

  const implicit = agentAllowListBlock(input, agent);
  if (implicit) return { ...implicit, monitored };

  let best: CompiledRule | undefined;
  for (const rule of candidates.rules) {
    if (best && RANK[rule.effect] <= RANK[best.effect]) continue;
    if (!ruleMatches(rule, input, agent, celVars, anyCall)) continue;
    best = rule;
    if (rule.effect === 'block') break; // rules are ordered best first: nothing beats it
  }
  if (!best) {
    const environment = input.environment ?? agent.environment;
    if (set.defaultDecision[environment] === 'block') {
      return {
        allowed: false,
        effect: 'block',
        matched: false,
        policy: null,
        policyVersion: null,
        ruleId: null,
        severity: 'medium',
        message: `No policy matched; blocked by the workspace's default decision for ${environment}`,
        result: 'blocked',
        requireProxy: false,
        monitored,
      };
    }
    return {
      allowed: true,
      effect: 'allow',
      matched: false,
      policy: null,
      policyVersion: null,
      ruleId: null,
      severity: 'info',
      message: 'No policy matched; allowed by default',
      result: 'allowed',
      requireProxy: false,
      monitored,
    };
  }
  return {
    allowed: best.effect === 'allow',
    effect: best.effect,
    matched: true,
    policy: best.policy,
    policyVersion: best.policyVersion,
    ruleId: best.ruleId,
    severity: best.severity,
    message: best.message ?? `${RESULT[best.effect].replace('_', ' ')} by policy '${best.policy}'`,
    result: RESULT[best.effect],
    requireProxy: best.requireProxy,
    monitored,
  };
}

/**
 * Decides on several views of one act (what runs, and what the caller declares) and returns
 * the strictest decision, the first view's on a tie: a declaration can add restrictions to an
 * execution, never lift one.
 */
export function decideStrictest(
  set: PolicySet,
  views: readonly DecisionInput[],
  agent: AgentFacts,
  sharedBudget = false,
  anyCall = false,
): Decision {
  let strictest: Decision | undefined;
  for (const view of views) {
    const decision = decide(set, view, agent, sharedBudget || strictest !== undefined, anyCall); // one budget for all views
    if (!strictest || RANK[decision.effect] > RANK[strictest.effect]) strictest = decision;
  }
  if (!strictest) throw new Error('decideStrictest needs at least one view');
  return strictest;
}

/**
 * Decides a list of acts (each on its views, as decideStrictest) on one budget for the whole
 * list, for a tool list: each act stands for any call with its facts (`anyCall`, see
 * ruleMatches), so a `block` answers that policy refuses every one of them. The decision of
 * each act, or null where its evaluation failed or found the budget spent.
 */
export function decideEach(set: PolicySet, acts: ReadonlyArray<readonly DecisionInput[]>, agent: AgentFacts): Array<Decision | null> {
  startDecisionBudget();
  return acts.map((views) => {
    try {
      return decideStrictest(set, views, agent, true, true);
    } catch {
      return null;
    }
  });
}
