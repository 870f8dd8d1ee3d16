import { CompiledQuery, type Kysely, type Selectable, type SelectQueryBuilder, sql } from 'kysely';
import type { Database } from '../../db/database.ts';
import type { AuditCheckpoints, AuditEvents, DB } from '../../db/schema.ts';
import { subscribedSql } from '../events/outbox.repository.ts';
import { type NodeHashes, type NodeId, nodeMap } from './merkle.ts';

export interface AuditFilters {
  agent?: string;
  action?: string;
  result?: string;
  severity?: string;
  from?: string;
  to?: string;
}

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
  if (filters.result) q = q.where('e.result', '=', filters.result);
  if (filters.severity) q = q.where('e.severity', '=', filters.severity);
  if (filters.from) q = q.where('e.event_timestamp', '>=', new Date(filters.from));
  if (filters.to) q = q.where('e.event_timestamp', '<', new Date(filters.to));
  return q;
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

/**
 * Narrows `events` (a select from audit_events) to the one event that a row of `from` names
 * (a queue entry or a seal: workspace_id, event_timestamp, event_id), for a lateral join that
 * probes the events' primary key once per row. The LIMIT 1 keeps it a probe: without it
 * PostgreSQL flattens the lateral join into a hash join over the workspace's whole history
 * (docs/decisions/0006-postgresql-plan-pins.md).
 */
const eventByKey = <D, TB extends keyof D, O>(events: SelectQueryBuilder<D, TB, O>, from: 'u' | 's') =>
  events
    .where(
      sql<boolean>`(audit_events.workspace_id, audit_events.event_timestamp, audit_events.id) = (${sql.ref(`${from}.workspace_id`)}, ${sql.ref(`${from}.event_timestamp`)}, ${sql.ref(`${from}.event_id`)})`,
    )
    .limit(1)
    .as('e');

/**
 * The oldest `limit` events of a workspace's sealing queue (audit_unsealed). The queue is read
 * first and each of its events is then fetched by its key (a lateral join: one index probe per
 * event, in the one partition its timestamp names). A plain join leaves the plan to statistics
 * that a queue emptied every half second never has right, and hash-joined the workspace's whole
 * history on every sealing round (docs/decisions/0006-postgresql-plan-pins.md).
 *
 * With `after` (a queue key already dequeued), only the events queued past it: the read starts
 * at that key in the queue's primary key instead of at the workspace's first entry. Between
 * vacuums the front of the queue is a run of dead entries (every event sealed since the last
 * vacuum), which a read from the start steps over on every batch: catching up a backlog of
 * millions of events was quadratic (`npm run bench:scale`, the rate fell with the tree's size).
 * The key is widened by a millisecond (as recordSeals widens its range), so a timestamp finer
 * than JavaScript's, read back rounded, never moves the start past an entry still queued.
 */
export const unsealedEventsQuery = (db: Kysely<DB>, workspaceId: string, limit: number, after?: QueueKey) =>
  db
    .selectFrom((eb) => {
      let queue = eb.selectFrom('audit_unsealed').selectAll().where('workspace_id', '=', workspaceId);
      if (after)
        queue = queue.where(
          sql<boolean>`(event_timestamp, event_id) > (${after.event_timestamp}::timestamptz - interval '1 millisecond', ${after.event_id}::uuid)`,
        );
      return queue.orderBy('event_timestamp').orderBy('event_id').limit(limit).as('u');
    })
    .innerJoinLateral(
      (eb) => eventByKey(eb.selectFrom('audit_events').selectAll(), 'u'),
      (join) => join.onTrue(),
    )
    .selectAll('e')
    .orderBy('u.event_timestamp')
    .orderBy('u.event_id');

export const unsealedEvents = (db: Kysely<DB>, workspaceId: string, limit: number, after?: QueueKey) =>
  unsealedEventsQuery(db, workspaceId, limit, after).execute();

