import { CompiledQuery, type Kysely, type SelectQueryBuilder, sql } from 'kysely';
import type { DB } from '../../db/schema.ts';

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
 */
export const unsealedEventsQuery = (db: Kysely<DB>, workspaceId: string, limit: number) =>
  db
    .selectFrom((eb) =>
      eb
        .selectFrom('audit_unsealed')
        .selectAll()
        .where('workspace_id', '=', workspaceId)
        .orderBy('event_timestamp')
        .orderBy('event_id')
        .limit(limit)
        .as('u'),
    )
    .innerJoinLateral(
      (eb) => eventByKey(eb.selectFrom('audit_events').selectAll(), 'u'),
      (join) => join.onTrue(),
    )
    .selectAll('e')
    .orderBy('u.event_timestamp')
    .orderBy('u.event_id');

export const unsealedEvents = (db: Kysely<DB>, workspaceId: string, limit: number) => unsealedEventsQuery(db, workspaceId, limit).execute();

/** Workspaces with events waiting for their seal. */
export const workspacesWithUnsealed = async (db: Kysely<DB>) =>
  (await db.selectFrom('audit_unsealed').select('workspace_id').distinct().execute()).map((row) => row.workspace_id);

/** Events without a seal, counted from the events themselves (what verification reports). */
export const countUnsealed = async (db: Kysely<DB>, workspaceId: string) =>
  Number(
    (
      await db
        .selectFrom('audit_events as e')
        .leftJoin('audit_seals as s', (join) => join.onRef('s.workspace_id', '=', 'e.workspace_id').onRef('s.event_id', '=', 'e.id'))
        .select((eb) => eb.fn.countAll<number>().as('n'))
        .where('e.workspace_id', '=', workspaceId)
        .where('s.event_id', 'is', null)
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
  hash: string;
}

/**
 * Records a sealed batch in ONE statement (one round trip while the chain head is locked): the
 * seals (one JSON parameter, as the audit rows are written), the events taken off the sealing
 * queue, and the new chain head.
 */
export async function recordSeals(db: Kysely<DB>, workspaceId: string, seals: Seal[]): Promise<void> {
  const head = seals.at(-1);
  if (!head) return;
  await db.executeQuery(
    CompiledQuery.raw(
      'WITH batch AS (SELECT * FROM json_to_recordset($2::json) AS r(sequence bigint, event_id uuid, event_timestamp timestamptz, hash text)), ' +
        'sealed AS (INSERT INTO audit_seals (workspace_id, sequence, event_id, event_timestamp, hash) ' +
        'SELECT $1::uuid, sequence, event_id, event_timestamp, hash FROM batch), ' +
        'dequeued AS (DELETE FROM audit_unsealed WHERE workspace_id = $1::uuid AND event_id IN (SELECT event_id FROM batch)) ' +
        'UPDATE audit_chain_heads SET last_sequence = $3, last_hash = $4 WHERE workspace_id = $1::uuid',
      [workspaceId, JSON.stringify(seals), head.sequence, head.hash],
    ),
  );
}
