/**
 * What-if replay (POST /policies/simulate): the workspace's recent recorded decisions decided
 * again, in memory, by a draft policy set on the live engine (engine.ts); nothing is written.
 *
 * The replay reads the decisions in keyset pages of text (simulate.repository.ts) and decides
 * each distinct act once: recorded decisions repeat the same agent, action, resource, tool,
 * environment, context and execution, and the engine's answer depends on nothing else (its
 * cost budget is counted, not timed), so an act's verdict is counted for every decision that
 * repeats it. Where it runs (a worker thread on PostgreSQL, this thread otherwise) and how
 * workspaces share it: simulate-runner.ts.
 */
import type { PolicySimulation, PolicySimulationRequest } from '@warden/contract';
import type { Kysely } from 'kysely';
import { iso } from '../../db/paginate.ts';
import type { DB } from '../../db/schema.ts';
import { ApiError } from '../../shared/errors.ts';
import {
  type AgentFacts,
  ConditionError,
  compilePolicySet,
  type DecisionInput,
  type DefaultDecisions,
  decideStrictest,
  type PolicySet,
} from './engine.ts';
import { budgetExceeded, checkWorkspaceLimits, ruleTotals } from './limits.ts';
import { checkLimits, checkRules } from './rule-checks.ts';
import { type DecisionCursor, decisionPage, type RecordedDecision } from './simulate.repository.ts';

type Result = RecordedDecision['recorded'];
type Group = PolicySimulation['groups'][number];
export type Replayed = Omit<PolicySimulation, 'duration_ms'>;

export const DEFAULT_SIMULATION_LIMIT = 1000;
const DECISIONS_PER_GROUP = 100;
const MAX_GROUPS = 1000;
const RESULT_INDEX: Record<Result, 0 | 1 | 2> = { allowed: 0, blocked: 1, approval_required: 2 };

/** Checks a draft set as createPolicy checks a policy (400 `invalid_policy`, names unique: 400 `invalid_request`). */
export function checkDraft(request: PolicySimulationRequest): void {
  const names = new Set<string>();
  for (const [index, policy] of request.policies.entries()) {
    if (names.has(policy.name)) throw new ApiError('invalid_request', `policies[${index}].name: '${policy.name}' is used twice`);
    names.add(policy.name);
    try {
      checkLimits(policy.rules ?? []);
      checkRules(policy.rules ?? []);
    } catch (error) {
      if (error instanceof ApiError) throw new ApiError(error.code, `policies[${index}]: ${error.message}`);
      throw error;
    }
  }
  const broken = checkWorkspaceLimits(ruleTotals(request.policies.flatMap((policy) => policy.rules ?? [])), {
    rules: 0,
    globs: 0,
    globCharacters: 0,
  });
  if (broken) throw new ApiError('invalid_policy', broken);
}

/** The draft set compiled as the live set is (enabled policies only), with the workspace's default decisions. */
export function compileDraft(request: PolicySimulationRequest, defaults: DefaultDecisions): PolicySet {
  return compilePolicySet(
    request.policies
      .filter((policy) => policy.enabled !== false)
      .map((policy) => ({
        name: policy.name,
        mode: policy.mode ?? 'enforce',
        priority: policy.priority ?? 100,
        version: 0,
        rules: policy.rules ?? [],
      })),
    defaults,
  );
}

/**
 * What the draft decides (the deciding policy and rule, or none) and the groups its changed
 * decisions fall in, by recorded result: one per outcome, shared by every act it decides.
 */
interface Outcome {
  now: Result;
  policy: string | null;
  rule: string | null;
  groups: [Group | null, Group | null, Group | null];
}
/** How the draft decides one distinct act. */
interface Verdict {
  outcome: Outcome;
  failed: boolean;
}

/** What of a decision the rules that can decide an action (and the agent's allow-lists) read, besides agent, action, environment and source. */
interface Reads {
  resource: boolean;
  tool: boolean;
  /** The execution's fields (HTTP and MCP matchers; the URL view of the resource). */
  execution: boolean;
  /** A condition reads everything: the context, the execution and every field of the input. */
  everything: boolean;
}