/** A sealing queue entry's place in the queue's primary key (after the workspace). */
export interface QueueKey {
  /** ISO 8601. */
  event_timestamp: string;
  event_id: string;
}

/**
 * Workspaces with events waiting for their seal: a skip scan of the queue's primary key, one
 * probe per workspace. A DISTINCT read the whole queue on every sealing round, so sealing a
 * backlog was quadratic.
 */
export async function workspacesWithUnsealed(db: Kysely<DB>): Promise<string[]> {
  const { rows } = await db.executeQuery<{ workspace_id: string }>(
    CompiledQuery.raw(
      'WITH RECURSIVE w AS ((SELECT workspace_id FROM audit_unsealed ORDER BY workspace_id LIMIT 1) UNION ALL ' +
        'SELECT (SELECT u.workspace_id FROM audit_unsealed u WHERE u.workspace_id > w.workspace_id ORDER BY u.workspace_id LIMIT 1) ' +
        'FROM w WHERE w.workspace_id IS NOT NULL) ' +
        'SELECT workspace_id FROM w WHERE workspace_id IS NOT NULL',
    ),
  );
  return rows.map((row) => row.workspace_id);
}

/** Events queued for their seal. */
export const countQueued = async (db: Kysely<DB>, workspaceId: string) =>
  Number(
    (
      await db
        .selectFrom('audit_unsealed')
        .select((eb) => eb.fn.countAll<number>().as('n'))
        .where('workspace_id', '=', workspaceId)
        .executeTakeFirstOrThrow()
    ).n,
  );

/** Events recorded at or after `since` that are neither sealed nor queued (written around Warden). */
export const countUnaccounted = async (db: Kysely<DB>, workspaceId: string, since: Date) =>
  Number(
    (
      await db
        .selectFrom('audit_events as e')
        .select((eb) => eb.fn.countAll<number>().as('n'))
        .where('e.workspace_id', '=', workspaceId)
        .where('e.event_timestamp', '>=', since)
        .where(({ not, exists, selectFrom }) =>
          not(
            exists(
              selectFrom('audit_seals as s')
                .select('s.sequence')
                .whereRef('s.workspace_id', '=', 'e.workspace_id')
                .whereRef('s.event_id', '=', 'e.id'),
            ),
          ),
        )
        .where(({ not, exists, selectFrom }) =>
          not(
            exists(
              selectFrom('audit_unsealed as u')
                .select('u.event_id')
                .whereRef('u.workspace_id', '=', 'e.workspace_id')
                .whereRef('u.event_timestamp', '=', 'e.event_timestamp')
                .whereRef('u.event_id', '=', 'e.id'),
            ),
          ),
        )
        .executeTakeFirstOrThrow()
    ).n,
  );

/**
 * Seals with their events (null when the event row is gone), in chain order. Each seal's event
 * is probed by its full key, the seal's copy of the event timestamp included (events carry
 * JavaScript's millisecond timestamps, so the copy is exact); joined on workspace and id alone,
 * every batch of a verification hash-joined the workspace's whole history, so verifying was
 * quadratic (docs/decisions/0006-postgresql-plan-pins.md). An event whose timestamp was
 * changed is then not found, which verification reports as broken, as it should.
 */
export const sealsWithEventsQuery = (db: Kysely<DB>, workspaceId: string, afterSequence: number, limit: number) =>
  db
    .selectFrom((eb) =>
      eb
        .selectFrom('audit_seals')
        .selectAll()
        .where('workspace_id', '=', workspaceId)
        .where('sequence', '>', afterSequence)
        .orderBy('sequence')
        .limit(limit)
        .as('s'),
    )
    .leftJoinLateral(
      (eb) => eventByKey(eb.selectFrom('audit_events').selectAll(), 's'),
      (join) => join.onTrue(),
    )
    .selectAll('e')
    .select(['s.sequence', 's.hash as seal_hash', 's.event_id as sealed_event_id'])
    .orderBy('s.sequence');

