import type { Insertable, Kysely, Updateable } from 'kysely';
import type { DB, McpServerOauth } from '../../db/schema.ts';

export type OAuthConnectionRow = Awaited<ReturnType<typeof findConnection>> & {};

/** A server's OAuth connection, with the server's slug and URL (its configuration and its state). */
export const findConnection = (db: Kysely<DB>, workspaceId: string, serverId: string) =>
  db
    .selectFrom('mcp_server_oauth as o')
    .innerJoin('mcp_servers as s', (join) => join.onRef('s.workspace_id', '=', 'o.workspace_id').onRef('s.id', '=', 'o.server_id'))
    .selectAll('o')
    .select(['s.slug', 's.transport_url'])
    .where('o.workspace_id', '=', workspaceId)
    .where('o.server_id', '=', serverId)
    .executeTakeFirst();

/** Sets the configuration of a server's connection, forgetting any tokens (a new configuration needs a new consent). */
export const configureConnection = (db: Kysely<DB>, row: Insertable<McpServerOauth>) =>
  db
    .insertInto('mcp_server_oauth')
    .values(row)
    .onConflict((oc) =>
      oc.columns(['workspace_id', 'server_id']).doUpdateSet({
        ...disconnected,
        authorization_server: row.authorization_server ?? null,
        scopes: row.scopes ?? [],
        client_id: row.client_id ?? null,
        client_secret_encrypted: row.client_secret_encrypted ?? null,
        client_registered: false,
        issuer: null,
        metadata: null,
        resource: null,
        status_detail: null,
        generation: (eb) => eb('mcp_server_oauth.generation', '+', 1),
        updated_at: new Date(),
      }),
    )
    .execute();

/** What a connection keeps of its tokens when it ends. */
export const disconnected = {
  access_token_encrypted: null,
  refresh_token_encrypted: null,
  expires_at: null,
  refresh_after: null,
  refresh_lease_until: null,
  connected_at: null,
  status: 'not_connected',
} as const;

export const deleteConnection = (db: Kysely<DB>, workspaceId: string, serverId: string) =>
  db.deleteFrom('mcp_server_oauth').where('workspace_id', '=', workspaceId).where('server_id', '=', serverId).execute();

export const updateConnection = (db: Kysely<DB>, workspaceId: string, serverId: string, changes: Updateable<McpServerOauth>) =>
  db
    .updateTable('mcp_server_oauth')
    .set({ ...changes, updated_at: new Date() })
    .where('workspace_id', '=', workspaceId)
    .where('server_id', '=', serverId)
    .returningAll()
    .executeTakeFirst();

/**
 * Claims the right to refresh for `leaseMs` when no other process holds it and the connection
 * still holds the refresh token the caller read: true when this caller is the one to refresh.
 */
export async function claimRefresh(db: Kysely<DB>, workspaceId: string, serverId: string, refreshSealed: string, leaseMs: number) {
  const now = new Date();
  const claimed = await db
    .updateTable('mcp_server_oauth')
    .set({ refresh_lease_until: new Date(now.getTime() + leaseMs) })
    .where('workspace_id', '=', workspaceId)
    .where('server_id', '=', serverId)
    .where('refresh_token_encrypted', '=', refreshSealed)
    .where((eb) => eb.or([eb('refresh_lease_until', 'is', null), eb('refresh_lease_until', '<', now)]))
    .returning('server_id')
    .executeTakeFirst();
  return claimed !== undefined;
}

/** Makes the server's registry entry new (its version bump): upstream sessions of an earlier connection are then closed. */
export const touchServer = (db: Kysely<DB>, workspaceId: string, serverId: string) =>
  db
    .updateTable('mcp_servers')
    .set({ updated_at: new Date() })
    .where('workspace_id', '=', workspaceId)
    .where('id', '=', serverId)
    .execute();

export const insertPending = (db: Kysely<DB>, row: Insertable<DB['mcp_server_oauth_pending']>) =>
  db.insertInto('mcp_server_oauth_pending').values(row).execute();

/** Takes (deletes and returns) the authorization a state names, if it has not expired: a state is used once. */
export async function takePending(db: Kysely<DB>, stateHash: string) {
  const row = await db.deleteFrom('mcp_server_oauth_pending').where('state_hash', '=', stateHash).returningAll().executeTakeFirst();
  await db.deleteFrom('mcp_server_oauth_pending').where('expires_at', '<', new Date()).execute();
  return row && row.expires_at > new Date() ? row : undefined;
}
