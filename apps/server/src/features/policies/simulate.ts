/**
 * What-if replay (POST /policies/simulate): the workspace's recent recorded decisions decided
 * again, in memory, on the live engine (engine.ts), once by the current policy set and once by
 * the draft; the draft's effect is what differs between the two, and drift is what differs
 * between the recorded result and the current set's (docs/decisions/0023-what-if-effect-and-drift.md).
 * Nothing is written.
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
import type { DB } from '../../db/schema.ts';
import { ApiError } from '../../shared/errors.ts';
import { actViews, MCP_METHOD_ACTIONS, mcpToolAddress } from '../acts/act.ts';
import {
  type AgentFacts,
  ConditionError,
  compilePolicySet,
  type DecisionInput,
  type DefaultDecisions,
  decideStrictest,
  type PolicySet,
  type PolicySource,
} from './engine.ts';
import { budgetExceeded, checkWorkspaceLimits, ruleTotals } from './limits.ts';
import { checkLimits, checkRules } from './rule-checks.ts';
import { type DecisionCursor, decisionPage, type RecordedDecision } from './simulate.repository.ts';
import { type Outcome, Tally } from './simulate-tally.ts';

export type Replayed = Omit<PolicySimulation, 'duration_ms'>;

export const DEFAULT_SIMULATION_LIMIT = 1000;

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

/** The draft set compiled as the live set is (enabled policies only), with the workspace's default decisions but those the draft sets. */
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
    { ...defaults, ...request.default_decision },
  );
}

/** How the current set and the draft decide one distinct act. */
interface Verdict {
  current: Outcome;
  draft: Outcome;
  currentFailed: boolean;
  failed: boolean;
  /** A failure that spent the decision's budget: never kept (see Replay). */
  spent: boolean;
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
  /** Null until a decision of this action succeeded on both sets (then the engine has its rules memoised). */
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

/**
 * What the replay needs of an audited execution: whether it was hashed only, and whether the
 * act is also decided on views other than the declared one (acts/act.ts `actViews`: an HTTP
 * execution's URL, an MCP tool call's address, an MCP method's fixed action).
 */
interface ExecutionFacts {
  approximate: boolean;
  /** The URL or tool address the act is also decided on, when it differs from the recorded resource. */
  executedResource: string | undefined;
  /** The MCP method's action (MCP_METHOD_ACTIONS), when it differs from the recorded action. */
  fixedAction: string | undefined;
  /** Its JSON text, parsed when an act is decided. */
  text: string | null;
}
const NO_EXECUTION: ExecutionFacts = { approximate: false, executedResource: undefined, fixedAction: undefined, text: null };

type Candidate = ReturnType<PolicySet['forAction']>['rules'][number];
/** Verdicts kept at once: acts that never repeat must not fill the heap. */
const MAX_VERDICTS = 20_000;
/** After this many lookups, an agent's acts of an action are kept only if at least one in KEEP_HIT_RATIO repeated. */
const KEEP_TRIAL = 256;
const KEEP_HIT_RATIO = 8;

/**
 * The replay's tally, fed page by page. Each recorded decision is decided twice, by the
 * workspace's current set and by the draft: what the draft changes is the difference between
 * those two (`effect`), and what changed since the decision was recorded — policies edited or
 * deleted, default decisions, agents — is the difference between the recorded result and the
 * current set's (`drift`), never charged to the draft.
 *
 * Acts are decided once each: a decision's verdicts are kept under what either set can read of
 * it for its action — source (a bare evaluation cannot use an allow that requires the proxy),
 * agent, action and environment always; the resource, tool and execution when a rule that can
 * decide the action (or the agent's allow-lists) matches on them; and everything, context
 * included, when such a rule has a condition. A failure that spent the decision's budget is
 * never kept (the engine memoises its actions' rules, so the first decision of an action
 * spends more than later ones).
 */
export class Replay {
  replayed = 0;
  approximate = 0;
  /** Acts decided (the others were counted from a kept verdict). */
  decided = 0;
  /** Current set → draft: what the draft changes. */
  private readonly effect = new Tally();
  /** Recorded → current set: what changed since the decisions were recorded. */
  private readonly drift = new Tally();
  private verdicts = 0;
  private readonly acts = new Map<string, ActNode>();
  private readonly unknownAgents = new Map<string, AgentFacts>();

  constructor(
    private readonly current: PolicySet,
    private readonly draft: PolicySet,
    private readonly agents: ReadonlyMap<string, AgentFacts>,
  ) {}

