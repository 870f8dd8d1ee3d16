/**
 * Approvals: pending → approved | rejected | expired. Creating one fires `approval.requested`
 * in its transaction. Deciding is final (a second decision is 409 approval_already_decided);
 * rejecting needs a note; who decided and when is recorded and `approval.completed` fires in
 * the same transaction.
 */
import { randomUUID } from 'node:crypto';
import type { Approval, ApprovalCreate, ApprovalDecision, EvaluationInput, HttpExecution, McpExecution } from '@warden/contract';
import type { Kysely } from 'kysely';
import { iso, isoOrNull, type PageRequest, paginate } from '../../db/paginate.ts';
import type { DB } from '../../db/schema.ts';
import { inTransaction } from '../../db/transaction.ts';
import { NO_TELEMETRY, type Telemetry } from '../../observability/telemetry.ts';
import { stableJson } from '../../shared/canonical-json.ts';
import { ApiError, notFound } from '../../shared/errors.ts';
import { redactSecrets, redactText } from '../../shared/redact.ts';
import { actDigest, checkContextSize, declaredInput, type ExecutionFacts, httpFacts, mcpFacts, shownExecution } from '../acts/act.ts';
import { type AgentRow, findAgentBySlugOrName } from '../agents/agents.repository.ts';
import { recordIn } from '../audit/audit.service.ts';
import { recordEvent } from '../events/outbox.repository.ts';
import { findMcpServer } from '../mcp-servers/mcp-servers.repository.ts';
import { findPolicy } from '../policies/policies.repository.ts';
import * as repo from './approvals.repository.ts';

export const DEFAULT_APPROVAL_TTL_SECONDS = 86_400;

const isExpired = (row: repo.ApprovalRow, now = Date.now()) => row.status === 'pending' && new Date(row.expires_at).getTime() <= now;

export function toApproval(row: repo.ApprovalRow): Approval {
  return {
    id: row.id,
    title: row.title,
    description: row.description,
    priority: row.priority as Approval['priority'],
    type: row.type as Approval['type'],
    status: isExpired(row) ? 'expired' : (row.status as Approval['status']),
    agent: row.agent_slug,
    policy: row.policy_name,
    action: row.action,
    resource: row.resource,
    environment: row.environment,
    tool: row.tool,
    context: (row.context ?? {}) as Record<string, unknown>,
    execution: (row.execution ?? null) as Approval['execution'],
    input_digest: row.input_digest,
    rule: row.rule_id,
    policy_version: row.policy_version,
    decision_note: row.decision_note,
    decided_by: row.decided_by,
    decided_at: isoOrNull(row.decided_at),
    expires_at: iso(row.expires_at),
    consumed_at: isoOrNull(row.consumed_at),
    created_at: iso(row.created_at),
    updated_at: iso(row.updated_at),
  };
}

export const listApprovals = (db: Kysely<DB>, workspaceId: string, query: PageRequest & { status?: string; agent?: string }) =>
  paginate(repo.approvalsQuery(db, workspaceId, query), 'created_at', query, toApproval);

export async function getApproval(db: Kysely<DB>, workspaceId: string, id: string): Promise<Approval> {
  const row = await repo.findApproval(db, workspaceId, id);
  if (!row) throw notFound('approval', id);
  return toApproval(row);
}

export interface NewApproval {
  title: string;
  description?: string | null;
  priority?: Approval['priority'];
  type?: Approval['type'];
  agent?: { id: string; slug: string } | null;
  policy?: string | null;
  action?: string | null;
  resource?: string | null;
  context?: Record<string, unknown>;
  requestedBy: string;
  ttlSeconds?: number;
  /** The exact act the approval authorises; absent: it authorises no runtime decision. */
  act?: {
    digest: string;
    environment: string;
    tool: string | null;
    execution: Record<string, unknown> | null;
    rule?: string | null;
    policyVersion?: number | null;
  };
}

/**
 * Inserts a pending approval and its `approval.requested` event (in the caller's transaction,
 * e.g. with its audit event), so every way of asking for an approval notifies alike.
 */
export async function insertPendingApproval(trx: Kysely<DB>, workspaceId: string, input: NewApproval): Promise<Approval> {
  const row = await repo.insertApproval(trx, {
    workspace_id: workspaceId,
    id: randomUUID(),
    // what approvers, webhooks and the audit log are shown: secrets redacted (the digest binds the real act)
    title: redactText(input.title),
    description: input.description == null ? null : redactText(input.description),
    priority: input.priority ?? 'normal',
    type: input.type ?? 'manual',
    status: 'pending',
    agent_id: input.agent?.id ?? null,
    agent_slug: input.agent?.slug ?? null,
    policy_name: input.policy ?? null,
    action: input.action ?? null,
    resource: input.resource == null ? null : redactText(input.resource),
    context: JSON.stringify(redactSecrets(input.context ?? {})),
    input_digest: input.act?.digest ?? null,
    environment: input.act?.environment ?? null,
    tool: input.act?.tool ?? null,
    execution: input.act?.execution ? JSON.stringify(input.act.execution) : null,
    rule_id: input.act?.rule ?? null,
    policy_version: input.act?.policyVersion ?? null,
    requested_by: input.requestedBy,
    expires_at: new Date(Date.now() + (input.ttlSeconds ?? DEFAULT_APPROVAL_TTL_SECONDS) * 1000),
  });
  const approval = toApproval(row);
  await recordEvent(trx, workspaceId, 'approval.requested', { approval });
  await recordApproval(trx, workspaceId, approval, 'approval.requested', input.requestedBy);
  return approval;
}

