import type { Kysely } from 'kysely';
import type { DB } from '../../db/schema.ts';

/** The workspace's enabled MCP servers, by slug: what the runtime and the gateway may reach. */
export const listEnabledServers = (db: Kysely<DB>, workspaceId: string) =>
  db
    .selectFrom('mcp_servers as s')
    .leftJoin('mcp_server_oauth as o', (join) => join.onRef('o.workspace_id', '=', 's.workspace_id').onRef('o.server_id', '=', 's.id'))
    .select([
      's.id',
      's.workspace_id',
      's.slug',
      's.transport_url',
      's.transport',
      's.auth_type',
      's.auth_header',
      's.auth_secret_encrypted',
    ])
    // the OAuth connection's generation: a new connection is a new credential (mcp-connector.ts pool key)
    .select('o.generation as oauth_generation')
    .where('s.workspace_id', '=', workspaceId)
    .where('s.enabled', '=', true)
    .orderBy('s.slug')
    .execute();
