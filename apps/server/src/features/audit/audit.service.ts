/** Audit events: recorded with their `audit.created` outbox event, listed, verified. */
import type { AuditEvent, AuditEventCreate, AuditEventSummary } from '@warden/contract';
import { CompiledQuery, type Kysely } from 'kysely';
import type { Database } from '../../db/database.ts';
import { timeOrderedUuid } from '../../db/ids.ts';
import { iso, type PageRequest, paginate } from '../../db/paginate.ts';
import type { DB } from '../../db/schema.ts';
import { ApiError } from '../../http/errors.ts';
import { subscribedSql } from '../events/outbox.ts';
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

/**
 * A context as the database keeps it (jsonb) and gives it back: what JSON keeps of it (no
 * undefined members, dates as strings). The writer seals events from their rows in memory, so
 * a row must already be what verification will read back; the copy is small beside a decision
 * (docs/decisions/0003-audit-sealing.md).
 */
const asStored = (context: Record<string, unknown>) => JSON.parse(JSON.stringify(context)) as Record<string, unknown>;

/** The row of one audit event, and the event as the API shows it. */
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
    context: asStored(record.context ?? {}),
  };
  return { row, event: toAuditEvent(row) };
}

type AuditRows = ReturnType<typeof auditRows>;

/** Every column of an audit row with its SQL type (a compile error if one is missing or unknown). */
const AUDIT_COLUMNS = {
  workspace_id: 'uuid',
  id: 'uuid',
  event_timestamp: 'timestamptz',
  source: 'text',
  agent: 'text',
  agent_id: 'uuid',
  action: 'text',
  resource: 'text',
  tool: 'text',
  environment: 'text',
  user_name: 'text',
  policy: 'text',
  result: 'text',
  severity: 'text',
  message: 'text',
  approval_id: 'uuid',
  request_id: 'text',
  context: 'jsonb',
} as const satisfies Record<keyof AuditRows['row'], string>;
const auditColumns = Object.keys(AUDIT_COLUMNS).join(', ');

/**
 * The `audit.created` payload, `{ event }`, built by the database from the inserted row: the
 * same fields as toAuditEvent (sequence and hash are null until the event is sealed;
 * timestamps in UTC with milliseconds, as JavaScript writes them).
 */
const AUDIT_CREATED_DATA =
  "jsonb_build_object('event', jsonb_build_object(" +
  "'id', id, 'sequence', NULL, " +
  `'event_timestamp', to_char(event_timestamp AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'), ` +
  "'source', source, 'agent', agent, 'action', action, 'resource', resource, 'tool', tool, " +
  "'environment', environment, 'user', user_name, 'policy', policy, 'result', result, 'severity', severity, " +
  "'message', message, 'approval_id', approval_id, 'request_id', request_id, 'context', context, 'hash', NULL))";

const auditColumnTypes = Object.entries(AUDIT_COLUMNS)
  .map(([column, type]) => `${column} ${type}`)
  .join(', ');

/** The rows of the statement's first parameter (JSON). */
const INPUT = `input AS (SELECT * FROM json_to_recordset($1::json) AS r(${auditColumnTypes}))`;
/**
 * The same rows with the seals the writer computed for some of them (the third parameter, by
 * event id): a second array rather than a copy of each row with its seal, which cost an
 * object of 20 properties per event on the hot path (docs/decisions/0003-audit-sealing.md).
 */
const INPUT_WITH_SEALS =
  `input AS (SELECT r.*, s.sequence, s.hash FROM json_to_recordset($1::json) AS r(${auditColumnTypes}) ` +
  'LEFT JOIN json_to_recordset($3::json) AS s(id uuid, sequence bigint, hash text) USING (id))';
/** The statements' parts, reading the rows to write from the CTE `rows`. */
const insertEvents = (rows: string) => `audit AS (INSERT INTO audit_events (${auditColumns}) SELECT ${auditColumns} FROM ${rows})`;
const enqueue = (rows: string) =>
  `unsealed AS (INSERT INTO audit_unsealed (workspace_id, event_timestamp, event_id) SELECT workspace_id, event_timestamp, id FROM ${rows})`;
const insertOutbox = (rows: string) =>
  `INSERT INTO outbox_events (workspace_id, id, type, data) SELECT workspace_id, gen_random_uuid(), 'audit.created', ${AUDIT_CREATED_DATA} ` +
  `FROM ${rows} WHERE ${subscribedSql(`${rows}.workspace_id`, "'audit.created'")}`;

/**
 * Inserts audit events, their place in the sealer's queue and — for workspaces with an
 * endpoint subscribed to it — their `audit.created` outbox events in ONE statement (a
 * data-modifying CTE): atomic without a transaction of their own; inside a caller's
 * transaction it joins it.
 *
 * Rows travel as one JSON parameter, read back by json_to_recordset: one constant statement
 * text whatever the batch size, and one JSON.stringify per batch instead of 22 parameters per
 * event serialised one by one. The outbox payload is built by the database from the same row,
 * so it is not sent twice.
 */
const INSERT_AUDIT_ROWS = `WITH ${INPUT}, ${insertEvents('input')}, ${enqueue('input')} ${insertOutbox('input')}`;

/**
 * The group commit's statement (audit-writer.ts): the same inserts, and the events the writer
 * sealed go straight into the chain instead of the sealer's queue — when the chain head is
 * still where the writer believes it is. $2 lists, per workspace the batch seals, the head
 * the seals were computed from (`expected`) and the head they lead to. A head is advanced
 * only if this statement can lock it at once (SKIP LOCKED: a sealer or another process
 * holding it never makes a request wait) and it is still at `expected` (a compare-and-set,
 * checked on the newest committed row). The rows sealed for a workspace whose head did not
 * advance are not written at all (the writer sends them again); rows sent without a seal are
 * written and queued for the sealer, as INSERT_AUDIT_ROWS queues them. Returns the
 * workspaces whose head advanced.
 */
