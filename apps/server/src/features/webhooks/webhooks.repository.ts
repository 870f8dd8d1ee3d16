import type { Insertable, Kysely, Updateable } from 'kysely';
import type { DB, WebhookEndpointsTable } from '../../db/schema.ts';

export type EndpointRow = Awaited<ReturnType<typeof findEndpoint>> & {};
export type DeliveryRow = Awaited<ReturnType<typeof findDelivery>> & {};

export const findEndpoint = (db: Kysely<DB>, workspaceId: string, id: string) =>
  db.selectFrom('webhook_endpoints').selectAll().where('workspace_id', '=', workspaceId).where('id', '=', id).executeTakeFirst();

export const endpointsQuery = (db: Kysely<DB>, workspaceId: string) =>
  db.selectFrom('webhook_endpoints').selectAll().where('workspace_id', '=', workspaceId);

export const insertEndpoint = (db: Kysely<DB>, row: Insertable<WebhookEndpointsTable>) =>
  db.insertInto('webhook_endpoints').values(row).returningAll().executeTakeFirstOrThrow();

export const updateEndpoint = (db: Kysely<DB>, workspaceId: string, id: string, changes: Updateable<WebhookEndpointsTable>) =>
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