/**
 * Marks an approved approval used by the decision it authorised, recording `approval.consumed`
 * (who used it) in the caller's transaction; false if it was already used (a concurrent request won).
 */
export async function consumeApprovalFor(trx: Kysely<DB>, workspaceId: string, id: string, usedBy: string): Promise<boolean> {
  if (!(await repo.consumeApproval(trx, workspaceId, id))) return false;
  const row = await repo.findApproval(trx, workspaceId, id);
  if (row) await recordApproval(trx, workspaceId, toApproval(row), 'approval.consumed', usedBy);
  return true;
}

/** Uses the approval (once) or asks for a new one (approval-step.ts says which), in the decision's transaction: its id. */
export async function takeApprovalStep(
  trx: Kysely<DB>,
  workspaceId: string,
  step: { kind: 'create' } | { kind: 'consume'; id: string },
  usedBy: string,
  asked: () => NewApproval,
): Promise<string> {
  if (step.kind === 'create') return (await insertPendingApproval(trx, workspaceId, asked())).id;
  if (!(await consumeApprovalFor(trx, workspaceId, step.id, usedBy)))
    throw new ApiError('approval_invalid', `approval '${step.id}' is already used`);
  return step.id;
}

/** Who expires approvals, as the audit log names it. */
const EXPIRY_ACTOR = 'warden';

/** Approvals expired per transaction (a round goes on until fewer are left). */
const EXPIRY_BATCH = 500;

/** Runs expireApprovals at most once per interval (from the background rounds of the audit sealer). */
export class ApprovalExpiry {
  private last = 0;
  constructor(
    private readonly db: Kysely<DB>,
    private readonly intervalMs = 1_000,
  ) {}

  async run(now = Date.now()): Promise<void> {
    if (now - this.last < this.intervalMs) return;
    this.last = now;
    while ((await expireApprovals(this.db)) === EXPIRY_BATCH);
  }
}

/**
 * Pending approvals past their expiry become `expired`, each with its `approval.expired` event
 * in the same transaction (an approval's status was derived from its expiry, with nothing on
 * the record). Returns how many expired.
 */
export async function expireApprovals(db: Kysely<DB>, limit = EXPIRY_BATCH): Promise<number> {
  return inTransaction(db, async (trx) => {
    const expired = await repo.expirePending(trx, limit);
    for (const row of expired) await recordApproval(trx, row.workspace_id, toApproval(row), 'approval.expired', EXPIRY_ACTOR);
    return expired.length;
  });
}

export async function createApproval(db: Kysely<DB>, workspaceId: string, input: ApprovalCreate, requestedBy: string): Promise<Approval> {
  let agent: AgentRow | null = null;
  const agentName = input.agent ?? input.input?.agent;
  if (agentName !== undefined) {
    agent = (await findAgentBySlugOrName(db, workspaceId, agentName)) ?? null;
    if (!agent) throw new ApiError('agent_not_found', `agent '${agentName}' was not found in this workspace`);
  }
  if (input.policy !== undefined && !(await findPolicy(db, workspaceId, input.policy))) throw notFound('policy', input.policy);
  checkContextSize(input.context, 'context');
  const pinned = input.input ? await pinnedAct(db, workspaceId, input, agent) : null;
  return inTransaction(db, async (trx) => {
    const approval = await insertPendingApproval(trx, workspaceId, {
      title: input.title,
      description: input.description,
      priority: input.priority,
      type: input.type,
      agent,
      policy: input.policy,
      action: pinned?.input.action ?? input.action,
      resource: pinned ? (pinned.input.resource ?? null) : input.resource,
      context: pinned?.input.context ?? input.context,
      requestedBy,
      ttlSeconds: input.expires_in_seconds,
      act: pinned?.act,
    });
    return approval;
  });
}

/**
 * A step of an approval's life — requested (by a policy's decision or by hand), approved,
 * rejected, expired, consumed — as an audit event (source `approval`) in the same transaction
 * as the change: who, when, on what, with which note. The act it authorises is named by its
 * digest (the pinned execution's secrets never enter the log).
 */
