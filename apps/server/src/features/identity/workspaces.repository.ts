import type { Kysely } from 'kysely';
import type { DB } from '../../db/schema.ts';

export const findWorkspaceBySlug = (db: Kysely<DB>, slug: string) =>
  db.selectFrom('workspaces').selectAll().where('slug', '=', slug).executeTakeFirst();

export const insertWorkspace = (db: Kysely<DB>, row: { id: string; slug: string; name: string }) =>
  db.insertInto('workspaces').values(row).returningAll().executeTakeFirstOrThrow();

/** The active key with this hash, with what authentication needs of its workspace. */
export const findActiveKeyByHash = (db: Kysely<DB>, keyHash: string) =>
  db
    .selectFrom('api_keys')
    .innerJoin('workspaces', 'workspaces.id', 'api_keys.workspace_id')
    .select([
      'api_keys.id',
      'api_keys.workspace_id',
      'api_keys.name',
      'api_keys.permissions',
      'workspaces.rate_limit_per_minute',
      'workspaces.policy_version',
      'workspaces.agents_version',
      'workspaces.mcp_servers_version',
    ])
    .where('api_keys.key_hash', '=', keyHash)
    .where('api_keys.revoked_at', 'is', null)
    .executeTakeFirst();

export const insertApiKey = (
  db: Kysely<DB>,
  row: { workspace_id: string; id: string; name: string; prefix: string; key_hash: string; permissions: string[] },
) => db.insertInto('api_keys').values(row).returningAll().executeTakeFirstOrThrow();

/** Without `workspaceId` (the CLI), a key of any workspace; with it (the dashboard), only that workspace's. */
export const revokeApiKey = (db: Kysely<DB>, id: string, workspaceId?: string) =>
  db
    .updateTable('api_keys')
    .set({ revoked_at: new Date() })
    .where('id', '=', id)
    .$if(workspaceId !== undefined, (q) => q.where('workspace_id', '=', workspaceId as string))
    .where('revoked_at', 'is', null)
    .returning(['id', 'workspace_id', 'name'])
    .executeTakeFirst();

export const listApiKeys = (db: Kysely<DB>, workspaceId: string) =>
  db
    .selectFrom('api_keys')
    .select(['id', 'name', 'prefix', 'permissions', 'created_at', 'revoked_at'])
    .where('workspace_id', '=', workspaceId)
    .orderBy('created_at')
    .execute();

/** Any key with this hash, revoked or not. */
export const findKeyByHash = (db: Kysely<DB>, keyHash: string) =>
  db.selectFrom('api_keys').select(['id']).where('key_hash', '=', keyHash).executeTakeFirst();

export const findWorkspaceById = (db: Kysely<DB>, id: string) =>
  db.selectFrom('workspaces').selectAll().where('id', '=', id).executeTakeFirst();

const API_KEY_COLUMNS = ['id', 'name', 'prefix', 'permissions', 'created_at', 'revoked_at'] as const;

/** A workspace's keys, for paginate (the dashboard's listing). */
export const apiKeysQuery = (db: Kysely<DB>, workspaceId: string) =>
  db.selectFrom('api_keys').select(API_KEY_COLUMNS).where('workspace_id', '=', workspaceId);

export const findApiKey = (db: Kysely<DB>, workspaceId: string, id: string) =>
  db.selectFrom('api_keys').select(API_KEY_COLUMNS).where('workspace_id', '=', workspaceId).where('id', '=', id).executeTakeFirst();
