/**
 * OAuth connections to upstream MCP servers (docs/decisions/0027-upstream-oauth-connections.md),
 * as an admin makes them: connect (authorization code with PKCE S256 at the server's
 * authorization server), the callback's code exchange, the dashboard session's confirmation,
 * disconnect. The configuration is upstream-oauth-config.ts; the tokens kept, sealed with the
 * master key, are handed out and refreshed by upstream-tokens.ts. The OAuth exchanges are the
 * MCP SDK's client functions, over the egress guard (upstream-oauth-client.ts `oauthFetch`).
 */
import { createHash, randomBytes, randomUUID } from 'node:crypto';
import {
  discoverAuthorizationServerMetadata,
  discoverOAuthProtectedResourceMetadata,
  exchangeAuthorization,
  registerClient,
  startAuthorization,
} from '@modelcontextprotocol/sdk/client/auth.js';
import type { AuthorizationServerMetadata, OAuthTokens } from '@modelcontextprotocol/sdk/shared/auth.js';
import { checkResourceAllowed, resourceUrlFromServerUrl } from '@modelcontextprotocol/sdk/shared/auth-utils.js';
import type { Kysely } from 'kysely';
import { iso, isUniqueViolation } from '../../db/paginate.ts';
import type { DB } from '../../db/schema.ts';
import { inTransaction } from '../../db/transaction.ts';
import type { Actor } from '../../shared/context.ts';
import { ApiError, notFound } from '../../shared/errors.ts';
import { findAgent } from '../agents/agents.repository.ts';
import { recordChange } from '../audit/audit.service.ts';
import { findWorkspaceById } from '../identity/workspaces.repository.ts';
import { findMcpServer } from '../mcp-servers/mcp-servers.repository.ts';
import type { SecretBox } from '../webhooks/secrets.ts';
import * as repo from './upstream-oauth.repository.ts';
import { type Config, clientOf, type FetchLike, failed, lifeOf, sameIssuer, why } from './upstream-oauth-client.ts';

/** Where authorization servers send the admin's browser back to (outside /api/v1: http/upstream-oauth-callback.ts). */
export const CALLBACK_PATH = '/oauth/upstream/callback';
/** How long an authorization may take from connect to callback. */
const PENDING_MS = 10 * 60_000;
const sha256 = (value: string) => createHash('sha256').update(value).digest('hex');

const unknownConfirmation = () => new ApiError('not_found', 'This connection is unknown, already confirmed or expired: connect again');

/** What the callback tells the admin's browser. */
export interface CallbackOutcome {
  slug?: string;
  /** The secret the dashboard's confirmation page takes, once the code was exchanged. */
  confirmation?: string;
  /** The agent the connection was for, if not the workspace's. */
  agent?: string;
  connected: boolean;
  /** Why not, for the admin: an OAuth error code or Warden's reason, never a token. */
  detail?: string;
}

export class UpstreamOAuth {
  constructor(
    private readonly db: Kysely<DB>,
    private readonly box: SecretBox,
    /** oauthFetch over the egress guard. */
    private readonly fetchFn: FetchLike,
  ) {}

  private async config(workspaceId: string, idOrSlug: string): Promise<Config> {
    const server = await findMcpServer(this.db, workspaceId, idOrSlug);
    if (!server) throw notFound('MCP server', idOrSlug);
    const config = server.auth_type === 'oauth' ? await repo.findConfig(this.db, workspaceId, server.id) : undefined;
    if (!config)
      throw new ApiError(
        'conflict',
        `MCP server '${server.slug}' has no OAuth upstream_auth: set {"upstream_auth": {"type": "oauth"}} first`,
      );
    return config;
  }

  /** The agent a connection is for (null: the workspace's); 404 agent_not_found. */
  private async agentOf(workspaceId: string, idOrSlug: string | undefined): Promise<{ id: string; slug: string } | null> {
    if (idOrSlug === undefined) return null;
    const agent = await findAgent(this.db, workspaceId, idOrSlug);
    if (!agent) throw new ApiError('agent_not_found', `no agent '${idOrSlug}' in this workspace`);
    return { id: agent.id, slug: agent.slug };
  }