  add(rows: readonly RecordedDecision[]): void {
    for (const row of rows) {
      const execution = row.execution === null ? NO_EXECUTION : executionFacts(row);
      // decided on the method's action too: what the rules of both read
      const actions = execution.fixedAction === undefined ? row.action : `${row.action}\u0001${execution.fixedAction}`;
      let act = this.acts.get(actions);
      if (act === undefined) {
        act = { reads: null, agents: new Map() };
        this.acts.set(actions, act);
      }
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
        if (act.reads === null && !verdict.failed && !verdict.currentFailed) act.reads = this.readsOf(row.action, execution.fixedAction);
        if (node?.keep && !verdict.spent) this.keep(node.verdicts, key, verdict);
      }
      this.replayed++;
      if (execution.approximate) this.approximate++;
      this.drift.count(row, row.recorded, verdict.current, verdict.currentFailed);
      this.effect.count(row, verdict.current.now, verdict.draft, verdict.failed);
    }
  }

  result(): Replayed {
    return { replayed: this.replayed, approximate: this.approximate, ...this.effect.result(), drift: this.drift.result() };
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
   * What the rules of either set that can decide `action` (and the MCP method's fixed action)
   * read. Asked right after a decision of them succeeded on both, so the engine answers from its memos and spends no budget.
   */
  private readsOf(action: string, fixedAction: string | undefined): Reads {
    const reads: Reads = { resource: false, tool: false, execution: false, everything: false };
    const read = (rule: Candidate) => {
      if (rule.condition !== null) reads.everything = true;
      for (const [field] of rule.matchers) {
        if (field === 'resource') reads.resource = true;
        else if (field === 'tool') reads.tool = true;
        else if (field === 'method' || field === 'host' || field === 'path' || field === 'url' || field === 'server')
          reads.execution = true;
      }
    };
    for (const set of [this.current, this.draft])
      for (const name of fixedAction === undefined ? [action] : [action, fixedAction]) {
        const { rules, monitorRules } = set.forAction(name);
        for (const rule of rules) read(rule);
        for (const rule of monitorRules) read(rule);
      }
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
    // the views the server decided on (its fixed action is the method's: MCP_METHOD_ACTIONS)
    const views = actViews(declared, execution.fixedAction);
    const current = decideOn(this.current, this.drift, views, agent, row.source);
    const draft = decideOn(this.draft, this.effect, views, agent, row.source);
    return {
      current: current.outcome,
      draft: draft.outcome,
      currentFailed: current.failed,
      failed: draft.failed,
      spent: current.spent || draft.spent,
    };
  }
}

/** One set's decision of an act, as its tally's outcome; a condition error blocks, as it would live. */
function decideOn(set: PolicySet, tally: Tally, views: DecisionInput[], agent: AgentFacts, source: string) {
  try {
    const decision = decideStrictest(set, views, agent);
    const now = decision.allowed && decision.requireProxy && source === 'evaluation' ? 'blocked' : decision.result;
    return { outcome: tally.outcomeOf(decision.policy, decision.ruleId, now), failed: false, spent: false };
  } catch (error) {
    if (!(error instanceof ConditionError)) throw error;
    return { outcome: tally.outcomeOf(error.policy, error.ruleId, 'blocked'), failed: true, spent: budgetExceeded() };
  }
}

/** Parsed only when it can hold a hash or name a mode (JSON text does not escape these names). */
function executionFacts(row: RecordedDecision): ExecutionFacts {
  const text = row.execution as string;
  if (!text.includes('_sha256') && !text.includes('_proxy')) return { ...NO_EXECUTION, text };
  const value = JSON.parse(text) as Record<string, unknown> | null;
  if (value === null) return NO_EXECUTION;
  const executed =
    value.mode === 'http_proxy'
      ? (value.url as string | undefined)
      : value.mode === 'mcp_proxy' && typeof value.tool === 'string'
        ? mcpToolAddress(String(value.server), value.tool)
        : undefined;
  const fixed = value.mode === 'mcp_proxy' ? MCP_METHOD_ACTIONS[String(value.method)] : undefined;
  return {
    approximate: Boolean(value.body_sha256 || value.arguments_sha256 || value.params_sha256),
    executedResource: executed !== row.resource ? executed : undefined,
    fixedAction: fixed !== row.action ? fixed : undefined,
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
  } else if (execution.executedResource !== undefined) {
    nulls |= 32; // decided on two views (each spends budget), whatever the URL
  }
  // the method's action is a view of its own: two methods under one declared action are two acts
  if (execution.fixedAction !== undefined) key += `\u0001${execution.fixedAction}`;
  return String.fromCharCode(65 + nulls) + key;
}

/** What the replay decides with besides the draft: the workspace's enabled policies, agents as registered now and default decisions. */
export interface ReplayFacts {
  policies: PolicySource[];
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
  const replay = new Replay(
    compilePolicySet(facts.policies, facts.defaults),
    compileDraft(request, facts.defaults),
    new Map(facts.agents.map((agent) => [agent.slug, agent])),
  );
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
