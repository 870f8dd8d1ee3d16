/**
 * The decision pipeline shared by /policy/evaluate, /runtime/execute and /runtime/mcp/*:
 *   1. resolve and check the acting agent;
 *   2. check the environment against the registry;
 *   3. decide in memory on the cached, compiled policy set, on what will run as well as on
 *      what the caller declares (the stricter view wins: see act.ts);
 *   4. apply an approval (use an approved one for this exact act, or ask for a new one);
 *   5. record the decision (audit event + outbox, approval changes) in one transaction
 *      before answering; if that fails the answer is 503 and nothing is allowed.
 */
import { SpanStatusCode, trace } from '@opentelemetry/api';
import type { EvaluationInput, EvaluationResult } from '@warden/contract';
import type { Kysely } from 'kysely';
import type { DB } from '../../db/schema.ts';
import { inTransaction } from '../../db/transaction.ts';
import { NO_TELEMETRY, type Telemetry } from '../../observability/telemetry.ts';
import type { RequestContext } from '../../shared/context.ts';
import { ApiError } from '../../shared/errors.ts';
import { actDigest, approvalTitle, auditedExecution, declaredInput, type ExecutionFacts, mcpFacts, shownExecution } from '../acts/act.ts';
import { CREDENTIAL_HEADERS } from '../acts/http-form.ts';
import type { AgentRow } from '../agents/agents.repository.ts';
import { type ApprovalWait, awaitApproval, type WaitOptions } from '../approvals/approval-wait.ts';
import { findApproval, findApprovalForAct } from '../approvals/approvals.repository.ts';
import { consumeApprovalFor, insertPendingApproval, toApproval } from '../approvals/approvals.service.ts';
import { persistOrRefuse, recordIn } from '../audit/audit.service.ts';
import type { AuditRecord } from '../audit/audit-event.ts';
import type { AuditWriter } from '../audit/audit-writer.ts';
import { type AgentDirectory, assertActive, resolveAgent } from '../identity/agent-identity.ts';
import type { PolicySet } from '../policies/engine.ts';
import { ConditionError, type Decision, type DecisionInput, decideEach, decideStrictest } from '../policies/engine.ts';
import type { PolicyCache } from '../policies/policy-cache.ts';

/** The refusal of "agents hold no credentials" (settings): an HTTP act whose own headers carry a credential. */
function agentCredentialRefusal(set: PolicySet, facts: ExecutionFacts | null): ApiError | undefined {
  if (!set.agentsHoldNoCredentials || facts?.mode !== 'http_proxy') return undefined;
  const carried = Object.keys(facts.headers).filter((name) => CREDENTIAL_HEADERS.has(name));
  if (carried.length === 0) return undefined;
  return new ApiError(
    'agent_credentials_refused',
    `this workspace's agents hold no credentials: execution.headers may not carry ${carried.join(', ')}; name a workspace credential (execution.credential) instead`,
  );
}

export interface DecisionRequest {
  input: EvaluationInput;
  approvalId?: string;
  source: 'evaluation' | 'execution' | 'mcp';
  /** True when Warden itself will perform the action (execution and MCP proxies). */
  viaProxy: boolean;
  /** What Warden's proxy will run; absent for a bare evaluation. */
  execution?: ExecutionFacts;
  /** The action an MCP operation stands for, whatever the caller declares. */
  fixedAction?: string;
  /**
   * When no approval is named and policy requires one, the approval of this agent for this
   * exact act (its digest) decides it: a caller that cannot name one (an MCP client) retries
   * the same act and gets it decided by the approval it already asked for.
   */
  retried?: boolean;
  /**
   * Why the act is refused whatever policy says (a credential named for a host it is not bound
   * to): recorded as a blocked decision, then thrown, once the agent is known.
   */
  refusal?: ApiError;
}

export interface DecisionOutcome {
  result: EvaluationResult;
  agent: AgentRow;
  environment: string;
  /** The declared input, completed by what runs (see declaredInput). */
  input: EvaluationInput;
  execution: ExecutionFacts | null;
  source: DecisionRequest['source'];
}

/** What the audit event of an act's outcome repeats of its decision: kept with an MCP task, whose end is recorded later. */
export function outcomeBasis(decided: DecisionOutcome) {
  const { agent, input, result } = decided;
  return {
    source: decided.source,
    agent: agent.slug,
    agentId: agent.id,
    action: input.action,
    resource: input.resource,
    tool: input.tool,
    environment: decided.environment,
    policy: result.policy,
    severity: result.severity,
    approvalId: result.approval_id,
    execution: decided.execution ? auditedExecution(decided.execution, false) : undefined,
    decisionEventId: result.audit_event_id,
  };
}
export type OutcomeBasis = ReturnType<typeof outcomeBasis>;

