/**
 * The outbox: a webhook event is a row written in the same transaction as the change that
 * causes it, so an event exists if and only if its change committed. Delivery reads it later.
 *
 * An event is written only if, when it is written, an endpoint of the workspace that is not
 * disabled subscribes to its type (paused endpoints count: their deliveries are recorded
 * as `skipped`, to be replayed). An event nobody subscribes to would never be delivered, so
 * it is not written: the hot path (one `audit.created` per decision) then costs a workspace
 * without webhooks nothing. An endpoint receives the events whose statement runs after the
 * endpoint's creation committed (the check reads the statement's snapshot).
 */
import { randomUUID } from 'node:crypto';
import { type Kysely, sql } from 'kysely';
import type { DB } from '../../db/schema.ts';

export type EventType =
  | 'agent.created'
  | 'policy.updated'
  | 'audit.created'
  | 'audit.checkpoint'
  | 'audit.integrity_failed'
  | 'approval.requested'
  | 'approval.completed'
  | 'billing.updated'
  | 'webhook.test';

/** SQL condition: an endpoint of `workspace` (an SQL expression) that is not disabled subscribes to `type` (an SQL expression). */
export const subscribedSql = (workspace: string, type: string) =>
  `EXISTS (SELECT 1 FROM webhook_endpoints w WHERE w.workspace_id = ${workspace} AND w.disabled_at IS NULL ` +
  `AND w.events && ARRAY['*', ${type}]::text[])`;

/** Records an event of `type` in the workspace's outbox, if an endpoint subscribes to it (see above). */
export async function recordEvent(db: Kysely<DB>, workspaceId: string, type: EventType, data: unknown): Promise<void> {
  await sql`INSERT INTO outbox_events (workspace_id, id, type, data)
    SELECT e.workspace_id, e.id, e.type, e.data
    FROM (VALUES (${workspaceId}::uuid, ${randomUUID()}::uuid, ${type}::text, ${JSON.stringify(data)}::jsonb)) AS e (workspace_id, id, type, data)
    WHERE ${sql.raw(subscribedSql('e.workspace_id', 'e.type'))}`.execute(db);
}

/** Up to `limit` events not yet fanned out, oldest first, locked (skipping those another process holds). */
export const lockUndispatchedEvents = (trx: Kysely<DB>, limit: number) =>
  trx
    .selectFrom('outbox_events')
    .select(['workspace_id', 'id', 'type'])
    .where('dispatched_at', 'is', null)
    .orderBy('created_at')
    .limit(limit)
    .forUpdate()
    .skipLocked()
    .execute();

export const markDispatched = (trx: Kysely<DB>, workspaceId: string, ids: string[]) =>
  trx
    .updateTable('outbox_events')
    .set({ dispatched_at: new Date() })
    .where('workspace_id', '=', workspaceId)
    .where('id', 'in', ids)
    .execute();

export const findEvent = (db: Kysely<DB>, workspaceId: string, id: string) =>
  db.selectFrom('outbox_events').selectAll().where('workspace_id', '=', workspaceId).where('id', '=', id).executeTakeFirst();

/** An event that is never fanned out (already dispatched), whatever the subscriptions: for deliveries made by hand. */
export const insertDispatchedEvent = (db: Kysely<DB>, row: { workspace_id: string; id: string; type: EventType; data: unknown }) =>
  db
    .insertInto('outbox_events')
    .values({ ...row, data: JSON.stringify(row.data), dispatched_at: new Date() })
    .execute();
