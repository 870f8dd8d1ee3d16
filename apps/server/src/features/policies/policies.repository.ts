import type { Insertable, Kysely, Updateable } from 'kysely';
import { isUuid } from '../../db/paginate.ts';
import type { DB, Policies } from '../../db/schema.ts';

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

export const insertPolicy = (db: Kysely<DB>, row: Insertable<Policies>) =>
  db.insertInto('policies').values(row).returningAll().executeTakeFirstOrThrow();

export const updatePolicy = (db: Kysely<DB>, workspaceId: string, id: string, changes: Updateable<Policies>) =>
  db
    .updateTable('policies')
    .set((eb) => ({ ...changes, version: eb('version', '+', 1), updated_at: new Date() }))
    .where('workspace_id', '=', workspaceId)
    .where('id', '=', id)
    .returningAll()
    .executeTakeFirst();

export const deletePolicy = (db: Kysely<DB>, workspaceId: string, id: string) =>
  db.deleteFrom('policies').where('workspace_id', '=', workspaceId).where('id', '=', id).returningAll().executeTakeFirst();

/**
 * Locks the workspace's row, first thing in a transaction that writes a policy: the trigger
 * that bumps its policy version takes that lock anyway, and taking it before the policy's row
 * (always in this order) lets the workspace limits count without two saves both passing.
 */
export const lockWorkspace = (trx: Kysely<DB>, workspaceId: string) =>
  trx.selectFrom('workspaces').select('id').where('id', '=', workspaceId).forUpdate().executeTakeFirst();

/** The rules of every policy of the workspace, enabled or not (but `exceptPolicy`). */
export const policyRules = (db: Kysely<DB>, workspaceId: string, exceptPolicy?: string) => {
  let q = db.selectFrom('policies').select('rules').where('workspace_id', '=', workspaceId);
  if (exceptPolicy) q = q.where('id', '!=', exceptPolicy);
  return q.execute();
};
