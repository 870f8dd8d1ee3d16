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
import { NO_TELEMETRY, type Telemetry } from '../../observability/telemetry.ts';
import type { RequestContext } from '../../shared/context.ts';
import { ApiError } from '../../shared/errors.ts';
import {
  actDigest,
  actViews,
  approvalTitle,
  auditedExecution,
  declaredInput,
  type ExecutionFacts,
  mcpFacts,
  shownExecution,
} from '../acts/act.ts';
import { CREDENTIAL_HEADERS } from '../acts/http-form.ts';
import type { AgentRow } from '../agents/agents.repository.ts';
import { type ApprovalStep, approvalOf, approvalStep, changesApproval } from '../approvals/approval-step.ts';
import type { NewApproval } from '../approvals/approvals.service.ts';
import { takeApprovalStep } from '../approvals/approvals.service.ts';
import type { AuditLog } from '../audit/audit.service.ts';
import type { AuditRecord } from '../audit/audit-event.ts';
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

/** The environment the act is decided in: the agent's registered one, which a caller may state but not change. */
function environmentOf(set: PolicySet, input: EvaluationInput, agent: AgentRow): string {
  if (input.environment !== undefined && input.environment !== agent.environment)
    throw new ApiError('environment_mismatch', `agent '${agent.slug}' is registered for ${agent.environment}, not ${input.environment}`);
  if (input.environment === undefined && set.usesEnvironment)
    throw new ApiError('environment_context_required', 'Policies of this workspace match on environment: state input.environment');
  return input.environment ?? agent.environment;
}

/** An act refused whatever policy says. */
const refused = (message: string, policy: string | null): Decision => ({
  allowed: false,
  effect: 'block',
  matched: false,
  policy,
  policyVersion: null,
  ruleId: null,
  severity: 'high',
  message,
  result: 'blocked',
  requireProxy: false,
  monitored: [],
});

/** The approval a decision asks for: what approvers are shown, and the exact act it authorises. */
const askedApproval = (
  decision: Decision,
  input: EvaluationInput,
  facts: ExecutionFacts | null,
  agent: AgentRow,
  requestedBy: string,
  act: { digest: string; environment: string },
): NewApproval => ({
  title: approvalTitle(input, facts, agent.slug),
  description: decision.message,
  type: 'policy',
  priority: decision.severity === 'critical' ? 'urgent' : decision.severity === 'high' ? 'high' : 'normal',
  agent: { id: agent.id, slug: agent.slug },
  policy: decision.policy,
  action: input.action,
  resource: input.resource ?? null,
  context: input.context,
  requestedBy,
  act: {
    ...act,
    tool: input.tool ?? null,
    execution: facts ? shownExecution(facts) : null,
    rule: decision.ruleId,
    policyVersion: decision.policyVersion,
  },
});

const tracer = trace.getTracer('warden');

export class DecisionService {
  constructor(
    private readonly db: Kysely<DB>,
    private readonly policies: PolicyCache,
    private readonly agents: AgentDirectory,
    private readonly audit: AuditLog,
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

    // 1. who acts, 2. where
    const agent = await resolveAgent(this.agents, ctx.auth, input.agent, ctx.agentKey);
    assertActive(agent);
    const set = await this.policies.get(workspaceId, ctx.auth.policyVersion);
    const environment = environmentOf(set, input, agent);
    const declared: DecisionInput = { ...input, environment, execution: facts };

    // 3. decide; 4. what an approval does to it
    const verdict = this.verdict(set, request, declared, agent);
    let digest: string | undefined;
    const actDigestOnce = () => (digest ??= actDigest(agent.id, environment, input, facts));
    let { decision, step } = verdict.error
      ? { decision: verdict.decision, step: { kind: 'none' } as ApprovalStep }
      : await approvalStep(this.db, verdict.decision, {
          workspaceId,
          agentId: agent.id,
          digest: actDigestOnce,
          named: request.approvalId,
          retried: request.retried,
          expired: () => this.telemetry.approvalExpired(),
        });
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
    const context: Record<string, unknown> = verdict.context ?? {
      ...(decision.ruleId ? { rule: decision.ruleId } : {}),
      ...(decision.monitored.length ? { monitored: decision.monitored } : {}),
      ...(input.context ? { input: input.context } : {}),
    };
    // what the audit keeps of an MCP act's arguments: the workspace's setting (docs/decisions/0026-audited-mcp-arguments.md)
    if (facts) context.execution = auditedExecution(facts, set.auditMcpArguments !== 'digest');
    const record = (approvalId: string | null): AuditRecord => ({
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
      approvalId,
      context,
    });
    // the hot path is batched with concurrent decisions (group commit); a change to an approval commits with its event
    let approvalId = approvalOf(step);
    const event = changesApproval(step)
      ? await this.audit.recordWith(
          workspaceId,
          async (trx) =>
            (approvalId = await takeApprovalStep(trx, workspaceId, step, ctx.auth.keyName, () =>
              askedApproval(decision, input, facts, agent, ctx.auth.keyName, { digest: actDigestOnce(), environment }),
            )),
          record,
        )
      : await this.audit.record(workspaceId, record(approvalId));
    this.telemetry.decision(decision.result, request.source);
    if (verdict.error) throw verdict.error;
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
        audit_event_id: event.id,
      },
    };
  }

  /**
   * Policy's decision on the act, or a refusal whatever policy says (a credential the act may
   * not send, a condition that failed): blocked, recorded with why, then thrown.
   */
  private verdict(
    set: PolicySet,
    request: DecisionRequest,
    declared: DecisionInput,
    agent: AgentRow,
  ): { decision: Decision; error?: ApiError; context?: Record<string, unknown> } {
    const refusal = request.refusal ?? agentCredentialRefusal(set, declared.execution ?? null);
    if (refusal) return { decision: refused(refusal.message, null), error: refusal, context: { refusal: refusal.code } };
    try {
      return { decision: decideStrictest(set, actViews(declared, request.fixedAction), agent) };
    } catch (error) {
      if (!(error instanceof ConditionError)) throw error;
      const message = `condition of policy '${error.policy}' failed: ${error.message}`;
      return {
        decision: refused(message, error.policy),
        error: new ApiError('evaluation_failed', message),
        context: { rule: error.ruleId },
      };
    }
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
      // the tool's call as declaredInput completes it (its resource, the tool's address, unless the listing declared one)
      const execution = mcpFacts(server, { method: 'tools/call', params: { name: tool } });
      const declared: DecisionInput = {
        ...declaredInput({ ...decided.input, tool }, execution),
        environment: decided.environment,
        execution,
      };
      return [{ ...declared, action: 'mcp.call' }, declared];
    });
    const decisions = decideEach(set, acts, decided.agent);
    // a failing condition, or the listing's budget spent, hides the tool
    return new Set(tools.filter((_, i) => decisions[i] && decisions[i].effect !== 'block'));
  }
}