  /**
   * The client Warden is at the authorization server: as configured, else registered now (RFC
   * 7591; at every connect, since the server or Warden's redirect URI may have changed since).
   */
  private async client(config: Config, issuer: string, metadata: AuthorizationServerMetadata, redirectUri: string) {
    if (config.client_id && !config.client_registered) return clientOf(this.box, config);
    if (!metadata.registration_endpoint)
      throw failed(
        `the authorization server ${issuer} offers no dynamic client registration: register Warden there (redirect URI ${redirectUri}) and give its client_id`,
      );
    try {
      return await registerClient(issuer, {
        metadata,
        clientMetadata: {
          // what the consent page shows: a person asked to consent sees whose workspace gets their identity
          client_name: `Warden (workspace ${(await findWorkspaceById(this.db, config.workspace_id))?.name ?? config.workspace_id})`,
          redirect_uris: [redirectUri],
          grant_types: ['authorization_code', 'refresh_token'],
          response_types: ['code'],
          token_endpoint_auth_method: 'none',
        },
        fetchFn: this.fetchFn,
      });
    } catch (error) {
      throw failed(`registering Warden at ${issuer} failed: ${why(error)}`, error);
    }
  }

  /**
   * Starts a connection, the workspace's or `agent`'s: finds the authorization server and its
   * metadata, registers Warden if need be, and answers the URL to send the admin's browser to,
   * with a one-use state.
   */
  async connect(workspaceId: string, idOrSlug: string, origin: string, actor: Actor, agentIdOrSlug?: string) {
    const config = await this.config(workspaceId, idOrSlug);
    const agent = await this.agentOf(workspaceId, agentIdOrSlug);
    const redirectUri = `${origin}${CALLBACK_PATH}`;
    const serverUrl = config.transport_url;
    let issuer: string;
    let metadata: AuthorizationServerMetadata | undefined;
    let resource = resourceUrlFromServerUrl(serverUrl);
    let scopes = config.scopes;
    try {
      // the server's own metadata (RFC 9728), if it publishes one: its resource, its scopes, its authorization server
      const published = await discoverOAuthProtectedResourceMetadata(serverUrl, {}, this.fetchFn).catch(() => undefined);
      const named = published?.resource;
      // a server may name itself more generally (its origin), never another resource
      if (named) {
        if (!checkResourceAllowed({ requestedResource: resource, configuredResource: named }))
          throw failed(`MCP server '${config.slug}' names another resource in its metadata (${named})`);
        resource = new URL(named);
      }
      if (scopes.length === 0) scopes = published?.scopes_supported ?? [];
      // as the MCP authorization spec says: else the server's origin is its authorization server
      issuer = config.authorization_server ?? published?.authorization_servers?.[0] ?? new URL('/', serverUrl).href;
      metadata = await discoverAuthorizationServerMetadata(issuer, { fetchFn: this.fetchFn });
    } catch (error) {
      if (error instanceof ApiError) throw error;
      throw failed(`finding the authorization server of MCP server '${config.slug}' failed: ${why(error)}`, error);
    }
    if (!metadata) throw failed(`no OAuth authorization server metadata (RFC 8414 or OpenID) at ${issuer}`);
    // RFC 8414 §3.3: metadata naming another issuer than the one it was read from is not used
    if (!sameIssuer(metadata.issuer, issuer)) throw failed(`the metadata at ${issuer} names another issuer (${metadata.issuer})`);
    const client = await this.client(config, metadata.issuer, metadata, redirectUri);
    const state = randomBytes(32).toString('base64url');
    let started: { authorizationUrl: URL; codeVerifier: string };
    try {
      started = await startAuthorization(metadata.issuer, {
        metadata,
        clientInformation: client,
        redirectUrl: redirectUri,
        state,
        resource,
        ...(scopes.length > 0 ? { scope: scopes.join(' ') } : {}),
      });
    } catch (error) {
      throw failed(`the authorization server ${metadata.issuer} cannot be used: ${why(error)}`, error);
    }
    const expiresAt = new Date(Date.now() + PENDING_MS);
    await inTransaction(this.db, async (trx) => {
      await repo.updateConfig(trx, workspaceId, config.server_id, {
        issuer: metadata.issuer,
        metadata: JSON.stringify(metadata),
        resource: resource.href,
        ...(config.client_id && !config.client_registered
          ? {}
          : {
              client_id: client.client_id,
              client_registered: true,
              client_secret_encrypted: client.client_secret ? this.box.seal(client.client_secret) : null,
            }),
      });
      await repo.insertPending(trx, {
        state_hash: sha256(state),
        workspace_id: workspaceId,
        server_id: config.server_id,
        agent_id: agent?.id ?? null,
        // the code goes back to this server, with this client, whatever is configured by then
        issuer: metadata.issuer,
        metadata: JSON.stringify(metadata),
        resource: resource.href,
        client_id: client.client_id,
        client_secret_encrypted: client.client_secret ? this.box.seal(client.client_secret) : null,
        code_verifier_encrypted: this.box.seal(started.codeVerifier),
        redirect_uri: redirectUri,
        actor: JSON.stringify(actor),
        expires_at: expiresAt,
      });
    });
    return { authorization_url: started.authorizationUrl.href, redirect_uri: redirectUri, expires_at: iso(expiresAt) };
  }

