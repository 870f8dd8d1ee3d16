/** Audit events: the queries that list and search them, the statements that write them (sealed or queued), and where verification ended. */
import { CompiledQuery, type Kysely, type Selectable, sql } from 'kysely';
import type { Database } from '../../db/database.ts';
import type { AuditEvents, DB } from '../../db/schema.ts';
import { subscribedSql } from '../events/outbox.repository.ts';
import type { Seal, StoredNode, TreeHead } from './tree.repository.ts';

export interface AuditFilters {
  agent?: string;
  action?: string;
  source?: string;
  /** The MCP server an act ran on (`context.execution.server`). */
  server?: string;
  tool?: string;
  /** How an act ended (`context.outcome`): outcome events only (with `view: 'acts'`, the decisions of acts that ended so). */
  outcome?: string;
  result?: string;
  severity?: string;
  from?: string;
  to?: string;
  /** `acts`: an act is its decision event, its outcome event folded into it (listAuditLogs); `events` (the default): every event. */
  view?: 'events' | 'acts';
}

/** An act's outcome event names its decision event (execution/outcome.ts). */
const isOutcome = sql<boolean>`e.context ? 'decision_event_id'`;

/** Events of a workspace with their seal (sequence, hash) when sealed. */
export function auditEventsQuery(db: Kysely<DB>, workspaceId: string, filters: AuditFilters) {
  let q = db
    .selectFrom('audit_events as e')
    .leftJoin('audit_seals as s', (join) => join.onRef('s.workspace_id', '=', 'e.workspace_id').onRef('s.event_id', '=', 'e.id'))
    .selectAll('e')
    .select(['s.sequence', 's.hash'])
    .where('e.workspace_id', '=', workspaceId);
  if (filters.agent) q = q.where('e.agent', '=', filters.agent);
  if (filters.action) q = q.where('e.action', '=', filters.action);
  if (filters.source) q = q.where('e.source', '=', filters.source);
  if (filters.tool) q = q.where('e.tool', '=', filters.tool);
  if (filters.server) q = q.where(sql`e.context->'execution'->>'server'`, '=', filters.server);
  if (filters.view === 'acts') {
    q = q.where(sql<boolean>`NOT ${isOutcome}`);
    if (filters.outcome)
      q = q.where(({ exists, selectFrom }) =>
        exists(
          selectFrom('audit_events as o')
            .select(sql`1`.as('one'))
            .whereRef('o.workspace_id', '=', 'e.workspace_id')
            // stated, so that the planner may use the partial index audit_events_outcome_of
            .where(sql<boolean>`o.context ? 'decision_event_id'`)
            .where(sql`o.context->>'decision_event_id'`, '=', sql`e.id::text`)
            .where(sql`o.context->>'outcome'`, '=', filters.outcome),
        ),
      );
  } else if (filters.outcome) q = q.where(sql`e.context->>'outcome'`, '=', filters.outcome);
  if (filters.result) q = q.where('e.result', '=', filters.result);
  if (filters.severity) q = q.where('e.severity', '=', filters.severity);
  if (filters.from) q = q.where('e.event_timestamp', '>=', new Date(filters.from));
  if (filters.to) q = q.where('e.event_timestamp', '<', new Date(filters.to));
  return q;
}

/** The outcome events of these decision events (audit_events_outcome_of), with their seals. */
export function outcomeEventsOf(db: Kysely<DB>, workspaceId: string, decisionEventIds: string[]) {
  return auditEventsQuery(db, workspaceId, {})
    .where(isOutcome)
    .where(sql`e.context->>'decision_event_id'`, 'in', decisionEventIds)
    .execute();
}

/** The columns a search looks in: what an event says of who did what, never its context. */
const SEARCHED_COLUMNS = ['agent', 'action', 'resource', 'tool', 'policy', 'message', 'user_name'] as const;

/**
 * Events whose searched columns, or the MCP server their act ran on, contain `text`,
 * case-insensitively and literally (`%`, `_` and `\` match themselves). The rest of the context
 * is not searched: the dashboard redacts values in it, and a search would let a reader test
 * guesses of them; a server's slug is no secret (every audit row shows it).
 */