interface ActNode {
  /** Null until a decision of this action succeeded (then the engine has its rules memoised). */
  reads: Reads | null;
  agents: Map<string, AgentNode>;
}
interface AgentNode {
  reads: Reads;
  verdicts: Map<string, Verdict>;
  /** Lookups and hits of `verdicts`; acts that do not repeat (a context that always differs) are no longer kept. */
  lookups: number;
  hits: number;
  keep: boolean;
}

/** What the replay needs of an audited execution: whether it was hashed only, and the URL the act also is decided on. */
interface ExecutionFacts {
  approximate: boolean;
  url: string | undefined;
  /** Its JSON text, parsed when an act is decided. */
  text: string | null;
}
const NO_EXECUTION: ExecutionFacts = { approximate: false, url: undefined, text: null };

type Candidate = ReturnType<PolicySet['forAction']>['rules'][number];
/** Verdicts kept at once: acts that never repeat must not fill the heap. */
const MAX_VERDICTS = 20_000;
/** After this many lookups, an agent's acts of an action are kept only if at least one in KEEP_HIT_RATIO repeated. */
const KEEP_TRIAL = 256;
const KEEP_HIT_RATIO = 8;

/**
 * The replay's tally, fed page by page. Acts are decided once each: a decision's verdict is
 * kept under what the engine can read of it for its action — source (a bare evaluation cannot
 * use an allow that requires the proxy), agent, action and environment always; the resource,
 * tool and execution when a rule that can decide the action (or the agent's allow-lists)
 * matches on them; and everything, context included, when such a rule has a condition. A
 * failure that spent the decision's budget is never kept (the engine memoises its actions'
 * rules, so the first decision of an action spends more than later ones).
 */
export class Replay {
  readonly from = { allowed: 0, blocked: 0, approval_required: 0 };
  readonly to = { allowed: 0, blocked: 0, approval_required: 0 };
  replayed = 0;
  changed = 0;
  approximate = 0;
  failed = 0;
  /** Acts decided (the others were counted from a kept verdict). */
  decided = 0;
  private verdicts = 0;
  private readonly acts = new Map<string, ActNode>();
  /** Outcomes by deciding policy, rule and result (Map keys may be null). */
  private readonly outcomes = new Map<string | null, Map<string | null, [Outcome | null, Outcome | null, Outcome | null]>>();
  /** In the order they were first met, newest decision first, as the answer lists them before sorting by count. */
  private readonly groups: Group[] = [];
  private readonly unknownAgents = new Map<string, AgentFacts>();

  constructor(
    private readonly set: PolicySet,
    private readonly agents: ReadonlyMap<string, AgentFacts>,
  ) {}

  add(rows: readonly RecordedDecision[]): void {
    for (const row of rows) {
      let act = this.acts.get(row.action);
      if (act === undefined) {
        act = { reads: null, agents: new Map() };
        this.acts.set(row.action, act);
      }
      const execution = row.execution === null ? NO_EXECUTION : executionFacts(row.execution);
      let verdict: Verdict | undefined;
      let node: AgentNode | undefined;
      let key = '';
      if (act.reads !== null) {
        node = this.agentNode(act, act.reads, row);
        if (node.keep) {
          key = actKey(node.reads, row, execution);
          verdict = node.verdicts.get(key);
          node.lookups++;
          if (verdict !== undefined) node.hits++;
          else if (node.lookups >= KEEP_TRIAL && node.hits * KEEP_HIT_RATIO < node.lookups) {
            node.keep = false;
            this.verdicts -= node.verdicts.size;
            node.verdicts.clear();
          }
        }
      }
      if (verdict === undefined) {
        verdict = this.decide(row, execution);
        if (act.reads === null && !verdict.failed) act.reads = this.readsOf(row.action);
        if (node?.keep && !(verdict.failed && budgetExceeded())) this.keep(node.verdicts, key, verdict);
      }
      const recorded = row.recorded;
      const outcome = verdict.outcome;
      this.replayed++;
      this.from[recorded]++;
      this.to[outcome.now]++;
      if (execution.approximate) this.approximate++;
      if (verdict.failed) this.failed++;
      if (outcome.now === recorded) continue;
      this.changed++;
      const index = RESULT_INDEX[recorded];
      let group = outcome.groups[index];
      if (group === null) {
        group = { policy: outcome.policy, rule: outcome.rule, from: recorded, to: outcome.now, count: 0, decisions: [] };
        outcome.groups[index] = group;
        this.groups.push(group);
      }
      group.count++;
      if (group.decisions.length < DECISIONS_PER_GROUP) {
        group.decisions.push({
          event_id: row.id,
          event_timestamp: iso(row.at),
          agent: row.agent,
          action: row.action,
          resource: row.resource,
          from: recorded,
          to: outcome.now,
        });
      }
    }
  }