const INSERT_AUDIT_ROWS_SEALING =
  `WITH ${INPUT_WITH_SEALS}, ` +
  'heads AS (SELECT * FROM json_to_recordset($2::json) AS h(workspace_id uuid, expected bigint, sequence bigint, hash text)), ' +
  'claimed AS (SELECT c.workspace_id FROM audit_chain_heads c JOIN heads h USING (workspace_id) ' +
  'WHERE c.last_sequence = h.expected FOR UPDATE OF c SKIP LOCKED), ' +
  'advanced AS (UPDATE audit_chain_heads c SET last_sequence = h.sequence, last_hash = h.hash FROM heads h ' +
  'WHERE c.workspace_id = h.workspace_id AND c.last_sequence = h.expected AND c.workspace_id IN (SELECT workspace_id FROM claimed) ' +
  'RETURNING c.workspace_id), ' +
  'kept AS (SELECT * FROM input WHERE sequence IS NULL OR workspace_id IN (SELECT workspace_id FROM advanced)), ' +
  'queued AS (SELECT * FROM input WHERE sequence IS NULL), ' +
  `${insertEvents('kept')}, ` +
  'sealed AS (INSERT INTO audit_seals (workspace_id, sequence, event_id, event_timestamp, hash) ' +
  'SELECT workspace_id, sequence, id, event_timestamp, hash FROM kept WHERE sequence IS NOT NULL), ' +
  `${enqueue('queued')}, ` +
  `outbox AS (${insertOutbox('kept')}) ` +
  'SELECT workspace_id FROM advanced';

/** A head of a workspace's chain: its last sequence and hash (0 and '' before the first seal). */
export interface ChainHead {
  sequence: number;
  hash: string;
}

/** Where a group commit moves a workspace's head: from the head its seals start at to the one they lead to. */
export interface HeadMove {
  expected: ChainHead;
  next: ChainHead;
}

/** The statements' first parameter: the rows as JSON. */
export function auditRowsParameter(rows: AuditRows[]): string {
  return JSON.stringify(rows.map(({ row }) => row));
}

/** Inserts audit rows on `db` (e.g. inside a caller's transaction). */
export async function insertAuditRows(db: Kysely<DB>, rows: AuditRows[]): Promise<void> {
  await db.executeQuery(CompiledQuery.raw(INSERT_AUDIT_ROWS, [auditRowsParameter(rows)]));
}

/**
 * Inserts a group commit's rows on their own, as a named prepared statement (the hot path):
 * a row with a seal is written, sealed, if its workspace's head is still at
 * `heads[workspace].expected`, and not at all otherwise; a row without one is written and
 * queued for the sealer. Returns the workspaces whose head advanced.
 */
export async function insertAuditBatch(
  database: Database,
  rows: AuditRows[],
  /** Per row, the head its seal makes (undefined: not sealed here). */
  seals: (ChainHead | undefined)[],
  /** Per workspace sealed here, the head the seals start from and the one they lead to. */
  heads: Map<string, HeadMove>,
): Promise<Set<string>> {
  const sealed: { id: string; sequence: number; hash: string }[] = [];
  rows.forEach(({ row }, i) => {
    const seal = seals[i];
    if (seal) sealed.push({ id: row.id, sequence: seal.sequence, hash: seal.hash });
  });
  const moves = [...heads].map(([workspace_id, { expected, next }]) => ({ workspace_id, expected: expected.sequence, ...next }));
  const advanced = await database.run('warden_insert_audit_batch', INSERT_AUDIT_ROWS_SEALING, [
    auditRowsParameter(rows),
    JSON.stringify(moves),
    JSON.stringify(sealed),
  ]);
  return new Set(advanced.map((row) => row.workspace_id as string));
}

/**
 * The heads of these workspaces' chains, each created (empty) if the workspace has never been
 * sealed (a workspace that no longer exists has none). A head locked by another transaction
 * is read as it was last committed.
 */
export async function readChainHeads(database: Database, workspaceIds: string[]): Promise<Map<string, ChainHead>> {
  const rows = await database.run(
    'warden_read_chain_heads',
    'WITH wanted AS (SELECT json_array_elements_text($1::json)::uuid AS workspace_id), ' +
      'created AS (INSERT INTO audit_chain_heads (workspace_id) SELECT workspace_id FROM wanted JOIN workspaces ON workspaces.id = wanted.workspace_id ' +
      'ON CONFLICT DO NOTHING ' +
      'RETURNING workspace_id, last_sequence, last_hash) ' +
      'SELECT workspace_id, last_sequence, last_hash FROM created UNION ALL ' +
      'SELECT workspace_id, last_sequence, last_hash FROM audit_chain_heads JOIN wanted USING (workspace_id)',
    [JSON.stringify(workspaceIds)],
  );
  return new Map(rows.map((row) => [row.workspace_id as string, { sequence: Number(row.last_sequence), hash: row.last_hash as string }]));
}

/** Writes one audit event (and its outbox event) on `db`, e.g. inside a caller's transaction. */
export async function writeAuditEvent(db: Kysely<DB>, workspaceId: string, record: AuditRecord): Promise<AuditEvent> {
  const rows = auditRows(workspaceId, record);
  await insertAuditRows(db, [rows]);
  return rows.event;
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
