/**
 * The audit log's front door: events are recorded (`record` through the group commit, `recordIn`
 * inside a caller's transaction) with their `audit.created` outbox event, listed, verified, and
 * proven (checkpoints, inclusion and consistency proofs). Sealing and checkpointing happen behind
 * it (tree.ts, checkpointer.ts): callers never see them.
 */
import type { AuditEvent, AuditEventCreate, AuditEventSummary } from '@warden/contract';
import type { Kysely } from 'kysely';
import { iso, type PageRequest, paginate, paginateSearch } from '../../db/paginate.ts';
import type { DB } from '../../db/schema.ts';
import { inTransaction } from '../../db/transaction.ts';
import type { Actor } from '../../shared/context.ts';
import { ApiError } from '../../shared/errors.ts';
import {
  type AuditEventWithSeal,
  type AuditFilters,
  auditEventsQuery,
  auditSearchCondition,
  insertAuditRows,
  lockWorkspaceForChange,
  outcomeEventsOf,
} from './audit.repository.ts';
import { type AuditRecord, auditRows, toAuditEvent } from './audit-event.ts';
import type { AuditWriter } from './audit-writer.ts';
import { findCheckpoint } from './checkpoint.repository.ts';
import { type AuditSigner, checkpointView, signingKeyOf } from './checkpointer.ts';
import { readTile, type TileRequest } from './tlog-tiles.ts';
import { proveConsistency, proveInclusion } from './verification.ts';
import type { AuditVerifications } from './verification-runs.ts';

/** Writes one audit event (and its outbox event) on `db`, inside a caller's transaction: it is queued and sealed shortly after. */
export async function recordIn(db: Kysely<DB>, workspaceId: string, record: AuditRecord): Promise<AuditEvent> {
  const rows = auditRows(workspaceId, record);
  await insertAuditRows(db, [rows]);
  return rows.event;
}

/**
 * The door acts use into the log (decisions, outcomes): each event is durable before the call
 * returns, or the call fails 503 `audit_persist_failed` and the act is not answered as done.
 */
export interface AuditLog {
  /** One event, through the group commit (batched with concurrent ones). */
  record(workspaceId: string, record: AuditRecord): Promise<AuditEvent>;
  /** One event in a transaction with `change` (an approval used or asked for), whose value completes it. */
  recordWith<T>(workspaceId: string, change: (trx: Kysely<DB>) => Promise<T>, record: (value: T) => AuditRecord): Promise<AuditEvent>;
}

export const auditLog = (db: Kysely<DB>, writer: AuditWriter): AuditLog => ({
  record: (workspaceId, record) => persistOrRefuse(() => writer.write(workspaceId, record)),
  recordWith: (workspaceId, change, record) =>
    persistOrRefuse(() => inTransaction(db, async (trx) => recordIn(trx, workspaceId, record(await change(trx))))),
});

/** A change to a workspace's configuration, as its audit event describes it. */
export interface ConfigurationChange {
  /** `<object>.<verb>`: `agent.created`, `api_key.revoked`, `billing.plan_changed`… */
  action: string;
  /** The object's id (the workspace's, for its settings and plan). */
  resource: string;
  /** `info`, or `medium` for what removes something (a delete, a key's revocation). */
  severity?: 'info' | 'medium';
  /** A small summary: names, changed field names, never a secret (a key, a webhook secret, a URL). */
  context?: Record<string, unknown>;
}

/**
 * Records a configuration change (source `configuration`, result `allowed`, the actor in
 * `user`) on `trx`, the change's own transaction: the change and its event commit or roll back
 * together. It locks the workspace's row first (lockWorkspaceForChange): a change bumps the
 * workspace's versions (triggers), and a change that took that lock after its event's insert
 * (a key-share lock, for the foreign key) upgraded it, which deadlocks with a change waiting to
 * lock the workspace (40P01 under concurrent changes, found by the fuzz on PostgreSQL).
 */
export const recordChange = async (trx: Kysely<DB>, workspaceId: string, actor: Actor, change: ConfigurationChange) => {
  await lockWorkspaceForChange(trx, workspaceId);
  return recordIn(trx, workspaceId, {
    source: 'configuration',
    user: actor.user,
    requestId: actor.requestId ?? null,
    action: change.action,
    resource: change.resource,
    result: 'allowed',
    severity: change.severity ?? 'info',
    context: change.context ?? {},
  });
};

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

/** With `view: 'acts'`, every act of the page (an event with `context.execution`) gets its outcome event, or null while it has none. */
async function withOutcomes<P extends { data: AuditEvent[] }>(db: Kysely<DB>, workspaceId: string, view: AuditFilters['view'], page: P) {
  if (view !== 'acts') return page;
  const acts = page.data.filter((event) => event.context.execution !== undefined).map((event) => event.id);
  const outcomes = acts.length > 0 ? await outcomeEventsOf(db, workspaceId, acts) : [];
  const byDecision = new Map(outcomes.map(toAuditEvent).map((outcome) => [String(outcome.context.decision_event_id), outcome]));
  return {
    ...page,
    data: page.data.map((event) =>
      event.context.execution === undefined ? event : { ...event, outcome_event: byDecision.get(event.id) ?? null },
    ),
  };
}