  result(): Replayed {
    return {
      replayed: this.replayed,
      changed: this.changed,
      approximate: this.approximate,
      failed: this.failed,
      from: this.from,
      to: this.to,
      groups: [...this.groups].sort((a, b) => b.count - a.count).slice(0, MAX_GROUPS),
    };
  }

  private keep(kept: Map<string, Verdict>, key: string, verdict: Verdict): void {
    if (this.verdicts >= MAX_VERDICTS) {
      for (const act of this.acts.values()) for (const other of act.agents.values()) other.verdicts.clear();
      this.verdicts = 0;
    }
    kept.set(key, verdict);
    this.verdicts++;
  }

  /**
   * What the rules that can decide `action` read. Asked right after a decision of that action
   * succeeded, so the engine answers from its memo and spends no budget.
   */
  private readsOf(action: string): Reads {
    const reads: Reads = { resource: false, tool: false, execution: false, everything: false };
    const { rules, monitorRules } = this.set.forAction(action);
    const read = (rule: Candidate) => {
      if (rule.condition !== null) reads.everything = true;
      for (const [field] of rule.matchers) {
        if (field === 'resource') reads.resource = true;
        else if (field === 'tool') reads.tool = true;
        else if (field === 'method' || field === 'host' || field === 'path' || field === 'url' || field === 'server')
          reads.execution = true;
      }
    };
    for (const rule of rules) read(rule);
    for (const rule of monitorRules) read(rule);
    return reads;
  }

  private agentNode(act: ActNode, reads: Reads, row: RecordedDecision): AgentNode {
    const slug = row.agent ?? '';
    let node = act.agents.get(slug);
    if (node === undefined) {
      const agent = this.agents.get(slug);
      node = {
        reads: {
          resource: reads.resource || (agent !== undefined && agent.allowed_resources.length > 0),
          tool: reads.tool || (agent !== undefined && agent.allowed_tools.length > 0),
          execution: reads.execution,
          everything: reads.everything,
        },
        verdicts: new Map(),
        lookups: 0,
        hits: 0,
        keep: true,
      };
      act.agents.set(slug, node);
    }
    return node;
  }

  private outcomeOf(policy: string | null, rule: string | null, now: Result): Outcome {
    let byRule = this.outcomes.get(policy);
    if (byRule === undefined) {
      byRule = new Map();
      this.outcomes.set(policy, byRule);
    }
    let byResult = byRule.get(rule);
    if (byResult === undefined) {
      byResult = [null, null, null];
      byRule.set(rule, byResult);
    }
    const index = RESULT_INDEX[now];
    let outcome = byResult[index];
    if (outcome === null) {
      outcome = { now, policy, rule, groups: [null, null, null] };
      byResult[index] = outcome;
    }
    return outcome;
  }

  private agentOf(slug: string | null, environment: string | undefined): AgentFacts {
    const known = this.agents.get(slug ?? '');
    if (known) return known;
    // A deleted agent keeps its slug and the environment its decision was made in.
    const key = `${slug ?? ''}\u0000${environment ?? ''}`;
    let agent = this.unknownAgents.get(key);
    if (!agent) {
      agent = {
        id: '',
        slug: slug ?? '',
        name: slug ?? '',
        status: 'active',
        environment: environment ?? 'production',
        risk_level: null,
        allowed_tools: [],
        allowed_resources: [],
      };
      this.unknownAgents.set(key, agent);
    }
    return agent;
  }

