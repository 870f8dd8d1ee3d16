import type { Insertable, Kysely, Updateable } from 'kysely';
import { isUuid } from '../../db/paginate.ts';
import type { DB, McpServers } from '../../db/schema.ts';

export type McpServerRow = Awaited<ReturnType<typeof findMcpServer>> & {};

/** By UUID or by slug. */
export const findMcpServer = (db: Kysely<DB>, workspaceId: string, idOrSlug: string) =>
  db
    .selectFrom('mcp_servers')
    .selectAll()
    .where('workspace_id', '=', workspaceId)
    .where(isUuid(idOrSlug) ? 'id' : 'slug', '=', idOrSlug)
    .executeTakeFirst();

export const mcpServersQuery = (db: Kysely<DB>, workspaceId: string) =>
  db.selectFrom('mcp_servers').selectAll().where('workspace_id', '=', workspaceId);

export const insertMcpServer = (db: Kysely<DB>, row: Insertable<McpServers>) =>
  db.insertInto('mcp_servers').values(row).returningAll().executeTakeFirstOrThrow();

export const updateMcpServer = (db: Kysely<DB>, workspaceId: string, id: string, changes: Updateable<McpServers>) =>
  db
    .updateTable('mcp_servers')
    .set({ ...changes, updated_at: new Date() })
    .where('workspace_id', '=', workspaceId)
    .where('id', '=', id)
    .returningAll()
    .executeTakeFirst();

export const deleteMcpServer = (db: Kysely<DB>, workspaceId: string, id: string) =>
  db.deleteFrom('mcp_servers').where('workspace_id', '=', workspaceId).where('id', '=', id).returning(['id']).executeTakeFirst();