/** What a search (`q`) may add to the filters, and how many events one page of it may read. */
export interface AuditSearch extends AuditFilters {
  q?: string;
}

/** Events as listAuditLogs, narrowed by a search that reads at most `scanRows` events a page (paginateSearch). */
const searchAuditLogs = async (db: Kysely<DB>, workspaceId: string, query: PageRequest & AuditSearch, scanRows: number) =>
  withOutcomes(
    db,
    workspaceId,
    query.view,
    query.q
      ? await paginateSearch(db as Kysely<unknown>, auditEventsQuery(db, workspaceId, query), 'e.event_timestamp', query, toAuditEvent, {
          matches: auditSearchCondition(query.q),
          scanRows,
        })
      : await listAuditLogs(db, workspaceId, query),
  );

export const listEventSummaries = (db: Kysely<DB>, workspaceId: string, query: PageRequest & AuditFilters) =>
  paginate(auditEventsQuery(db, workspaceId, query), 'e.event_timestamp', query, toSummary);

/** Wraps the write of a decision's records: if they cannot be stored, nothing is allowed (503). */
async function persistOrRefuse<T>(write: () => Promise<T>): Promise<T> {
  try {
    return await write();
  } catch (error) {
    if (error instanceof ApiError) throw error;
    throw new ApiError('audit_persist_failed', 'The decision could not be recorded, so it is refused', { cause: error });
  }
}

/** POST /audit: a decision taken elsewhere. Only refusals may be recorded this way. */
async function recordManualEvent(writer: AuditWriter, workspaceId: string, input: AuditEventCreate, requestId: string) {
  if (input.result === 'allowed') {
    throw new ApiError(
      'policy_evaluation_required',
      'An allowed decision must come from POST /policy/evaluate; record only blocked or approval_required',
    );
  }
  const event = await persistOrRefuse(() =>
    writer.write(workspaceId, {
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

/** Events read per statement by an export. */
const EXPORT_PAGE = 500;

export interface AuditServiceOptions {
  /** How many events one page of a search may read (WARDEN_AUDIT_SEARCH_SCAN_ROWS). */
  searchScanRows: number;
}

export function auditService(
  db: Kysely<DB>,
  writer: AuditWriter,
  signer: AuditSigner,
  verifications: AuditVerifications,
  options: AuditServiceOptions,
) {
  return {
    /** The door acts use (see AuditLog). */
    log: auditLog(db, writer),
    /** POST /audit (see recordManualEvent). */
    recordManual: (workspaceId: string, input: AuditEventCreate, requestId: string) =>
      recordManualEvent(writer, workspaceId, input, requestId),
    list: (workspaceId: string, query: PageRequest & AuditSearch) => searchAuditLogs(db, workspaceId, query, options.searchScanRows),
    /** Every event the filters and search select, newest first, a page at a time (exports). */
    async *all(workspaceId: string, query: AuditSearch): AsyncGenerator<AuditEvent[]> {
      let cursor: string | undefined;
      do {
        const page = await searchAuditLogs(db, workspaceId, { ...query, limit: EXPORT_PAGE, cursor }, options.searchScanRows);
        if (page.data.length > 0) yield page.data;
        cursor = page.next_cursor ?? undefined;
      } while (cursor);
    },
    listSummaries: (workspaceId: string, query: PageRequest & AuditFilters) => listEventSummaries(db, workspaceId, query),
    verify: (workspaceId: string, full = false) => verifications.verify(workspaceId, full),
    verificationStatus: (workspaceId: string) => verifications.status(workspaceId),
    /** Stops the verification thread (the server is stopping). */
    close: () => verifications.close(),
    checkpoint: async (workspaceId: string, size?: number) => {
      const row = await findCheckpoint(db, workspaceId, size);
      if (!row)
        throw new ApiError('not_found', size === undefined ? 'The audit log has no checkpoint yet' : `No checkpoint of size ${size}`);
      return checkpointView(row);
    },
    signingKey: (workspaceId: string) => signingKeyOf(signer, workspaceId),
    /** A tile of the log as C2SP tlog-tiles serves it (undefined: it does not exist yet). */
    tile: (workspaceId: string, request: TileRequest) => readTile(db, workspaceId, request),
    inclusionProof: (workspaceId: string, eventId: string, size?: number) => proveInclusion(db, workspaceId, eventId, size),
    consistencyProof: (workspaceId: string, fromSize: number, toSize?: number) => proveConsistency(db, workspaceId, fromSize, toSize),
  };
}

export type AuditService = ReturnType<typeof auditService>;
