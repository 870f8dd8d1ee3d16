import type { Insertable, Kysely, Updateable } from 'kysely';
import { jsonArrayFrom } from 'kysely/helpers/postgres';
import { isUuid } from '../../db/paginate.ts';
import type { DB, McpServers } from '../../db/schema.ts';

export type McpServerRow = Awaited<ReturnType<typeof findMcpServer>> & {};
/** The agents' connections an answer lists at most (the workspace's is always shown). */
export const MAX_CONNECTIONS_SHOWN = 100;

/** Servers with what answers show of their OAuth connections, if any (never a token). */
const withOAuth = (db: Kysely<DB>) =>
  db
    .selectFrom('mcp_servers')
    .leftJoin('mcp_server_oauth as o', (join) =>
      join.onRef('o.workspace_id', '=', 'mcp_servers.workspace_id').onRef('o.server_id', '=', 'mcp_servers.id'),
    )
    .selectAll('mcp_servers')
    .select((eb) => [
      'o.authorization_server as oauth_authorization_server',
      'o.issuer as oauth_issuer',
      'o.client_id as oauth_client_id',
      'o.scopes as oauth_scopes',
      // the workspace's connection and each agent's (JSON: their times are ISO strings)
      jsonArrayFrom(
        eb
          .selectFrom('mcp_server_oauth_grants as g')
          .leftJoin('agents as a', (join) => join.onRef('a.workspace_id', '=', 'g.workspace_id').onRef('a.id', '=', 'g.agent_id'))
          .select(['a.slug as agent', 'g.status', 'g.status_detail', 'g.connected_at', 'g.expires_at'])
          .whereRef('g.workspace_id', '=', 'mcp_servers.workspace_id')
          .whereRef('g.server_id', '=', 'mcp_servers.id')
          .orderBy('a.slug', (ob) => ob.nullsFirst())
          .limit(MAX_CONNECTIONS_SHOWN + 1),
      ).as('oauth_grants'),
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