export const sealsWithEvents = (db: Kysely<DB>, workspaceId: string, afterSequence: number, limit: number) =>
  sealsWithEventsQuery(db, workspaceId, afterSequence, limit).execute();

export interface Seal {
  sequence: number;
  event_id: string;
  event_timestamp: Date | string;
  /** The event's leaf hash (hex). */
  hash: string;
}

/** A complete subtree above the leaves, as stored (hash in hex). */
export interface StoredNode {
  level: number;
  node_index: number;
  hash: string;
}

/** A workspace's tree: its size and root hash (hex). */
export interface TreeHead {
  size: number;
  root: string;
}

const NODES_INPUT = 'json_to_recordset($3::json) AS n(level smallint, node_index bigint, hash text)';

/**
 * Records a sealed batch in ONE statement (one round trip while the tree head is locked): the
 * leaves (one JSON parameter, as the audit rows are written), the subtrees they complete, the
 * events taken off the sealing queue, and the new tree head. The queue rows are found by a range
 * of the queue's primary key (the batch's timestamps, widened by a millisecond each way so a
 * timestamp finer than JavaScript's still falls in it), then by id: by workspace and id alone,
 * each batch read the workspace's whole queue, so sealing a backlog was quadratic.
 */
export async function recordSeals(db: Kysely<DB>, workspaceId: string, seals: Seal[], nodes: StoredNode[], head: TreeHead): Promise<void> {
  if (seals.length === 0) return;
  await db.executeQuery(
    CompiledQuery.raw(
      'WITH batch AS (SELECT * FROM json_to_recordset($2::json) AS r(sequence bigint, event_id uuid, event_timestamp timestamptz, hash text)), ' +
        'sealed AS (INSERT INTO audit_seals (workspace_id, sequence, event_id, event_timestamp, hash) ' +
        'SELECT $1::uuid, sequence, event_id, event_timestamp, hash FROM batch), ' +
        `nodes AS (INSERT INTO audit_tree_nodes (workspace_id, level, node_index, hash) SELECT $1::uuid, level, node_index, hash FROM ${NODES_INPUT}), ` +
        'dequeued AS (DELETE FROM audit_unsealed WHERE workspace_id = $1::uuid ' +
        "AND event_timestamp >= (SELECT min(event_timestamp) FROM batch) - interval '1 millisecond' " +
        "AND event_timestamp < (SELECT max(event_timestamp) FROM batch) + interval '1 millisecond' " +
        'AND event_id IN (SELECT event_id FROM batch)) ' +
        'UPDATE audit_tree_heads SET tree_size = $4, root_hash = $5 WHERE workspace_id = $1::uuid',
      [workspaceId, JSON.stringify(seals), JSON.stringify(nodes), head.size, head.root],
    ),
  );
}

/** A node wanted from a workspace's tree: level 0 is a leaf (from audit_seals), above from audit_tree_nodes. */
export interface WantedNode {
  workspace_id: string;
  level: number;
  node_index: number;
}

/**
 * The stored hashes of these nodes, in one statement (each an index probe); a node that is not
 * stored comes back with a null hash.
 */
export async function readNodes(db: Kysely<DB>, wanted: WantedNode[]): Promise<(WantedNode & { hash: string | null })[]> {
  if (wanted.length === 0) return [];
  const { rows } = await db.executeQuery<WantedNode & { hash: string | null }>(
    CompiledQuery.raw(
      'SELECT w.workspace_id, w.level, w.node_index, COALESCE(s.hash, n.hash) AS hash ' +
        'FROM json_to_recordset($1::json) AS w(workspace_id uuid, level smallint, node_index bigint) ' +
        'LEFT JOIN audit_seals s ON w.level = 0 AND s.workspace_id = w.workspace_id AND s.sequence = w.node_index + 1 ' +
        'LEFT JOIN audit_tree_nodes n ON w.level > 0 AND n.workspace_id = w.workspace_id AND n.level = w.level AND n.node_index = w.node_index',
      [JSON.stringify(wanted)],
    ),
  );
  return rows.map((row) => ({ ...row, level: Number(row.level), node_index: Number(row.node_index) }));
}

