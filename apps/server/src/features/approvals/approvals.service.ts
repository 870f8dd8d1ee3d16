/**
 * Approvals: pending → approved | rejected | expired. Deciding is final (a second decision is
 * 409 approval_already_decided); rejecting needs a note; who decided and when is recorded and
 * `approval.completed` fires in the same transaction.
 */
import { randomUUID } from 'node:crypto';
import type { Approval, ApprovalCreate, ApprovalDecision } from '@warden/contract';
import type { Kysely } from 'kysely';
import { iso, isoOrNull, type PageRequest, paginate } from '../../db/paginate.ts';
import type { DB } from '../../db/schema.ts';
import { ApiError, notFound } from '../../http/errors.ts';
import { findAgentBySlugOrName } from '../agents/agents.repository.ts';
import { recordEvent } from '../events/outbox.ts';
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
    context: (row.context ?? {}) as Record<string, unknown>,
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
}

/** Inserts a pending approval (in the caller's transaction, e.g. with its audit event). */
export async function insertPendingApproval(trx: Kysely<DB>, workspaceId: string, input: NewApproval): Promise<Approval> {
  const row = await repo.insertApproval(trx, {
    workspace_id: workspaceId,
    id: randomUUID(),
    title: input.title,
    description: input.description ?? null,
    priority: input.priority ?? 'normal',
    type: input.type ?? 'manual',
    status: 'pending',
    agent_id: input.agent?.id ?? null,
    agent_slug: input.agent?.slug ?? null,
    policy_name: input.policy ?? null,
    action: input.action ?? null,
    resource: input.resource ?? null,
    context: JSON.stringify(input.context ?? {}),
    requested_by: input.requestedBy,
    expires_at: new Date(Date.now() + (input.ttlSeconds ?? DEFAULT_APPROVAL_TTL_SECONDS) * 1000),
  });
  return toApproval(row);
}

export async function createApproval(db: Kysely<DB>, workspaceId: string, input: ApprovalCreate, requestedBy: string): Promise<Approval> {
  let agent: { id: string; slug: string } | null = null;
  if (input.agent !== undefined) {
    agent = (await findAgentBySlugOrName(db, workspaceId, input.agent)) ?? null;
    if (!agent) throw new ApiError('agent_not_found', `agent '${input.agent}' was not found in this workspace`);
  }
  if (input.policy !== undefined && !(await findPolicy(db, workspaceId, input.policy))) throw notFound('policy', input.policy);
  return insertPendingApproval(db, workspaceId, {
    title: input.title,
    description: input.description,
    priority: input.priority,
    type: input.type,
    agent,
    policy: input.policy,
    action: input.action,
    resource: input.resource,
    context: input.context,
    requestedBy,
    ttlSeconds: input.expires_in_seconds,
  });
}

export async function decideApproval(
  db: Kysely<DB>,
  workspaceId: string,
  id: string,
  input: ApprovalDecision,
  decidedBy: string,
): Promise<Approval> {
  const note = input.decision_note?.trim() || null;
  if (input.status === 'rejected' && !note) throw new ApiError('decision_note_required', 'Rejecting an approval needs a decision_note');
  return db.transaction().execute(async (trx) => {
    const row = await repo.findApprovalForUpdate(trx, workspaceId, id);
    if (!row) throw notFound('approval', id);
    if (row.status !== 'pending' || isExpired(row)) {
      throw new ApiError('approval_already_decided', `approval '${id}' is ${toApproval(row).status}; a decision is final`);
    }
    const approval = toApproval(
      await repo.decideApproval(trx, workspaceId, id, { status: input.status, decision_note: note, decided_by: decidedBy }),
    );
    await recordEvent(trx, workspaceId, 'approval.completed', { approval });
    return approval;
  });
}