/** The audit record of an act's outcome (`requestId`: the request that saw it, if a request did). */
export function outcomeRecord(requestId: string | undefined, basis: OutcomeBasis, outcome: ExecutionOutcome): AuditRecord {
  const { execution, decisionEventId, severity, ...event } = basis;
  return {
    ...event,
    result: outcome.result,
    severity: outcome.result === 'blocked' ? 'high' : severity,
    message: outcome.message,
    requestId,
    context: { ...outcome.context, ...(execution ? { execution } : {}), decision_event_id: decisionEventId },
  };
}

/**
 * The views of an act that policy decides on: what runs (an HTTP execution's resource is its
 * URL, an MCP operation's action is fixed) and, when it differs, what the caller declares.
 */
function views(declared: DecisionInput, fixedAction: string | undefined): DecisionInput[] {
  const facts = declared.execution;
  const executed =
    facts?.mode === 'http_proxy' && declared.resource !== facts.url
      ? { ...declared, resource: facts.url }
      : fixedAction !== undefined && declared.action !== fixedAction
        ? { ...declared, action: fixedAction }
        : declared;
  return executed === declared ? [declared] : [executed, declared];
}

type ApprovalStep = { kind: 'none' } | { kind: 'create' } | { kind: 'consume'; id: string } | { kind: 'reuse'; id: string };

export interface ExecutionOutcome {
  result: 'allowed' | 'blocked';
  message: string;
  context: Record<string, unknown>;
}

const tracer = trace.getTracer('warden');

export class DecisionService {
  constructor(
    private readonly db: Kysely<DB>,
    private readonly policies: PolicyCache,
    private readonly agents: AgentDirectory,
    private readonly auditWriter: AuditWriter,
    private readonly telemetry: Telemetry = NO_TELEMETRY,
  ) {}

  /** Decides in a `warden.decision` span (a no-op unless traces are on: observability/tracing.ts). */
  decide(ctx: RequestContext, request: DecisionRequest): Promise<DecisionOutcome> {
    return tracer.startActiveSpan('warden.decision', { attributes: { 'warden.decision.source': request.source } }, async (span) => {
      try {
        const outcome = await this.decideNow(ctx, request);
        span.setAttribute('warden.decision.result', outcome.result.result);
        return outcome;
      } catch (error) {
        span.setStatus({ code: SpanStatusCode.ERROR, message: error instanceof ApiError ? error.code : 'error' });
        throw error;
      } finally {
        span.end();
      }
    });
  }