  private decide(row: RecordedDecision, execution: ExecutionFacts): Verdict {
    this.decided++;
    const environment = row.environment ?? undefined;
    const agent = this.agentOf(row.agent, environment);
    const declared: DecisionInput = { action: row.action };
    if (row.resource !== null) declared.resource = row.resource;
    if (row.tool !== null) declared.tool = row.tool;
    if (environment !== undefined) declared.environment = environment;
    if (row.input !== null) declared.context = JSON.parse(row.input) as Record<string, unknown>;
    // The audited execution (secrets redacted, bodies hashed) stands for what ran.
    declared.execution = (execution.text === null ? null : JSON.parse(execution.text)) as DecisionInput['execution'];
    const views =
      execution.url !== undefined && execution.url !== declared.resource
        ? [{ ...declared, resource: execution.url }, declared]
        : [declared];
    try {
      const decision = decideStrictest(this.set, views, agent);
      const now = decision.allowed && decision.requireProxy && row.source === 'evaluation' ? 'blocked' : decision.result;
      return { outcome: this.outcomeOf(decision.policy, decision.ruleId, now), failed: false };
    } catch (error) {
      if (!(error instanceof ConditionError)) throw error;
      return { outcome: this.outcomeOf(error.policy, error.ruleId, 'blocked'), failed: true };
    }
  }
}

/** Parsed only when it can hold a hash or an HTTP execution's URL (JSON text does not escape these names). */
function executionFacts(text: string): ExecutionFacts {
  if (!text.includes('_sha256') && !text.includes('http_proxy')) return { approximate: false, url: undefined, text };
  const value = JSON.parse(text) as Record<string, unknown> | null;
  if (value === null) return NO_EXECUTION;
  return {
    approximate: Boolean(value.body_sha256 || value.arguments_sha256 || value.params_sha256),
    url: value.mode === 'http_proxy' ? (value.url as string | undefined) : undefined,
    text,
  };
}

/**
 * An act's key under what its rules read: which optional fields are null (one character),
 * then the read fields, NUL-separated (PostgreSQL text holds no NUL).
 */
function actKey(reads: Reads, row: RecordedDecision, execution: ExecutionFacts): string {
  const all = reads.everything;
  const resource = all || reads.resource;
  const tool = all || reads.tool;
  const withExecution = all || reads.resource || reads.execution;
  let nulls = 0;
  let key = row.source === 'evaluation' ? 'e' : 'x';
  if (row.environment === null) nulls |= 1;
  else key += row.environment;
  if (resource) {
    if (row.resource === null) nulls |= 2;
    else key += `\u0000${row.resource}`;
  }
  if (tool) {
    if (row.tool === null) nulls |= 4;
    else key += `\u0000${row.tool}`;
  }
  if (all) {
    if (row.input === null) nulls |= 8;
    else key += `\u0000${row.input}`;
  }
  if (withExecution) {
    if (row.execution === null) nulls |= 16;
    else key += `\u0000${row.execution}`;
  } else if (execution.url !== undefined && execution.url !== row.resource) {
    nulls |= 32; // decided on two views (each spends budget), whatever the URL
  }
  return String.fromCharCode(65 + nulls) + key;
}

/** What the replay decides with besides the draft: the workspace's agents as registered now and its default decisions. */
export interface ReplayFacts {
  agents: AgentFacts[];
  defaults: DefaultDecisions;
}

export interface ReplayOptions {
  /** Decisions read per query. */
  pageSize: number;
  /** Awaited between pages, after the next page was asked for (the inline runner yields to other requests there). */
  pause?: () => Promise<void>;
}

/**
 * Replays the workspace's `limit` most recent decisions with a checked draft (checkDraft). The
 * next page is asked for before this one is decided, so the database reads while this thread
 * decides.
 */
export async function replayDecisions(
  db: Kysely<DB>,
  workspaceId: string,
  request: PolicySimulationRequest,
  facts: ReplayFacts,
  options: ReplayOptions,
): Promise<Replayed> {
  const limit = request.limit ?? DEFAULT_SIMULATION_LIMIT;
  const replay = new Replay(compileDraft(request, facts.defaults), new Map(facts.agents.map((agent) => [agent.slug, agent])));
  let left = limit;
  let asked = Math.min(options.pageSize, left);
  let next: Promise<RecordedDecision[]> | null = decisionPage(db, workspaceId, asked, null);
  while (next) {
    const rows: RecordedDecision[] = await next;
    left -= rows.length;
    const last = rows.at(-1);
    next = null;
    if (last && rows.length === asked && left > 0) {
      asked = Math.min(options.pageSize, left);
      const cursor: DecisionCursor = { at: last.at, id: last.id };
      next = decisionPage(db, workspaceId, asked, cursor);
      next.catch(() => {}); // awaited below; until then a failure must not count as unhandled
    }
    replay.add(rows);
    if (next && options.pause) await options.pause();
  }
  return replay.result();
}
