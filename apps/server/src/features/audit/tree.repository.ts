/**
 * The storage of each workspace's Merkle tree (RFC 9162) over its audit events: the sealing
 * queue, the seals (leaves), the stored subtrees and the tree head. The sealer (tree.ts), the
 * group-commit writer and verification read and write it here.
 */
import { CompiledQuery, type Kysely, type SelectQueryBuilder, sql } from 'kysely';
import type { Database } from '../../db/database.ts';
import type { DB } from '../../db/schema.ts';
import { type NodeHashes, type NodeId, nodeMap } from './merkle.ts';

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

/** The seal (leaf index + 1) of a workspace's event, if it is sealed. */
export const findSeal = (db: Kysely<DB>, workspaceId: string, eventId: string) =>
  db
    .selectFrom('audit_seals')
    .select(['sequence', 'hash'])
    .where('workspace_id', '=', workspaceId)
    .where('event_id', '=', eventId)
    .executeTakeFirst();