  private async decideNow(ctx: RequestContext, request: DecisionRequest): Promise<DecisionOutcome> {
    const workspaceId = ctx.auth.workspaceId;
    const facts = request.execution ?? null;
    const input = declaredInput(request.input, facts);

    // 1. who acts
    const agent = await resolveAgent(this.agents, ctx.auth, input.agent, ctx.agentKey);
    assertActive(agent);

    // 2. where
    const set = await this.policies.get(workspaceId, ctx.auth.policyVersion);
    // what the audit keeps of an MCP act's arguments: the workspace's setting (docs/decisions/0026-audited-mcp-arguments.md)
    const audited = (facts: ExecutionFacts) => auditedExecution(facts, set.auditMcpArguments !== 'digest');
    if (input.environment !== undefined && input.environment !== agent.environment) {
      throw new ApiError('environment_mismatch', `agent '${agent.slug}' is registered for ${agent.environment}, not ${input.environment}`);
    }
    if (input.environment === undefined && set.usesEnvironment) {
      throw new ApiError('environment_context_required', 'Policies of this workspace match on environment: state input.environment');
    }
    const environment = input.environment ?? agent.environment;
    const record = (
      decision: Pick<Decision, 'result' | 'severity' | 'message' | 'policy'>,
      extra: Partial<AuditRecord> = {},
    ): AuditRecord => ({
      source: request.source,
      agent: agent.slug,
      agentId: agent.id,
      action: input.action,
      resource: input.resource,
      tool: input.tool,
      environment,
      policy: decision.policy,
      result: decision.result,
      severity: decision.severity,
      message: decision.message,
      requestId: ctx.requestId,
      ...extra,
    });
    const declared: DecisionInput = { ...input, environment, execution: facts };

    // refused whatever policy says: recorded, with the act, before anything is sent
    const refusal = request.refusal ?? agentCredentialRefusal(set, facts);
    if (refusal) {
      await persistOrRefuse(() =>
        this.auditWriter.write(
          workspaceId,
          record(
            { result: 'blocked', severity: 'high', message: refusal.message, policy: null },
            { context: { refusal: refusal.code, ...(facts ? { execution: audited(facts) } : {}) } },
          ),
        ),
      );
      this.telemetry.decision('blocked', request.source);
      throw refusal;
    }

    // 3. decide
    let decision: Decision;
    try {
      decision = decideStrictest(set, views(declared, request.fixedAction), agent);
    } catch (error) {
      if (!(error instanceof ConditionError)) throw error;
      const message = `condition of policy '${error.policy}' failed: ${error.message}`;
      await persistOrRefuse(() =>
        this.auditWriter.write(
          workspaceId,
          record(
            { result: 'blocked', severity: 'high', message, policy: error.policy },
            { context: { rule: error.ruleId, ...(facts ? { execution: audited(facts) } : {}) } },
          ),
        ),
      );
      this.telemetry.decision('blocked', request.source);
      throw new ApiError('evaluation_failed', message);
    }

    // 4. approvals
    let step: ApprovalStep = decision.effect === 'require_approval' ? { kind: 'create' } : { kind: 'none' };
    let digest: string | undefined;
    const actDigestOnce = () => (digest ??= actDigest(agent.id, environment, input, facts));
    const namedApproval =
      request.approvalId ??
      (decision.effect === 'require_approval' && request.retried
        ? await findApprovalForAct(this.db, workspaceId, agent.id, actDigestOnce())
        : undefined);
    if (namedApproval !== undefined) {
      const approval = await findApproval(this.db, workspaceId, namedApproval);
      if (!approval) throw new ApiError('approval_invalid', `approval_id names no approval of this workspace`);
      if (approval.input_digest === null)
        throw new ApiError('approval_invalid', `approval '${approval.id}' pins no act, so it authorises no runtime decision`);
      if (approval.agent_id !== agent.id || approval.input_digest !== actDigestOnce())
        throw new ApiError(
          'approval_invalid',
          `approval '${approval.id}' authorises another act: the agent, environment, action, resource, tool, context or execution differ`,
        );
      const askedByThisRule =
        (approval.policy_name === null || approval.policy_name === decision.policy) &&
        (approval.rule_id === null || approval.rule_id === decision.ruleId);
      if (decision.effect === 'require_approval' && !askedByThisRule)
        throw new ApiError('approval_invalid', `approval '${approval.id}' was asked for by another rule than the one deciding now`);
      const status = toApproval(approval).status;
      // An approval is usable once, and only before it expires — whether it was decided or not.
      if (approval.consumed_at !== null) throw new ApiError('approval_invalid', `approval '${approval.id}' is already used`);
      if (new Date(approval.expires_at).getTime() <= Date.now()) {
        this.telemetry.approvalExpired();
        throw new ApiError('approval_invalid', `approval '${approval.id}' has expired`);
      }
      if (decision.effect === 'require_approval') {
        if (status === 'approved') {
          decision = { ...decision, allowed: true, result: 'allowed', message: `Allowed by approval ${approval.id}` };
          step = { kind: 'consume', id: approval.id };
        } else if (status === 'rejected') {
          decision = { ...decision, allowed: false, effect: 'block', result: 'blocked', message: `Approval ${approval.id} was rejected` };
          step = { kind: 'none' };
        } else {
          step = { kind: 'reuse', id: approval.id };
        }
      }
    }

    // The rule allows only through Warden's proxy: a bare evaluation is refused (and recorded).
    const proxyRefused = decision.allowed && decision.requireProxy && !request.viaProxy;
    if (proxyRefused)
      decision = {
        ...decision,
        allowed: false,
        result: 'blocked',
        message: 'This action may only run through Warden\u2019s execution proxy',
      };

    // 5. record, then answer
    const context: Record<string, unknown> = {};
    if (decision.ruleId) context.rule = decision.ruleId;
    if (decision.monitored.length) context.monitored = decision.monitored;
    if (input.context) context.input = input.context;
    if (facts) context.execution = audited(facts);
    // Batched when the decision touches no approval; in a transaction with the approval's
    // change otherwise.
    const writeEvent = (db: Kysely<DB>, approvalId: string | null) =>
      recordIn(db, workspaceId, record(decision, { approvalId, context })).then((event) => ({ approvalId, eventId: event.id }));
    const { approvalId, eventId } = await persistOrRefuse(() => {
      // the hot path: batched with concurrent decisions (group commit), durable before the answer
      if (step.kind === 'none' || step.kind === 'reuse') {
        const approvalId = step.kind === 'reuse' ? step.id : null;
        return this.auditWriter
          .write(workspaceId, record(decision, { approvalId, context }))
          .then((event) => ({ approvalId, eventId: event.id }));
      }
      const approvalStep = step;
      return inTransaction(this.db, async (trx) => {
        if (approvalStep.kind === 'consume') {
          if (!(await consumeApprovalFor(trx, workspaceId, approvalStep.id, ctx.auth.keyName)))
            throw new ApiError('approval_invalid', `approval '${approvalStep.id}' is already used`);
          return writeEvent(trx, approvalStep.id);
        }
        const approval = await insertPendingApproval(trx, workspaceId, {
          title: approvalTitle(input, facts, agent.slug),
          description: decision.message,
          type: 'policy',
          priority: decision.severity === 'critical' ? 'urgent' : decision.severity === 'high' ? 'high' : 'normal',
          agent: { id: agent.id, slug: agent.slug },
          policy: decision.policy,
          action: input.action,
          resource: input.resource ?? null,
          context: input.context,
          requestedBy: ctx.auth.keyName,
          act: {
            digest: actDigestOnce(),
            environment,
            tool: input.tool ?? null,
            execution: facts ? shownExecution(facts) : null,
            rule: decision.ruleId,
            policyVersion: decision.policyVersion,
          },
        });
        return writeEvent(trx, approval.id);
      });
    });
    this.telemetry.decision(decision.result, request.source);
    if (step.kind === 'create') this.telemetry.approvalCreated();
    if (proxyRefused) throw new ApiError('execution_proxy_required', 'This action may only run through /runtime/execute or /runtime/mcp/*');

    return {
      agent,
      environment,
      input,
      execution: facts,
      source: request.source,
      result: {
        allowed: decision.allowed,
        action: decision.effect,
        matched: decision.matched,
        policy: decision.policy,
        severity: decision.severity,
        message: decision.message,
        result: decision.result,
        approval_id: approvalId,
        execution_proxy_required: decision.requireProxy,
        audit_event_id: eventId,
      },
    };
  }

