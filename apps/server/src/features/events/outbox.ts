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

export type EventType = 'agent.created' | 'policy.updated' | 'audit.created' | 'approval.completed' | 'billing.updated' | 'webhook.test';

/** SQL condition: an endpoint of `workspace` (an SQL expression) that is not disabled subscribes to `type` (an SQL expression). */
export const subscribedSql = (workspace: string, type: string) =>
  `EXISTS (SELECT 1 FROM webhook_endpoints w WHERE w.workspace_id = ${workspace} AND w.disabled_at IS NULL ` +
  `AND w.events && ARRAY['*', ${type}]::text[])`;

export async function recordEvent(db: Kysely<DB>, workspaceId: string, type: EventType, data: unknown): Promise<void> {
  await sql`INSERT INTO outbox_events (workspace_id, id, type, data)
    SELECT e.workspace_id, e.id, e.type, e.data
    FROM (VALUES (${workspaceId}::uuid, ${randomUUID()}::uuid, ${type}::text, ${JSON.stringify(data)}::jsonb)) AS e (workspace_id, id, type, data)
    WHERE ${sql.raw(subscribedSql('e.workspace_id', 'e.type'))}`.execute(db);
}