function recordApproval(trx: Kysely<DB>, workspaceId: string, approval: Approval, action: string, user: string) {
  return recordIn(trx, workspaceId, {
    source: 'approval',
    agent: approval.agent,
    action,
    resource: approval.id,
    environment: approval.environment ?? null,
    tool: approval.tool ?? null,
    user,
    policy: approval.policy,
    result: 'allowed',
    severity: action === 'approval.approved' || action === 'approval.consumed' ? 'medium' : 'info',
    message: approval.decision_note ?? approval.title,
    approvalId: approval.id,
    context: {
      title: approval.title,
      status: approval.status,
      act_action: approval.action,
      act_resource: approval.resource,
      input_digest: approval.input_digest ?? null,
      expires_at: approval.expires_at,
      ...(approval.decision_note ? { decision_note: approval.decision_note } : {}),
    },
  });
}

/**
 * The act a manual approval pins (`input`, optionally `execution`), digested exactly as the
 * decision that may use it will digest its own.
 */
async function pinnedAct(db: Kysely<DB>, workspaceId: string, body: ApprovalCreate, agent: AgentRow | null) {
  const stated = body.input as EvaluationInput;
  if (!agent) throw new ApiError('agent_context_required', 'An approval that pins input needs input.agent or agent');
  if (stated.agent !== undefined && body.agent !== undefined) {
    const named = await findAgentBySlugOrName(db, workspaceId, stated.agent);
    if (named?.id !== agent.id) throw new ApiError('agent_identity_mismatch', `input.agent '${stated.agent}' is not agent '${body.agent}'`);
  }
  if (stated.environment !== undefined && stated.environment !== agent.environment) {
    throw new ApiError('environment_mismatch', `agent '${agent.slug}' is registered for ${agent.environment}, not ${stated.environment}`);
  }
  const contradicts = (field: 'action' | 'resource', value: string | undefined) =>
    value !== undefined && stated[field] !== undefined && value !== stated[field];
  if (contradicts('action', body.action) || contradicts('resource', body.resource))
    throw new ApiError('invalid_request', 'action and resource must equal input.action and input.resource when both are given');
  if (body.context !== undefined && stated.context !== undefined && stableJson(body.context) !== stableJson(stated.context))
    throw new ApiError('invalid_request', 'context must equal input.context when both are given');
  const statedContext = stated.context ?? body.context;
  const withContext = statedContext === undefined ? stated : { ...stated, context: statedContext };
  const execution = body.execution as HttpExecution | McpExecution | undefined;
  let facts: ExecutionFacts | null = null;
  if (execution?.mode === 'http_proxy') facts = httpFacts(execution);
  else if (execution?.mode === 'mcp_proxy') {
    const server = await findMcpServer(db, workspaceId, execution.server);
    if (!server) throw new ApiError('mcp_server_not_found', `no MCP server '${execution.server}' in this workspace`);
    facts = mcpFacts(server.slug, { method: 'tools/call', params: { name: execution.tool, arguments: execution.arguments } });
  }
  const declared = declaredInput(withContext, facts);
  const environment = stated.environment ?? agent.environment;
  return {
    input: declared,
    act: {
      digest: actDigest(agent.id, environment, declared, facts),
      environment,
      tool: declared.tool ?? null,
      execution: facts ? shownExecution(facts) : null,
    },
  };
}

export async function decideApproval(
  db: Kysely<DB>,
  workspaceId: string,
  id: string,
  input: ApprovalDecision,
  decidedBy: string,
): Promise<Approval> {
  const note = input.decision_note?.trim() || null;
  return inTransaction(db, async (trx) => {
    const row = await repo.findApprovalForUpdate(trx, workspaceId, id);
    if (!row) throw notFound('approval', id);
    if (row.status !== 'pending' || isExpired(row)) {
      throw new ApiError('approval_already_decided', `approval '${id}' is ${toApproval(row).status}; a decision is final`);
    }
    // after what the approval is: a decided one is final (409), whatever the note
    if (input.status === 'rejected' && !note) throw new ApiError('decision_note_required', 'Rejecting an approval needs a decision_note');
    const approval = toApproval(
      await repo.decideApproval(trx, workspaceId, id, { status: input.status, decision_note: note, decided_by: decidedBy }),
    );
    await recordEvent(trx, workspaceId, 'approval.completed', { approval });
    await recordApproval(trx, workspaceId, approval, `approval.${input.status}`, decidedBy);
    return approval;
  });
}

export function approvalsService(db: Kysely<DB>, telemetry: Telemetry = NO_TELEMETRY) {
  return {
    list: (workspaceId: string, query: PageRequest & { status?: string; agent?: string }) => listApprovals(db, workspaceId, query),
    get: (workspaceId: string, id: string) => getApproval(db, workspaceId, id),
    create: async (workspaceId: string, input: ApprovalCreate, requestedBy: string) => {
      const approval = await createApproval(db, workspaceId, input, requestedBy);
      telemetry.approvalCreated();
      return approval;
    },
    decide: async (workspaceId: string, id: string, input: ApprovalDecision, decidedBy: string) => {
      const approval = await decideApproval(db, workspaceId, id, input, decidedBy);
      telemetry.approvalDecided(input.status, (Date.now() - new Date(approval.created_at).getTime()) / 1000);
      return approval;
    },
  };
}

export type ApprovalsService = ReturnType<typeof approvalsService>;