/** The stored hashes of these nodes of one workspace's tree, as the map merkle.ts computes from (a missing one throws). */
export async function readNodeHashes(db: Kysely<DB>, workspaceId: string, ids: NodeId[]): Promise<NodeHashes> {
  const rows = await readNodes(
    db,
    ids.map(({ level, index }) => ({ workspace_id: workspaceId, level, node_index: index })),
  );
  const missing = rows.find((row) => row.hash === null);
  if (missing) throw new Error(`audit tree node (${missing.level}, ${missing.node_index}) of workspace ${workspaceId} is missing`);
  return nodeMap(rows.map((row) => ({ level: row.level, index: row.node_index, hash: Buffer.from(row.hash as string, 'hex') })));
}

/** Locks a workspace's tree head (creating it, empty, on its first seal) and returns it. */
export async function lockTreeHead(trx: Kysely<DB>, workspaceId: string): Promise<TreeHead> {
  const lock = () => trx.selectFrom('audit_tree_heads').selectAll().where('workspace_id', '=', workspaceId).forUpdate().executeTakeFirst();
  let head = await lock();
  if (!head) {
    await trx
      .insertInto('audit_tree_heads')
      .values({ workspace_id: workspaceId })
      .onConflict((oc) => oc.doNothing())
      .execute();
    head = await lock();
  }
  if (!head) throw new Error(`audit tree head of workspace ${workspaceId} vanished`);
  return { size: Number(head.tree_size), root: head.root_hash };
}

/** A workspace's tree head as last committed (an empty tree when it has none yet). */
export async function readTreeHead(db: Kysely<DB>, workspaceId: string): Promise<TreeHead | undefined> {
  const head = await db
    .selectFrom('audit_tree_heads')
    .select(['tree_size', 'root_hash'])
    .where('workspace_id', '=', workspaceId)
    .executeTakeFirst();
  return head && { size: Number(head.tree_size), root: head.root_hash };
}

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

/**
 * The heads of these workspaces' trees, each created (empty) if the workspace has never been
 * sealed (a workspace that no longer exists has none). A head locked by another transaction
 * is read as it was last committed.
 */
export async function readTreeHeads(database: Database, workspaceIds: string[]): Promise<Map<string, TreeHead>> {
  const rows = await database.run(
    'warden_read_tree_heads',
    'WITH wanted AS (SELECT json_array_elements_text($1::json)::uuid AS workspace_id), ' +
      'created AS (INSERT INTO audit_tree_heads (workspace_id) SELECT workspace_id FROM wanted JOIN workspaces ON workspaces.id = wanted.workspace_id ' +
      'ON CONFLICT DO NOTHING ' +
      'RETURNING workspace_id, tree_size, root_hash) ' +
      'SELECT workspace_id, tree_size, root_hash FROM created UNION ALL ' +
      'SELECT workspace_id, tree_size, root_hash FROM audit_tree_heads JOIN wanted USING (workspace_id)',
    [JSON.stringify(workspaceIds)],
  );
  return new Map(rows.map((row) => [row.workspace_id as string, { size: Number(row.tree_size), root: row.root_hash as string }]));
}

/** A signed checkpoint as stored. */
export type CheckpointRow = Selectable<AuditCheckpoints>;

/** The workspace's checkpoint of exactly `size` events, or its latest when no size is given. */
export const findCheckpoint = (db: Kysely<DB>, workspaceId: string, size?: number) => {
  let q = db.selectFrom('audit_checkpoints').selectAll().where('workspace_id', '=', workspaceId);
  q = size === undefined ? q.orderBy('tree_size', 'desc').limit(1) : q.where('tree_size', '=', size);
  return q.executeTakeFirst();
};

