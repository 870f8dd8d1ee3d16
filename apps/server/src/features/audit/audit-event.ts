/** An audit event: what callers record, its row, and the event as the API shows it. */
import type { AuditEvent } from '@warden/contract';
import { iso } from '../../db/paginate.ts';
import { timeOrderedUuid } from '../../shared/ids.ts';
import { redactSecrets, redactText } from '../../shared/redact.ts';
import type { AuditEventWithSeal } from './audit.repository.ts';

export interface AuditRecord {
  source: AuditEvent['source'];
  agent?: string | null;
  agentId?: string | null;
  action: string;
  resource?: string | null;
  tool?: string | null;
  environment?: string | null;
  user?: string | null;
  policy?: string | null;
  result: AuditEvent['result'];
  severity: AuditEvent['severity'];
  message?: string | null;
  approvalId?: string | null;
  requestId?: string | null;
  context?: Record<string, unknown>;
}

/**
 * A context as the database keeps it (jsonb) and gives it back: what JSON keeps of it (no
 * undefined members, dates as strings). The writer seals events from their rows in memory, so
 * a row must already be what verification will read back; the copy is small beside a decision
 * (docs/decisions/0003-audit-sealing.md).
 */
const asStored = (context: Record<string, unknown>) => JSON.parse(JSON.stringify(context)) as Record<string, unknown>;

/**
 * The row of one audit event, and the event as the API shows it. Every event enters the log
 * here, so secrets are kept out here, whoever records: the resource, the message and the
 * context redacted by name and by value (shared/redact.ts). A log that never deletes never takes one in.
 */
export function auditRows(workspaceId: string, record: AuditRecord) {
  const now = new Date();
  const row = {
    workspace_id: workspaceId,
    id: timeOrderedUuid(now.getTime()),
    event_timestamp: now,
    source: record.source,
    agent: record.agent ?? null,
    agent_id: record.agentId ?? null,
    action: record.action,
    resource: record.resource == null ? null : redactText(record.resource),
    tool: record.tool ?? null,
    environment: record.environment ?? null,
    user_name: record.user ?? null,
    policy: record.policy ?? null,
    result: record.result,
    severity: record.severity,
    message: record.message == null ? null : redactText(record.message),
    approval_id: record.approvalId ?? null,
    request_id: record.requestId ?? null,
    context: redactSecrets(asStored(record.context ?? {})) as Record<string, unknown>,
  };
  return { row, event: toAuditEvent(row) };
}

/** The event as the API shows it, from its row (with its seal, when the row has one). */
export function toAuditEvent(
  row: Omit<AuditEventWithSeal, 'context' | 'sequence' | 'hash'> &
    Partial<Pick<AuditEventWithSeal, 'sequence' | 'hash'>> & { context: unknown },
): AuditEvent {
  return {
    id: row.id,
    sequence: row.sequence == null ? null : Number(row.sequence),
    event_timestamp: iso(row.event_timestamp),
    source: row.source as AuditEvent['source'],
    agent: row.agent,
    action: row.action,
    resource: row.resource,
    tool: row.tool,
    environment: row.environment,
    user: row.user_name,
    policy: row.policy,
    result: row.result as AuditEvent['result'],
    severity: row.severity as AuditEvent['severity'],
    message: row.message,
    approval_id: row.approval_id,
    request_id: row.request_id,
    context: (row.context ?? {}) as Record<string, unknown>,
    hash: row.hash ?? null,
  };
}
