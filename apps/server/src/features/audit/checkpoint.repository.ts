/** The signed checkpoints of each workspace's audit tree, as the checkpointer stores them and verifiers and the export read them. */
import { CompiledQuery, type Kysely, type Selectable, sql } from 'kysely';
import type { AuditCheckpoints, DB } from '../../db/schema.ts';
import { subscribedSql } from '../events/outbox.repository.ts';

/** A signed checkpoint as stored. */
export type CheckpointRow = Selectable<AuditCheckpoints>;

/**
 * A checkpoint's note as every reader gets it: the stored note (immutable), then the witness
 * cosignatures that came after it was stored (audit_late_cosignatures), in witness order.
 */
const servedNote = sql<string>`c.note || coalesce((SELECT string_agg(l.line, '' ORDER BY l.witness) FROM audit_late_cosignatures l WHERE l.workspace_id = c.workspace_id AND l.tree_size = c.tree_size), '')`;

/** The workspace's checkpoint of exactly `size` events, or its latest when no size is given. */
export const findCheckpoint = (db: Kysely<DB>, workspaceId: string, size?: number): Promise<CheckpointRow | undefined> => {
  let q = db
    .selectFrom('audit_checkpoints as c')
    .select(['c.workspace_id', 'c.tree_size', 'c.root_hash', 'c.checkpoint_timestamp', 'c.key_id', servedNote.as('note')])
    .where('c.workspace_id', '=', workspaceId);
  q = size === undefined ? q.orderBy('c.tree_size', 'desc').limit(1) : q.where('c.tree_size', '=', size);
  return q.executeTakeFirst();
};

/** The workspace's checkpoints larger than `size`, smallest first (a verification checks the tree against each). */
export const checkpointsAfter = (db: Kysely<DB>, workspaceId: string, size: number) =>
  db
    .selectFrom('audit_checkpoints as c')
    .select(['c.tree_size', 'c.root_hash', servedNote.as('note')])
    .where('c.workspace_id', '=', workspaceId)
    .where('c.tree_size', '>', size)
    .orderBy('c.tree_size')
    .execute();

/** A witness's cosignature of a stored checkpoint, come later; one per witness key and checkpoint. */
export const insertLateCosignature = (db: Kysely<DB>, row: { workspace_id: string; tree_size: number; witness: string; line: string }) =>
  db
    .insertInto('audit_late_cosignatures')
    .values(row)
    .onConflict((oc) => oc.doNothing())
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
    .selectFrom('audit_checkpoints as c')
    .select(['c.tree_size', servedNote.as('note')])
    .where('c.workspace_id', '=', workspaceId)
    .where('c.tree_size', '>', afterSize)
    .where('c.tree_size', '<=', maxSize)
    .orderBy('c.tree_size')
    .limit(limit)
    .execute();

/** Whether the database holds any signed checkpoint (of any log). */
export const anyCheckpoint = async (db: Kysely<DB>) =>
  (await db.selectFrom('audit_checkpoints').select('workspace_id').limit(1).executeTakeFirst()) !== undefined;
