import type { Insertable, Kysely, Updateable } from 'kysely';
import { isUuid } from '../../db/paginate.ts';
import type { DB, PoliciesTable } from '../../db/schema.ts';

export type PolicyRow = Awaited<ReturnType<typeof findPolicy>> & {};

/** By UUID or by name. */
export const findPolicy = (db: Kysely<DB>, workspaceId: string, idOrName: string) =>
  db
    .selectFrom('policies')
    .selectAll()
    .where('workspace_id', '=', workspaceId)
    .where(isUuid(idOrName) ? 'id' : 'name', '=', idOrName)
    .executeTakeFirst();

export const policiesQuery = (db: Kysely<DB>, workspaceId: string, filters: { enabled?: boolean }) => {
  let q = db.selectFrom('policies').selectAll().where('workspace_id', '=', workspaceId);
  if (filters.enabled !== undefined) q = q.where('enabled', '=', filters.enabled);
  return q;
};

export const enabledPolicies = (db: Kysely<DB>, workspaceId: string) =>
  db.selectFrom('policies').selectAll().where('workspace_id', '=', workspaceId).where('enabled', '=', true).execute();

export const insertPolicy = (db: Kysely<DB>, row: Insertable<PoliciesTable>) =>
  db.insertInto('policies').values(row).returningAll().executeTakeFirstOrThrow();

export const updatePolicy = (db: Kysely<DB>, workspaceId: string, id: string, changes: Updateable<PoliciesTable>) =>
  db
    .updateTable('policies')
    .set((eb) => ({ ...changes, version: eb('version', '+', 1), updated_at: new Date() }))
    .where('workspace_id', '=', workspaceId)
    .where('id', '=', id)
    .returningAll()
    .executeTakeFirst();
