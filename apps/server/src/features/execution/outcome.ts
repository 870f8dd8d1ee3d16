/**
 * An act's outcome, as the audit log keeps it: a second event after the decision's, naming it.
 * The one place outcomes are written: the pipeline's after it acts, an MCP task's when it ends.
 */
import type { Kysely } from 'kysely';
import type { DB } from '../../db/schema.ts';
import { auditedExecution } from '../acts/act.ts';
import { type AuditLog, recordIn } from '../audit/audit.service.ts';
import type { AuditRecord } from '../audit/audit-event.ts';
import type { DecisionOutcome } from '../decisions/decisions.ts';

export interface ExecutionOutcome {
  result: 'allowed' | 'blocked';
  message: string;
  context: Record<string, unknown>;
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
function outcomeRecord(requestId: string | undefined, basis: OutcomeBasis, outcome: ExecutionOutcome): AuditRecord {
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

/** Records what an act did, durable before it returns (503 otherwise: the upstream's answer is not handed out). */
export const recordOutcome = (log: AuditLog, workspaceId: string, requestId: string, basis: OutcomeBasis, outcome: ExecutionOutcome) =>
  log.record(workspaceId, outcomeRecord(requestId, basis, outcome));

/** Records what an act did inside a caller's transaction (an MCP task's end, with the row that marks it recorded). */
export const recordOutcomeIn = (
  trx: Kysely<DB>,
  workspaceId: string,
  requestId: string | undefined,
  basis: OutcomeBasis,
  outcome: ExecutionOutcome,
) => recordIn(trx, workspaceId, outcomeRecord(requestId, basis, outcome));
