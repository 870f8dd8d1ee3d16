/**
 * What an approval does to a decision. An approval named (or, on a retry, the one asked for
 * this exact act) must be of this workspace, pin this act and this agent, have been asked by the
 * rule deciding now, and be unused and unexpired; then, approved, it allows the act once,
 * rejected it blocks it, pending it stays the approval asked. A decision that requires approval
 * and has none asks for a new one. Read only: the step is taken (approvals.service.ts
 * `takeApprovalStep`) in the transaction that records the decision.
 */
import type { Kysely } from 'kysely';
import type { DB } from '../../db/schema.ts';
import { ApiError } from '../../shared/errors.ts';
import type { Decision } from '../policies/engine.ts';
import { findApproval, findApprovalForAct } from './approvals.repository.ts';
import { toApproval } from './approvals.service.ts';

export type ApprovalStep = { kind: 'none' } | { kind: 'create' } | { kind: 'consume'; id: string } | { kind: 'reuse'; id: string };

export interface ApprovalQuestion {
  workspaceId: string;
  agentId: string;
  /** The act's digest, computed when first needed. */
  digest: () => string;
  /** The approval the caller names, if any. */
  named?: string;
  /** The caller retries the act rather than naming its approval (an MCP client). */
  retried?: boolean;
  /** Called when the approval named has expired (telemetry). */
  expired?: () => void;
}

const invalid = (message: string) => new ApiError('approval_invalid', message);

/** The decision as its approval leaves it, and what recording it does to the approval. */
export async function approvalStep(
  db: Kysely<DB>,
  decision: Decision,
  q: ApprovalQuestion,
): Promise<{ decision: Decision; step: ApprovalStep }> {
  const asks = decision.effect === 'require_approval';
  const named = q.named ?? (asks && q.retried ? await findApprovalForAct(db, q.workspaceId, q.agentId, q.digest()) : undefined);
  if (named === undefined) return { decision, step: asks ? { kind: 'create' } : { kind: 'none' } };

  const approval = await findApproval(db, q.workspaceId, named);
  if (!approval) throw invalid('approval_id names no approval of this workspace');
  if (approval.input_digest === null) throw invalid(`approval '${approval.id}' pins no act, so it authorises no runtime decision`);
  if (approval.agent_id !== q.agentId || approval.input_digest !== q.digest())
    throw invalid(
      `approval '${approval.id}' authorises another act: the agent, environment, action, resource, tool, context or execution differ`,
    );
  const askedByThisRule =
    (approval.policy_name === null || approval.policy_name === decision.policy) &&
    (approval.rule_id === null || approval.rule_id === decision.ruleId);
  if (asks && !askedByThisRule) throw invalid(`approval '${approval.id}' was asked for by another rule than the one deciding now`);
  // usable once, and only before it expires, whether it was decided or not
  if (approval.consumed_at !== null) throw invalid(`approval '${approval.id}' is already used`);
  if (new Date(approval.expires_at).getTime() <= Date.now()) {
    q.expired?.();
    throw invalid(`approval '${approval.id}' has expired`);
  }
  if (!asks) return { decision, step: { kind: 'none' } };
  const status = toApproval(approval).status;
  if (status === 'approved')
    return {
      decision: { ...decision, allowed: true, result: 'allowed', message: `Allowed by approval ${approval.id}` },
      step: { kind: 'consume', id: approval.id },
    };
  if (status === 'rejected')
    return {
      decision: { ...decision, allowed: false, effect: 'block', result: 'blocked', message: `Approval ${approval.id} was rejected` },
      step: { kind: 'none' },
    };
  return { decision, step: { kind: 'reuse', id: approval.id } };
}

/** Whether the step changes an approval, so the decision is recorded in a transaction with it. */
export const changesApproval = (step: ApprovalStep): step is { kind: 'create' } | { kind: 'consume'; id: string } =>
  step.kind === 'create' || step.kind === 'consume';

/** The approval a step leaves the decision with, without changing any. */
export const approvalOf = (step: ApprovalStep): string | null => (step.kind === 'reuse' || step.kind === 'consume' ? step.id : null);
