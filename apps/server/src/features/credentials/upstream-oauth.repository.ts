import { type Insertable, type Kysely, sql, type Updateable } from 'kysely';
import type { DB, McpServerOauth, McpServerOauthGrants } from '../../db/schema.ts';

export type OAuthConfigRow = Awaited<ReturnType<typeof findConfig>> & {};
export type OAuthGrantRow = Awaited<ReturnType<typeof findGrant>> & {};

/** A server's OAuth configuration and what its last connect found, with the server's slug and URL. */
export const findConfig = (db: Kysely<DB>, workspaceId: string, serverId: string) =>
  db
    .selectFrom('mcp_server_oauth as o')
    .innerJoin('mcp_servers as s', (join) => join.onRef('s.workspace_id', '=', 'o.workspace_id').onRef('s.id', '=', 'o.server_id'))
    .selectAll('o')
    .select(['s.slug', 's.transport_url'])
    .where('o.workspace_id', '=', workspaceId)
    .where('o.server_id', '=', serverId)
    .executeTakeFirst();

const nextGenerationValue = sql<number>`nextval('mcp_server_oauth_generation')`;

/** Sets a server's OAuth configuration, ending its connections (a new configuration needs a new consent). */
export async function configure(db: Kysely<DB>, row: Insertable<McpServerOauth>) {
  await endConnections(db, row.workspace_id, row.server_id);
  await db
    .insertInto('mcp_server_oauth')
    .values(row)
    .onConflict((oc) =>
      oc.columns(['workspace_id', 'server_id']).doUpdateSet({
        authorization_server: row.authorization_server ?? null,
        scopes: row.scopes ?? [],
        client_id: row.client_id ?? null,
        client_secret_encrypted: row.client_secret_encrypted ?? null,
        client_registered: false,
        updated_at: new Date(),
      }),
    )
    .execute();
}

/**
 * Ends every connection of a server and every authorization under way, and forgets what the
 * last connect found: after a new configuration or a new URL, tokens for the old are not sent.
 */
export async function endConnections(db: Kysely<DB>, workspaceId: string, serverId: string) {
  await db.deleteFrom('mcp_server_oauth_grants').where('workspace_id', '=', workspaceId).where('server_id', '=', serverId).execute();
  await db.deleteFrom('mcp_server_oauth_pending').where('workspace_id', '=', workspaceId).where('server_id', '=', serverId).execute();
  await db
    .updateTable('mcp_server_oauth')
    .set({ issuer: null, metadata: null, resource: null, generation: nextGenerationValue, updated_at: new Date() })
    .where('workspace_id', '=', workspaceId)
    .where('server_id', '=', serverId)
    .execute();
}

export const deleteConfig = (db: Kysely<DB>, workspaceId: string, serverId: string) =>
  db.deleteFrom('mcp_server_oauth').where('workspace_id', '=', workspaceId).where('server_id', '=', serverId).execute();

export const updateConfig = (db: Kysely<DB>, workspaceId: string, serverId: string, changes: Updateable<McpServerOauth>) =>
  db
    .updateTable('mcp_server_oauth')
    .set({ ...changes, updated_at: new Date() })
    .where('workspace_id', '=', workspaceId)
    .where('server_id', '=', serverId)
    .execute();

/** Renews the server's connection generation and touches its row (the registry's version bump): upstream sessions of earlier connections are closed. */
export async function nextGeneration(db: Kysely<DB>, workspaceId: string, serverId: string) {
  await db
    .updateTable('mcp_server_oauth')
    .set({ generation: nextGenerationValue, updated_at: new Date() })
    .where('workspace_id', '=', workspaceId)
    .where('server_id', '=', serverId)
    .execute();
  await db
    .updateTable('mcp_servers')
    .set({ updated_at: new Date() })
    .where('workspace_id', '=', workspaceId)
    .where('id', '=', serverId)
    .execute();
}

/** The connection of `agentId` (null: the workspace's), with the server's slug. */
export const findGrant = (db: Kysely<DB>, workspaceId: string, serverId: string, agentId: string | null) =>
  db
    .selectFrom('mcp_server_oauth_grants as g')
    .innerJoin('mcp_servers as s', (join) => join.onRef('s.workspace_id', '=', 'g.workspace_id').onRef('s.id', '=', 'g.server_id'))
    .selectAll('g')
    .select(['s.slug'])
    .where('g.workspace_id', '=', workspaceId)
    .where('g.server_id', '=', serverId)
    .where('g.agent_id', agentId === null ? 'is' : '=', agentId)
    .executeTakeFirst();