  /**
   * The authorization server's answer (the callback's query): the state names the authorization
   * (once); its code is exchanged with the PKCE verifier; the tokens are sealed and kept as the
   * connection of the workspace or agent it was for, replacing any earlier one, and the server's
   * generation moves on, so that upstream sessions of an earlier connection are closed.
   */
  async complete(query: URLSearchParams): Promise<CallbackOutcome> {
    const state = query.get('state');
    const pending = state ? await repo.takePending(this.db, sha256(state)) : undefined;
    if (!pending) return { connected: false, detail: 'This authorization is unknown, already used or expired: connect again' };
    const config = await repo.findConfig(this.db, pending.workspace_id, pending.server_id);
    if (!config) return { connected: false, detail: 'The server no longer has an OAuth connection' };
    const actor = pending.actor as unknown as Actor;
    const agent = pending.agent_id ? await findAgent(this.db, pending.workspace_id, pending.agent_id) : undefined;
    const who = { slug: config.slug, ...(agent ? { agent: agent.slug } : {}) };
    const refuse = async (detail: string): Promise<CallbackOutcome> => {
      await inTransaction(this.db, (trx) =>
        recordChange(trx, pending.workspace_id, actor, {
          action: 'mcp_server.oauth_failed',
          resource: pending.server_id,
          severity: 'medium',
          context: { ...who, error: detail.slice(0, 200) },
        }),
      );
      return { ...who, connected: false, detail };
    };
    const error = query.get('error');
    if (error) return refuse(`the authorization server answered ${error.slice(0, 100)}`);
    const metadata = pending.metadata as unknown as AuthorizationServerMetadata & {
      authorization_response_iss_parameter_supported?: boolean;
    };
    // RFC 9207: an answer names the server that gave it; another's answer (a mix-up) is refused
    const iss = query.get('iss');
    if (iss !== null ? iss !== pending.issuer : metadata.authorization_response_iss_parameter_supported === true)
      return refuse('the answer does not come from the authorization server Warden asked (iss)');
    const code = query.get('code');
    if (!code) return refuse('the authorization server sent no code');
    let tokens: OAuthTokens;
    try {
      tokens = await exchangeAuthorization(pending.issuer, {
        metadata,
        clientInformation: clientOf(this.box, pending),
        authorizationCode: code,
        codeVerifier: this.box.open(pending.code_verifier_encrypted),
        redirectUri: pending.redirect_uri,
        resource: pending.resource,
        fetchFn: this.fetchFn,
      });
    } catch (cause) {
      return refuse(`exchanging the code failed: ${why(cause)}`);
    }
    if (tokens.token_type.toLowerCase() !== 'bearer')
      return refuse(`the authorization server issued a '${tokens.token_type}' token, not a bearer token`);
    // the tokens wait for a dashboard session of the workspace to confirm (record 0027)
    const confirmation = randomBytes(32).toString('base64url');
    await repo.insertPending(this.db, {
      ...pending,
      state_hash: sha256(confirmation),
      stage: 'confirming',
      metadata: JSON.stringify(pending.metadata),
      actor: JSON.stringify(pending.actor),
      access_token_encrypted: this.box.seal(tokens.access_token),
      refresh_token_encrypted: tokens.refresh_token ? this.box.seal(tokens.refresh_token) : null,
      expires_in: tokens.expires_in ?? null,
      scope: tokens.scope ?? null,
      expires_at: new Date(Date.now() + PENDING_MS),
    });
    return { ...who, connected: false, confirmation };
  }

  /** What a connection awaiting confirmation is, for the dashboard's confirmation page (404 when unknown, expired or another workspace's). */
  async confirmation(workspaceId: string, id: string, actor: Actor) {
    const row = await repo.findConfirmation(this.db, workspaceId, sha256(id));
    if (!row) throw unknownConfirmation();
    return {
      server: row.slug,
      server_name: row.name,
      agent: row.agent_slug,
      authorization_server: row.issuer,
      scopes: row.scope ? row.scope.split(' ') : [],
      started_by_you: (row.actor as unknown as Actor).user === actor.user,
      expires_at: iso(row.expires_at),
    };
  }

