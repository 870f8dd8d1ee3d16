import { type Insertable, type Kysely, sql, type Updateable } from 'kysely';
import { isUuid } from '../../db/paginate.ts';
import type { Agents, DB } from '../../db/schema.ts';

export type AgentRow = Awaited<ReturnType<typeof findAgent>> & {};

/** By UUID or by slug. */
export const findAgent = (db: Kysely<DB>, workspaceId: string, idOrSlug: string) =>
  db
    .selectFrom('agents')
    .selectAll()
    .where('workspace_id', '=', workspaceId)
    .where(isUuid(idOrSlug) ? 'id' : 'slug', '=', idOrSlug)
    .executeTakeFirst();

export const agentsQuery = (db: Kysely<DB>, workspaceId: string, filters: { status?: string; provider?: string; environment?: string }) => {
  let q = db.selectFrom('agents').selectAll().where('workspace_id', '=', workspaceId);
  if (filters.status) q = q.where('status', '=', filters.status);
  if (filters.provider) q = q.where('provider', '=', filters.provider);
  if (filters.environment) q = q.where('environment', '=', filters.environment);
  return q;
};

export const insertAgent = (db: Kysely<DB>, row: Insertable<Agents>) =>
  db.insertInto('agents').values(row).returningAll().executeTakeFirstOrThrow();

export const updateAgent = (db: Kysely<DB>, workspaceId: string, id: string, changes: Updateable<Agents>) =>
  db
    .updateTable('agents')
    .set({ ...changes, updated_at: new Date() })
    .where('workspace_id', '=', workspaceId)
    .where('id', '=', id)
    .returningAll()
    .executeTakeFirst();

export const deleteAgent = (db: Kysely<DB>, workspaceId: string, id: string) =>
  db.deleteFrom('agents').where('workspace_id', '=', workspaceId).where('id', '=', id).returning(['id']).executeTakeFirst();

/** By slug or by name (evaluation inputs and approvals name agents either way). */
export const findAgentBySlugOrName = (db: Kysely<DB>, workspaceId: string, slugOrName: string) =>
  db
    .selectFrom('agents')
    .selectAll()
    .where('workspace_id', '=', workspaceId)
    .where((eb) => eb.or([eb('slug', '=', slugOrName), eb('name', '=', slugOrName)]))
    .orderBy(sql`slug = ${slugOrName}`, 'desc')
    .executeTakeFirst();

/**
 * Every agent of the workspace that a runtime call may mean — by key hash, slug or name — in
 * one query (the identity check resolves and cross-checks them in memory).
 */
export const findAgentCandidates = (db: Kysely<DB>, workspaceId: string, keyHash: string | undefined, named: string | undefined) =>
  db
    .selectFrom('agents')
    .selectAll()
    .where('workspace_id', '=', workspaceId)
    .where((eb) =>
      eb.or([
        ...(keyHash !== undefined ? [eb('api_key_hash', '=', keyHash)] : []),
        ...(named !== undefined ? [eb('slug', '=', named), eb('name', '=', named)] : []),
      ]),
    )
    .limit(10)
    .execute();
