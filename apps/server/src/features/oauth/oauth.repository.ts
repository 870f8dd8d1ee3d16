/** Every query of the OAuth feature: clients, authorizations waiting for consent, grants, codes and tokens (migration 0025). */
import type { Kysely } from 'kysely';
import type { DB } from '../../db/schema.ts';

/** What authentication needs of a workspace, by id or slug. */
export const findWorkspaceAuth = (db: Kysely<DB>, by: { id: string } | { slug: string }) =>
  db
    .selectFrom('workspaces')
    .select(['id', 'slug', 'rate_limit_per_minute', 'policy_version', 'agents_version', 'mcp_servers_version'])
    .where((eb) => ('id' in by ? eb('id', '=', by.id) : eb('slug', '=', by.slug)))
    .executeTakeFirst();

export const findClient = (db: Kysely<DB>, clientId: string) =>
  db.selectFrom('oauth_clients').select(['client_id', 'metadata']).where('client_id', '=', clientId).executeTakeFirst();

export const insertClient = (db: Kysely<DB>, clientId: string, metadata: unknown) =>
  db
    .insertInto('oauth_clients')
    .values({ client_id: clientId, metadata: JSON.stringify(metadata) })
    .execute();

export const upsertClient = (db: Kysely<DB>, clientId: string, metadata: unknown) =>
  db
    .insertInto('oauth_clients')
    .values({ client_id: clientId, metadata: JSON.stringify(metadata) })
    .onConflict((oc) => oc.column('client_id').doUpdateSet({ metadata: JSON.stringify(metadata) }))
    .execute();

export const insertAuthorization = (
  db: Kysely<DB>,
  row: {
    id: string;
    client_id: string;
    redirect_uri: string;
    code_challenge: string;
    scopes: string[];
    resource: string;
    state: string | null;
    expires_at: Date;
  },
) => db.insertInto('oauth_authorizations').values(row).execute();

export const findAuthorization = (db: Kysely<DB>, id: string) =>
  db
    .selectFrom('oauth_authorizations')
    .innerJoin('oauth_clients', 'oauth_clients.client_id', 'oauth_authorizations.client_id')
    .selectAll('oauth_authorizations')
    .select('oauth_clients.metadata')
    .where('oauth_authorizations.id', '=', id)
    .where('oauth_authorizations.expires_at', '>', new Date())
    .executeTakeFirst();

/** Takes the authorization out (once: a second decision finds nothing). */
export const takeAuthorization = (db: Kysely<DB>, id: string) =>
  db.deleteFrom('oauth_authorizations').where('id', '=', id).where('expires_at', '>', new Date()).returningAll().executeTakeFirst();

export const deleteExpiredAuthorizations = (db: Kysely<DB>) =>
  db.deleteFrom('oauth_authorizations').where('expires_at', '<=', new Date()).execute();

export const insertGrant = (
  db: Kysely<DB>,
  row: {
    id: string;
    workspace_id: string;
    agent_id: string;
    client_id: string;
    client_name: string;
    scopes: string[];
    resource: string;
    granted_by: string;
  },
) => db.insertInto('oauth_grants').values(row).returningAll().executeTakeFirstOrThrow();

const GRANT_COLUMNS = [
  'oauth_grants.id',
  'oauth_grants.workspace_id',
  'oauth_grants.client_id',
  'oauth_grants.client_name',
  'oauth_grants.scopes',
  'oauth_grants.resource',
  'oauth_grants.granted_by',
  'oauth_grants.created_at',
  'oauth_grants.revoked_at',
  'agents.id as agent_id',
  'agents.slug as agent_slug',
  'oauth_clients.created_at as client_registered_at',
] as const;

const grantsWithAgents = (db: Kysely<DB>, workspaceId: string) =>
  db
    .selectFrom('oauth_grants')
    .innerJoin('agents', (join) =>
      join.onRef('agents.workspace_id', '=', 'oauth_grants.workspace_id').onRef('agents.id', '=', 'oauth_grants.agent_id'),
    )
    // when the client became known: its registration, or the first read of its metadata document
    .leftJoin('oauth_clients', 'oauth_clients.client_id', 'oauth_grants.client_id')
    .select(GRANT_COLUMNS)
    .where('oauth_grants.workspace_id', '=', workspaceId);

/** A workspace's grants with their agents' slugs, for paginate (a subquery: its id and created_at are the grant's). */
export const grantsQuery = (db: Kysely<DB>, workspaceId: string) =>
  db.selectFrom(grantsWithAgents(db, workspaceId).as('grants')).selectAll();

export const findGrant = (db: Kysely<DB>, workspaceId: string, id: string) =>
  grantsWithAgents(db, workspaceId).where('oauth_grants.id', '=', id).executeTakeFirst();

/** The workspace's active agents, for the consent page. */
export const activeAgents = (db: Kysely<DB>, workspaceId: string) =>
  db
    .selectFrom('agents')
    .select(['id', 'slug', 'name'])
    .where('workspace_id', '=', workspaceId)
    .where('status', '=', 'active')
    .orderBy('slug')
    .limit(1000)
    .execute();

/** The slugs of the workspace's enabled MCP servers (all of them, or the one named). */
export const enabledServerSlugs = (db: Kysely<DB>, workspaceId: string, slug?: string) =>
  db
    .selectFrom('mcp_servers')
    .select('slug')
    .where('workspace_id', '=', workspaceId)
    .where('enabled', '=', true)
    .$if(slug !== undefined, (q) => q.where('slug', '=', slug as string))
    .orderBy('slug')
    .limit(1000)
    .execute();

