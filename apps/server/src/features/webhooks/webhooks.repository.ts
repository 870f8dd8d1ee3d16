import { type Insertable, type Kysely, sql, type Updateable } from 'kysely';
import type { DB, WebhookDeliveries, WebhookEndpoints } from '../../db/schema.ts';

export type EndpointRow = Awaited<ReturnType<typeof findEndpoint>> & {};
export type DeliveryRow = Awaited<ReturnType<typeof findDelivery>> & {};

export const findEndpoint = (db: Kysely<DB>, workspaceId: string, id: string) =>
  db.selectFrom('webhook_endpoints').selectAll().where('workspace_id', '=', workspaceId).where('id', '=', id).executeTakeFirst();

export const endpointsQuery = (db: Kysely<DB>, workspaceId: string) =>
  db.selectFrom('webhook_endpoints').selectAll().where('workspace_id', '=', workspaceId);

export const insertEndpoint = (db: Kysely<DB>, row: Insertable<WebhookEndpoints>) =>
  db.insertInto('webhook_endpoints').values(row).returningAll().executeTakeFirstOrThrow();

export const updateEndpoint = (db: Kysely<DB>, workspaceId: string, id: string, changes: Updateable<WebhookEndpoints>) =>
  db
    .updateTable('webhook_endpoints')
    .set({ ...changes, updated_at: new Date() })
    .where('workspace_id', '=', workspaceId)
    .where('id', '=', id)
    .returningAll()
    .executeTakeFirst();

export const deleteEndpoint = (db: Kysely<DB>, workspaceId: string, id: string) =>
  db.deleteFrom('webhook_endpoints').where('workspace_id', '=', workspaceId).where('id', '=', id).returning('id').executeTakeFirst();

export const findDelivery = (db: Kysely<DB>, workspaceId: string, id: string) =>
  db.selectFrom('webhook_deliveries').selectAll().where('workspace_id', '=', workspaceId).where('id', '=', id).executeTakeFirst();

export const deliveriesQuery = (db: Kysely<DB>, workspaceId: string, endpointId: string) =>
  db.selectFrom('webhook_deliveries').selectAll().where('workspace_id', '=', workspaceId).where('endpoint_id', '=', endpointId);

export const insertDelivery = (db: Kysely<DB>, row: Insertable<WebhookDeliveries>) =>
  db.insertInto('webhook_deliveries').values(row).returningAll().executeTakeFirstOrThrow();

export const insertDeliveries = (db: Kysely<DB>, rows: Insertable<WebhookDeliveries>[]) =>
  db.insertInto('webhook_deliveries').values(rows).execute();

/** The endpoints of these workspaces that are not disabled, with their subscriptions. */
export const activeEndpoints = (db: Kysely<DB>, workspaceIds: string[]) =>
  db
    .selectFrom('webhook_endpoints')
    .select(['workspace_id', 'id', 'events', 'paused'])
    .where('workspace_id', 'in', workspaceIds)
    .where('disabled_at', 'is', null)
    .execute();

export const disableEndpoint = (db: Kysely<DB>, workspaceId: string, id: string) =>
  db
    .updateTable('webhook_endpoints')
    .set({ disabled_at: new Date() })
    .where('workspace_id', '=', workspaceId)
    .where('id', '=', id)
    .execute();

/** Records a delivery attempt's outcome and releases its lease. */
export const finishDelivery = (db: Kysely<DB>, workspaceId: string, id: string, changes: Updateable<WebhookDeliveries>) =>
  db
    .updateTable('webhook_deliveries')
    .set({ ...changes, locked_until: null, updated_at: new Date() })
    .where('workspace_id', '=', workspaceId)
    .where('id', '=', id)
    .execute();

/**
 * Leases up to `limit` due deliveries until `leaseUntil`, taking workspaces in turn: each
 * workspace's due deliveries are ranked (its endpoints in turn, oldest first) after those the
 * caller already has under way (`busy`, per workspace), only ranks up to `perWorkspace`
 * qualify, and rank 1 of every workspace comes before any rank 2. FOR UPDATE SKIP LOCKED and
 * the lease condition, checked again on the locked row, keep one delivery to one process.
 */
export async function leaseDueDeliveries(
  db: Kysely<DB>,
  options: { limit: number; leaseUntil: Date; busy: ReadonlyMap<string, number>; perWorkspace: number },
): Promise<DeliveryRow[]> {
  const { limit, leaseUntil, perWorkspace } = options;
  const busy = JSON.stringify(Object.fromEntries(options.busy));
  const claimable = sql`d.status = 'pending' AND d.next_attempt_at <= now() AND (d.locked_until IS NULL OR d.locked_until < now())`;
  const { rows } = await sql<DeliveryRow>`
    WITH candidates AS (
      SELECT c.workspace_id, c.id, c.next_attempt_at,
        row_number() OVER (PARTITION BY e.workspace_id, e.id ORDER BY c.next_attempt_at, c.id) AS endpoint_rank
      FROM webhook_endpoints e
      CROSS JOIN LATERAL (
        SELECT d.workspace_id, d.id, d.next_attempt_at
        FROM webhook_deliveries d
        WHERE d.workspace_id = e.workspace_id AND d.endpoint_id = e.id AND ${claimable}
        ORDER BY d.next_attempt_at
        LIMIT ${perWorkspace}
      ) c
    ), ranked AS (
      SELECT workspace_id, id, next_attempt_at,
        coalesce((${busy}::jsonb ->> workspace_id::text)::int, 0)
          + row_number() OVER (PARTITION BY workspace_id ORDER BY endpoint_rank, next_attempt_at) AS slot
      FROM candidates
    ), chosen AS (
      SELECT workspace_id, id FROM ranked
      WHERE slot <= ${perWorkspace}
      ORDER BY slot, next_attempt_at
      LIMIT ${limit}
    ), locked AS (
      SELECT d.workspace_id, d.id
      FROM webhook_deliveries d JOIN chosen USING (workspace_id, id)
      WHERE ${claimable}
      FOR UPDATE OF d SKIP LOCKED
    )
    UPDATE webhook_deliveries d SET locked_until = ${leaseUntil}
    FROM locked
    WHERE d.workspace_id = locked.workspace_id AND d.id = locked.id
    RETURNING d.*`.execute(db);
  return rows;
}