/** Replaces the connection of `row.agent_id` (null: the workspace's) with a new one. */
export async function replaceGrant(db: Kysely<DB>, row: Insertable<McpServerOauthGrants>) {
  await deleteGrant(db, row.workspace_id, row.server_id, row.agent_id ?? null);
  await db.insertInto('mcp_server_oauth_grants').values(row).execute();
}

export const deleteGrant = (db: Kysely<DB>, workspaceId: string, serverId: string, agentId: string | null) =>
  db
    .deleteFrom('mcp_server_oauth_grants')
    .where('workspace_id', '=', workspaceId)
    .where('server_id', '=', serverId)
    .where('agent_id', agentId === null ? 'is' : '=', agentId)
    .returningAll()
    .executeTakeFirst();

export const updateGrant = (db: Kysely<DB>, id: string, changes: Updateable<McpServerOauthGrants>) =>
  db
    .updateTable('mcp_server_oauth_grants')
    .set({ ...changes, updated_at: new Date() })
    .where('id', '=', id)
    .execute();

/**
 * Claims the right to refresh for `leaseMs` when no other process holds it and the connection
 * still holds the refresh token the caller read: true when this caller is the one to refresh.
 */
export async function claimRefresh(db: Kysely<DB>, id: string, refreshSealed: string, leaseMs: number) {
  const now = new Date();
  const claimed = await db
    .updateTable('mcp_server_oauth_grants')
    .set({ refresh_lease_until: new Date(now.getTime() + leaseMs) })
    .where('id', '=', id)
    .where('refresh_token_encrypted', '=', refreshSealed)
    .where((eb) => eb.or([eb('refresh_lease_until', 'is', null), eb('refresh_lease_until', '<', now)]))
    .returning('id')
    .executeTakeFirst();
  return claimed !== undefined;
}

export const insertPending = (db: Kysely<DB>, row: Insertable<DB['mcp_server_oauth_pending']>) =>
  db.insertInto('mcp_server_oauth_pending').values(row).execute();

/** Takes (deletes and returns) the authorization under way that a state names, if it has not expired: a state is used once. */
export async function takePending(db: Kysely<DB>, stateHash: string) {
  const row = await db
    .deleteFrom('mcp_server_oauth_pending')
    .where('state_hash', '=', stateHash)
    .where('stage', '=', 'authorizing')
    .returningAll()
    .executeTakeFirst();
  await db.deleteFrom('mcp_server_oauth_pending').where('expires_at', '<', new Date()).execute();
  return row && row.expires_at > new Date() ? row : undefined;
}

/** The authorization awaiting confirmation that an id names, in this workspace, if it has not expired. */
export const findConfirmation = (db: Kysely<DB>, workspaceId: string, idHash: string) =>
  db
    .selectFrom('mcp_server_oauth_pending as p')
    .innerJoin('mcp_servers as s', (join) => join.onRef('s.workspace_id', '=', 'p.workspace_id').onRef('s.id', '=', 'p.server_id'))
    .leftJoin('agents as a', (join) => join.onRef('a.workspace_id', '=', 'p.workspace_id').onRef('a.id', '=', 'p.agent_id'))
    .selectAll('p')
    .select(['s.slug', 's.name', 'a.slug as agent_slug'])
    .where('p.workspace_id', '=', workspaceId)
    .where('p.state_hash', '=', idHash)
    .where('p.stage', '=', 'confirming')
    .where('p.expires_at', '>', new Date())
    .executeTakeFirst();

/** Takes (deletes) the authorization awaiting confirmation: confirmed once. */
export const takeConfirmation = (db: Kysely<DB>, workspaceId: string, idHash: string) =>
  db
    .deleteFrom('mcp_server_oauth_pending')
    .where('workspace_id', '=', workspaceId)
    .where('state_hash', '=', idHash)
    .where('stage', '=', 'confirming')
    .where('expires_at', '>', new Date())
    .returning('state_hash')
    .executeTakeFirst();

/** A server's connections (for revoking those a change ends). */
export const listGrants = (db: Kysely<DB>, workspaceId: string, serverId: string) =>
  db
    .selectFrom('mcp_server_oauth_grants')
    .select(['id', 'metadata', 'client_id', 'client_secret_encrypted', 'refresh_token_encrypted'])
    .where('workspace_id', '=', workspaceId)
    .where('server_id', '=', serverId)
    .execute();
