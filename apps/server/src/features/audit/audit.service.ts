/** Audit events: recorded with their `audit.created` outbox event, listed, verified. */
import { randomUUID } from 'node:crypto';
import type { AuditEvent, AuditEventCreate, AuditEventSummary } from '@warden/contract';
import type { Kysely } from 'kysely';
import { iso, type PageRequest, paginate } from '../../db/paginate.ts';
import type { DB } from '../../db/schema.ts';
import { ApiError } from '../../http/errors.ts';
import { outboxRow } from '../events/outbox.ts';
import { type AuditEventWithSeal, type AuditFilters, auditEventsQuery } from './audit.repository.ts';

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

/** The rows of one audit event: the event and its `audit.created` outbox event. */
export function auditRows(workspaceId: string, record: AuditRecord) {
  const row = {
    workspace_id: workspaceId,
    id: randomUUID(),
    event_timestamp: new Date(),
    source: record.source,
    agent: record.agent ?? null,
    agent_id: record.agentId ?? null,
    action: record.action,
    resource: record.resource ?? null,
    tool: record.tool ?? null,
    environment: record.environment ?? null,
    user_name: record.user ?? null,
    policy: record.policy ?? null,
    result: record.result,
    severity: record.severity,
    message: record.message ?? null,
    approval_id: record.approvalId ?? null,
    request_id: record.requestId ?? null,
    context: JSON.stringify(record.context ?? {}),
  };
  const event = toAuditEvent({ ...row, context: record.context ?? {}, sequence: null, hash: null });
  return { row, outbox: outboxRow(workspaceId, 'audit.created', { event }), event };
}

/**
 * Inserts audit events and their outbox events in ONE statement (a data-modifying CTE): the
 * pairs are atomic without a transaction of their own; inside a caller's transaction it joins it.
 */
export async function insertAuditRows(db: Kysely<DB>, rows: Array<ReturnType<typeof auditRows>>): Promise<void> {
  await db
    .with('audit', (q) => q.insertInto('audit_events').values(rows.map((r) => r.row)))
    .insertInto('outbox_events')
    .values(rows.map((r) => r.outbox))
    .execute();
}

/** Writes one audit event (and its outbox event) on `db`, e.g. inside a caller's transaction. */
export async function writeAuditEvent(db: Kysely<DB>, workspaceId: string, record: AuditRecord): Promise<AuditEvent> {
  const rows = auditRows(workspaceId, record);
  await insertAuditRows(db, [rows]);
  return rows.event;
}

export function toAuditEvent(row: Omit<AuditEventWithSeal, 'context'> & { context: unknown }): AuditEvent {
  return {
    id: row.id,
    sequence: row.sequence === null ? null : Number(row.sequence),
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
    hash: row.hash,
  };
}

const toSummary = (row: AuditEventWithSeal): AuditEventSummary => ({
  id: row.id,
  event_timestamp: iso(row.event_timestamp),
  agent: row.agent,
  action: row.action,
  resource: row.resource,
  result: row.result as AuditEventSummary['result'],
  severity: row.severity as AuditEventSummary['severity'],
});

export const listAuditLogs = (db: Kysely<DB>, workspaceId: string, query: PageRequest & AuditFilters) =>
  paginate(auditEventsQuery(db, workspaceId, query), 'e.event_timestamp', query, toAuditEvent);

export const listEventSummaries = (db: Kysely<DB>, workspaceId: string, query: PageRequest & AuditFilters) =>
  paginate(auditEventsQuery(db, workspaceId, query), 'e.event_timestamp', query, toSummary);

/** Wraps the write of a decision's records: if they cannot be stored, nothing is allowed (503). */
export async function persistOrRefuse<T>(write: () => Promise<T>): Promise<T> {
  try {
    return await write();
  } catch (error) {
    if (error instanceof ApiError) throw error;
    throw new ApiError('audit_persist_failed', 'The decision could not be recorded, so it is refused', { cause: error });
  }
}

/** POST /audit: a decision taken elsewhere. Only refusals may be recorded this way. */
export async function recordManualEvent(db: Kysely<DB>, workspaceId: string, input: AuditEventCreate, requestId: string) {
  if (input.result === 'allowed') {
    throw new ApiError(
      'policy_evaluation_required',
      'An allowed decision must come from POST /policy/evaluate; record only blocked or approval_required',
    );
  }
  const event = await persistOrRefuse(() =>
    writeAuditEvent(db, workspaceId, {
      source: 'manual',
      agent: input.agent,
      action: input.action,
      resource: input.resource,
      user: input.user,
      policy: input.policy,
      result: input.result,
      severity: input.severity ?? 'medium',
      requestId,
      context: input.context,
    }),
  );
  return { id: event.id, event_timestamp: event.event_timestamp, result: event.result, severity: event.severity };
}
