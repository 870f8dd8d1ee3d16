import type { Kysely } from 'kysely';
import type { DB } from '../../db/schema.ts';

/** The workspace's enabled MCP servers, by slug: what the runtime and the gateway may reach. */
export const listEnabledServers = (db: Kysely<DB>, workspaceId: string) =>
  db
    .selectFrom('mcp_servers')
    .select(['id', 'workspace_id', 'slug', 'transport_url', 'transport', 'auth_type', 'auth_header', 'auth_secret_encrypted'])
    .where('workspace_id', '=', workspaceId)
    .where('enabled', '=', true)
    .orderBy('slug')
    .execute();