export function auditSearchCondition(text: string) {
  const pattern = `%${text.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
  return sql<boolean>`(${sql.join(
    [
      ...SEARCHED_COLUMNS.map((column) => sql`${sql.ref(`e.${column}`)} ILIKE ${pattern}`),
      sql`(e.context->'execution'->>'server') ILIKE ${pattern}`,
    ],
    sql` OR `,
  )})`;
}

export type AuditEventWithSeal = Awaited<ReturnType<ReturnType<typeof auditEventsQuery>['executeTakeFirstOrThrow']>>;

/** An audit event's row, and what auditRows (audit.service.ts) builds of one event: its row, with the event. */
export type AuditRow = Selectable<AuditEvents>;
type AuditRows = { row: AuditRow };

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
  'heads AS (SELECT * FROM json_to_recordset($2::json) AS h(workspace_id uuid, expected bigint, size bigint, root text)), ' +
  'claimed AS (SELECT c.workspace_id FROM audit_tree_heads c JOIN heads h USING (workspace_id) ' +
  'WHERE c.tree_size = h.expected FOR UPDATE OF c SKIP LOCKED), ' +
  'advanced AS (UPDATE audit_tree_heads c SET tree_size = h.size, root_hash = h.root FROM heads h ' +
  'WHERE c.workspace_id = h.workspace_id AND c.tree_size = h.expected AND c.workspace_id IN (SELECT workspace_id FROM claimed) ' +
  'RETURNING c.workspace_id), ' +
  'kept AS (SELECT * FROM input WHERE sequence IS NULL OR workspace_id IN (SELECT workspace_id FROM advanced)), ' +
  'queued AS (SELECT * FROM input WHERE sequence IS NULL), ' +
  `${insertEvents('kept')}, ` +
  'sealed AS (INSERT INTO audit_seals (workspace_id, sequence, event_id, event_timestamp, hash) ' +
  'SELECT workspace_id, sequence, id, event_timestamp, hash FROM kept WHERE sequence IS NOT NULL), ' +
  'nodes AS (INSERT INTO audit_tree_nodes (workspace_id, level, node_index, hash) ' +
  'SELECT workspace_id, level, node_index, hash FROM json_to_recordset($4::json) AS n(workspace_id uuid, level smallint, node_index bigint, hash text) ' +
  'WHERE workspace_id IN (SELECT workspace_id FROM advanced)), ' +
  `${enqueue('queued')}, ` +
  `outbox AS (${insertOutbox('kept')}) ` +
  'SELECT workspace_id FROM advanced';

/** Where a group commit moves a workspace's tree: from the size its seals start at to the head they lead to. */
export interface HeadMove {
  expected: number;
  next: TreeHead;
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
 * a row with a seal is written, sealed, with the subtrees its workspace's seals complete, if
 * that workspace's tree is still at `heads[workspace].expected`, and not at all otherwise; a row
 * without one is written and queued for the sealer. Returns the workspaces whose tree advanced.
 */
export async function insertAuditBatch(
  database: Database,
  rows: AuditRows[],
  /** Per row, its seal (undefined: not sealed here). */
  seals: (Seal | undefined)[],
  /** Per workspace sealed here, the size its seals start from and the head they lead to. */
  heads: Map<string, HeadMove>,
  /** The subtrees the seals complete, per workspace. */
  nodes: (StoredNode & { workspace_id: string })[],
): Promise<Set<string>> {
  const sealed: { id: string; sequence: number; hash: string }[] = [];
  for (const seal of seals) if (seal) sealed.push({ id: seal.event_id, sequence: seal.sequence, hash: seal.hash });
  const moves = [...heads].map(([workspace_id, { expected, next }]) => ({ workspace_id, expected, size: next.size, root: next.root }));
  const advanced = await database.run('warden_insert_audit_tree_batch', INSERT_AUDIT_ROWS_SEALING, [
    auditRowsParameter(rows),
    JSON.stringify(moves),
    JSON.stringify(sealed),
    JSON.stringify(nodes),
  ]);
  return new Set(advanced.map((row) => row.workspace_id as string));
}

/** Where the workspace's last verification ended. */
export const findVerification = (db: Kysely<DB>, workspaceId: string) =>
  db.selectFrom('audit_verifications').selectAll().where('workspace_id', '=', workspaceId).executeTakeFirst();

export async function saveVerification(
  db: Kysely<DB>,
  workspaceId: string,
  state: { size: number; frontier: string[]; recheckedTo: number; verifiedAt: Date },
): Promise<void> {
  const values = {
    tree_size: state.size,
    frontier: JSON.stringify(state.frontier),
    rechecked_to: state.recheckedTo,
    verified_at: state.verifiedAt,
  };
  await db
    .insertInto('audit_verifications')
    .values({ workspace_id: workspaceId, ...values })
    .onConflict((oc) => oc.column('workspace_id').doUpdateSet(values))
    .execute();
}

/**
 * The workspace's row, locked as a change's version bump locks it (FOR NO KEY UPDATE: decisions'
 * inserts, which only key-share it, go on), taken before anything else of the change.
 */
export const lockWorkspaceForChange = (trx: Kysely<DB>, workspaceId: string) =>
  trx.selectFrom('workspaces').select('id').where('id', '=', workspaceId).forNoKeyUpdate().executeTakeFirst();