  /** Makes the connection awaiting confirmation, replacing any earlier one of the workspace or agent; audited in the confirmer's name. */
  async confirm(workspaceId: string, id: string, actor: Actor): Promise<string> {
    const row = await repo.findConfirmation(this.db, workspaceId, sha256(id));
    if (!row?.access_token_encrypted) throw unknownConfirmation();
    // issued when the callback stored them, one PENDING_MS before the confirmation expires
    const life = lifeOf({ expires_in: row.expires_in ?? undefined }, row.expires_at.getTime() - PENDING_MS);
    try {
      await inTransaction(this.db, async (trx) => {
        if (!(await repo.takeConfirmation(trx, workspaceId, sha256(id)))) throw unknownConfirmation();
        await recordChange(trx, workspaceId, actor, {
          action: 'mcp_server.oauth_connected',
          resource: row.server_id,
          context: {
            slug: row.slug,
            ...(row.agent_slug ? { agent: row.agent_slug } : {}),
            authorization_server: row.issuer,
            scopes: row.scope?.split(' ') ?? [],
            started_by: (row.actor as unknown as Actor).user,
          },
        });
        await repo.replaceGrant(trx, {
          id: randomUUID(),
          workspace_id: workspaceId,
          server_id: row.server_id,
          agent_id: row.agent_id,
          issuer: row.issuer,
          metadata: JSON.stringify(row.metadata),
          resource: row.resource,
          client_id: row.client_id,
          client_secret_encrypted: row.client_secret_encrypted,
          access_token_encrypted: row.access_token_encrypted,
          refresh_token_encrypted: row.refresh_token_encrypted,
          ...life,
          status: 'connected',
          connected_at: new Date(),
        });
        await repo.nextGeneration(trx, workspaceId, row.server_id);
      });
    } catch (error) {
      // another confirmation of the same connection committed first
      if (isUniqueViolation(error)) throw new ApiError('conflict', `MCP server '${row.slug}' was connected at the same moment: look again`);
      throw error;
    }
    return row.slug;
  }

  /** Ends the connection of the workspace or `agent` (revoking its refresh token where the server can), keeping the configuration. */
  async disconnect(workspaceId: string, idOrSlug: string, actor: Actor, agentIdOrSlug?: string): Promise<void> {
    const config = await this.config(workspaceId, idOrSlug);
    const agent = await this.agentOf(workspaceId, agentIdOrSlug);
    const ended = await inTransaction(this.db, async (trx) => {
      const grant = await repo.deleteGrant(trx, workspaceId, config.server_id, agent?.id ?? null);
      if (!grant)
        throw new ApiError('not_found', `MCP server '${config.slug}' has no OAuth connection${agent ? ` for agent '${agent.slug}'` : ''}`);
      await recordChange(trx, workspaceId, actor, {
        action: 'mcp_server.oauth_disconnected',
        resource: config.server_id,
        severity: 'medium',
        context: { slug: config.slug, ...(agent ? { agent: agent.slug } : {}) },
      });
      await repo.nextGeneration(trx, workspaceId, config.server_id);
      return grant;
    });
    if (ended.refresh_token_encrypted) await this.revoke(ended, this.box.open(ended.refresh_token_encrypted));
  }

  /**
   * Runs a change to a server that may end its connections (a new configuration, another kind of
   * auth, a new URL, deletion), then revokes the refresh tokens of those it ended.
   */
  async ending<T>(workspaceId: string, serverId: string | undefined, change: () => Promise<T>): Promise<T> {
    const before = serverId ? await repo.listGrants(this.db, workspaceId, serverId) : [];
    const result = await change();
    if (before.length > 0 && serverId) {
      const still = new Set((await repo.listGrants(this.db, workspaceId, serverId)).map((g) => g.id));
      for (const grant of before)
        if (!still.has(grant.id) && grant.refresh_token_encrypted) await this.revoke(grant, this.box.open(grant.refresh_token_encrypted));
    }
    return result;
  }

  /** RFC 7009, best effort: a server that cannot be reached keeps a token Warden no longer holds. */
  private async revoke(
    grant: { metadata: unknown; client_id: string; client_secret_encrypted: string | null },
    token: string,
  ): Promise<void> {
    const endpoint = (grant.metadata as { revocation_endpoint?: string } | null)?.revocation_endpoint;
    if (!endpoint) return;
    const client = clientOf(this.box, grant);
    const body = new URLSearchParams({ token, token_type_hint: 'refresh_token', client_id: client.client_id });
    if (client.client_secret) body.set('client_secret', client.client_secret);
    await this.fetchFn(endpoint, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body })
      .then((res) => res.body?.cancel())
      .catch(() => undefined);
  }
}