  /**
   * Records what an allowed execution did (a second audit event, after the decision's). If
   * it cannot be stored, the caller answers 503 and the upstream's answer is not handed out.
   */
  async recordOutcome(ctx: RequestContext, decided: DecisionOutcome, outcome: ExecutionOutcome): Promise<void> {
    await persistOrRefuse(() => this.auditWriter.write(ctx.auth.workspaceId, outcomeRecord(ctx.requestId, outcomeBasis(decided), outcome)));
  }

  /** Holds an act open until its approval `id` is decided (or `options.until`, or the caller goes). */
  awaitApproval(ctx: RequestContext, id: string, options: WaitOptions): Promise<ApprovalWait> {
    return awaitApproval(this.db, ctx.auth.workspaceId, id, options);
  }

  /**
   * The tools policy would let this agent call on the server it discovered (in memory, not
   * recorded): for tool lists. Each is decided as any call of it (engine.ts decideEach: a rule
   * whose condition reads the call's arguments cannot hide it, each call is decided when made),
   * on the executed view and the discovery's declared input with that tool. The whole list
   * spends one decision's budget: a tool whose check fails or finds the budget spent is left
   * out (fail closed).
   */
  async allowedTools(ctx: RequestContext, decided: DecisionOutcome, server: string, tools: readonly string[]): Promise<Set<string>> {
    const set = await this.policies.get(ctx.auth.workspaceId, ctx.auth.policyVersion);
    const acts = tools.map((tool) => {
      const declared: DecisionInput = {
        ...decided.input,
        environment: decided.environment,
        tool,
        execution: mcpFacts(server, { method: 'tools/call', params: { name: tool } }),
      };
      return [{ ...declared, action: 'mcp.call' }, declared];
    });
    const decisions = decideEach(set, acts, decided.agent);
    // a failing condition, or the listing's budget spent, hides the tool
    return new Set(tools.filter((_, i) => decisions[i] && decisions[i].effect !== 'block'));
  }
}