/** Marks the grant revoked (once) and deletes its codes and tokens. */
export async function revokeGrant(db: Kysely<DB>, workspaceId: string, id: string) {
  const revoked = await db
    .updateTable('oauth_grants')
    .set({ revoked_at: new Date() })
    .where('workspace_id', '=', workspaceId)
    .where('id', '=', id)
    .where('revoked_at', 'is', null)
    .returning(['id'])
    .executeTakeFirst();
  if (revoked) {
    await db.deleteFrom('oauth_tokens').where('grant_id', '=', id).execute();
    await db.deleteFrom('oauth_codes').where('grant_id', '=', id).execute();
  }
  return revoked;
}

export const insertCode = (
  db: Kysely<DB>,
  row: { code_hash: string; grant_id: string; code_challenge: string; redirect_uri: string; expires_at: Date },
) => db.insertInto('oauth_codes').values(row).execute();

/** A live code of this client, with its grant. */
export const findCode = (db: Kysely<DB>, codeHash: string, clientId: string) =>
  db
    .selectFrom('oauth_codes')
    .innerJoin('oauth_grants', 'oauth_grants.id', 'oauth_codes.grant_id')
    .select([
      'oauth_codes.code_challenge',
      'oauth_codes.redirect_uri',
      'oauth_codes.grant_id',
      'oauth_grants.scopes',
      'oauth_grants.resource',
    ])
    .where('oauth_codes.code_hash', '=', codeHash)
    .where('oauth_grants.client_id', '=', clientId)
    .where('oauth_grants.revoked_at', 'is', null)
    .where('oauth_codes.expires_at', '>', new Date())
    .executeTakeFirst();

/** Takes the code out: of two exchanges of one code, one finds it. */
export const takeCode = (db: Kysely<DB>, codeHash: string) =>
  db.deleteFrom('oauth_codes').where('code_hash', '=', codeHash).returning(['grant_id']).executeTakeFirst();

export const insertTokens = (
  db: Kysely<DB>,
  rows: { token_hash: string; grant_id: string; kind: 'access' | 'refresh'; expires_at: Date }[],
) => db.insertInto('oauth_tokens').values(rows).execute();

/** Marks a live, unused refresh token of this client used (rotation: it is used once); answers its grant. */
export const takeRefreshToken = (db: Kysely<DB>, tokenHash: string, clientId: string) =>
  db
    .updateTable('oauth_tokens')
    .set({ used_at: new Date() })
    .from('oauth_grants')
    .whereRef('oauth_grants.id', '=', 'oauth_tokens.grant_id')
    .where('oauth_tokens.token_hash', '=', tokenHash)
    .where('oauth_tokens.kind', '=', 'refresh')
    .where('oauth_tokens.used_at', 'is', null)
    .where('oauth_tokens.expires_at', '>', new Date())
    .where('oauth_grants.client_id', '=', clientId)
    .where('oauth_grants.revoked_at', 'is', null)
    .returning(['oauth_grants.id as grant_id', 'oauth_grants.scopes', 'oauth_grants.resource'])
    .executeTakeFirst();

/** The live grant of a refresh token of this client that was already used: presented again, it was copied. */
export const findReusedRefreshToken = (db: Kysely<DB>, tokenHash: string, clientId: string) =>
  db
    .selectFrom('oauth_tokens')
    .innerJoin('oauth_grants', 'oauth_grants.id', 'oauth_tokens.grant_id')
    .select(['oauth_grants.id as grant_id', 'oauth_grants.workspace_id'])
    .where('oauth_tokens.token_hash', '=', tokenHash)
    .where('oauth_tokens.kind', '=', 'refresh')
    .where('oauth_tokens.used_at', 'is not', null)
    .where('oauth_grants.client_id', '=', clientId)
    .where('oauth_grants.revoked_at', 'is', null)
    .executeTakeFirst();

/** A live access token: its grant, agent and workspace (what authentication needs). */
export const findAccessToken = (db: Kysely<DB>, tokenHash: string) =>
  db
    .selectFrom('oauth_tokens')
    .innerJoin('oauth_grants', 'oauth_grants.id', 'oauth_tokens.grant_id')
    .innerJoin('agents', (join) =>
      join.onRef('agents.workspace_id', '=', 'oauth_grants.workspace_id').onRef('agents.id', '=', 'oauth_grants.agent_id'),
    )
    .innerJoin('workspaces', 'workspaces.id', 'oauth_grants.workspace_id')
    .select([
      'oauth_grants.id as grant_id',
      'oauth_grants.client_id',
      'oauth_grants.scopes',
      'oauth_grants.resource',
      'oauth_tokens.expires_at',
      'agents.slug as agent_slug',
      'workspaces.id as workspace_id',
      'workspaces.rate_limit_per_minute',
      'workspaces.policy_version',
      'workspaces.agents_version',
      'workspaces.mcp_servers_version',
    ])
    .where('oauth_tokens.token_hash', '=', tokenHash)
    .where('oauth_tokens.kind', '=', 'access')
    .where('oauth_grants.revoked_at', 'is', null)
    .executeTakeFirst();

/** Deletes one token of this client (RFC 7009: an unknown one is no error). */
export const deleteClientToken = (db: Kysely<DB>, tokenHash: string, clientId: string) =>
  db
    .deleteFrom('oauth_tokens')
    .where('token_hash', '=', tokenHash)
    .where('grant_id', 'in', db.selectFrom('oauth_grants').select('id').where('client_id', '=', clientId))
    .execute();
