import type { Insertable, Kysely, Updateable } from 'kysely';
import { isUuid } from '../../db/paginate.ts';
import type { DB, McpServers } from '../../db/schema.ts';

export type McpServerRow = Awaited<ReturnType<typeof findMcpServer>> & {};

/** Servers with what answers show of their OAuth connection, if any (never a token). */
const withOAuth = (db: Kysely<DB>) =>
  db
    .selectFrom('mcp_servers')
    .leftJoin('mcp_server_oauth as o', (join) =>
      join.onRef('o.workspace_id', '=', 'mcp_servers.workspace_id').onRef('o.server_id', '=', 'mcp_servers.id'),
    )
    .selectAll('mcp_servers')
    .select([
      'o.authorization_server as oauth_authorization_server',
      'o.issuer as oauth_issuer',
      'o.client_id as oauth_client_id',
      'o.scopes as oauth_scopes',
      'o.status as oauth_status',
      'o.status_detail as oauth_status_detail',
      'o.connected_at as oauth_connected_at',
      'o.expires_at as oauth_expires_at',
    ]);

/** By UUID or by slug. */
export const findMcpServer = (db: Kysely<DB>, workspaceId: string, idOrSlug: string) =>
  withOAuth(db)
    .where('mcp_servers.workspace_id', '=', workspaceId)
    .where(isUuid(idOrSlug) ? 'mcp_servers.id' : 'mcp_servers.slug', '=', idOrSlug)
    .executeTakeFirst();

export const mcpServersQuery = (db: Kysely<DB>, workspaceId: string) => withOAuth(db).where('mcp_servers.workspace_id', '=', workspaceId);

export const insertMcpServer = (db: Kysely<DB>, row: Insertable<McpServers>) =>
  db.insertInto('mcp_servers').values(row).returning('id').executeTakeFirstOrThrow();

export const updateMcpServer = (db: Kysely<DB>, workspaceId: string, id: string, changes: Updateable<McpServers>) =>
  db
    .updateTable('mcp_servers')
    .set({ ...changes, updated_at: new Date() })
    .where('workspace_id', '=', workspaceId)
    .where('id', '=', id)
    .returning('id')
    .executeTakeFirst();

export const deleteMcpServer = (db: Kysely<DB>, workspaceId: string, id: string) =>
  db.deleteFrom('mcp_servers').where('workspace_id', '=', workspaceId).where('id', '=', id).returning(['id']).executeTakeFirst();