/** The workspace's checkpoints larger than `size`, smallest first (a verification checks the tree against each). */
export const checkpointsAfter = (db: Kysely<DB>, workspaceId: string, size: number) =>
  db
    .selectFrom('audit_checkpoints')
    .select(['tree_size', 'root_hash', 'note'])
    .where('workspace_id', '=', workspaceId)
    .where('tree_size', '>', size)
    .orderBy('tree_size')
    .execute();

/** Trees that grew since their last checkpoint (each head probes its checkpoints' primary key once). */
export const treesDueForCheckpoint = (db: Kysely<DB>) =>
  db
    .selectFrom('audit_tree_heads as h')
    .select(['h.workspace_id', 'h.tree_size', 'h.root_hash'])
    .where('h.tree_size', '>', 0)
    .where(({ eb, selectFrom }) =>
      eb(
        'h.tree_size',
        '>',
        selectFrom('audit_checkpoints as c')
          .select((e) => e.fn.coalesce(e.fn.max('c.tree_size'), sql<number>`0`).as('size'))
          .whereRef('c.workspace_id', '=', 'h.workspace_id'),
      ),
    )
    .execute();

/**
 * Stores a signed checkpoint and, for an endpoint subscribed to it, its `audit.checkpoint` outbox
 * event, in one statement; a checkpoint of that size already stored (by another process) wins and
 * nothing is written. Returns whether this one was stored.
 */
export async function insertCheckpoint(db: Kysely<DB>, checkpoint: CheckpointRow, eventData: unknown): Promise<boolean> {
  const { rows } = await db.executeQuery<{ workspace_id: string }>(
    CompiledQuery.raw(
      'WITH stored AS (INSERT INTO audit_checkpoints (workspace_id, tree_size, root_hash, checkpoint_timestamp, key_id, note) ' +
        'VALUES ($1::uuid, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING RETURNING workspace_id), ' +
        "outbox AS (INSERT INTO outbox_events (workspace_id, id, type, data) SELECT workspace_id, gen_random_uuid(), 'audit.checkpoint', $7::jsonb " +
        `FROM stored WHERE ${subscribedSql('stored.workspace_id', "'audit.checkpoint'")}) ` +
        'SELECT workspace_id FROM stored',
      [
        checkpoint.workspace_id,
        checkpoint.tree_size,
        checkpoint.root_hash,
        checkpoint.checkpoint_timestamp,
        checkpoint.key_id,
        checkpoint.note,
        JSON.stringify(eventData),
      ],
    ),
  );
  return rows.length > 0;
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

/** The seal (leaf index + 1) of a workspace's event, if it is sealed. */
export const findSeal = (db: Kysely<DB>, workspaceId: string, eventId: string) =>
  db
    .selectFrom('audit_seals')
    .select(['sequence', 'hash'])
    .where('workspace_id', '=', workspaceId)
    .where('event_id', '=', eventId)
    .executeTakeFirst();

// ---- The offline export (audit-export.ts, `warden audit export`) ----------------------------------

/** The size of a workspace's largest stored checkpoint (0 when it has none). */
export const largestCheckpointSize = async (db: Kysely<DB>, workspaceId: string) =>
  Number(
    (
      await db
        .selectFrom('audit_checkpoints')
        .select((eb) => eb.fn.coalesce(eb.fn.max('tree_size'), sql<number>`0`).as('size'))
        .where('workspace_id', '=', workspaceId)
        .executeTakeFirstOrThrow()
    ).size,
  );

/** Up to `limit` of a workspace's stored checkpoints of a size in (afterSize, maxSize], by size (its primary key). */
export const checkpointsBySize = (db: Kysely<DB>, workspaceId: string, afterSize: number, maxSize: number, limit: number) =>
  db
    .selectFrom('audit_checkpoints')
    .select(['tree_size', 'note'])
    .where('workspace_id', '=', workspaceId)
    .where('tree_size', '>', afterSize)
    .where('tree_size', '<=', maxSize)
    .orderBy('tree_size')
    .limit(limit)
    .execute();
