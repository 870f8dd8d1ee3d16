/**
 * OAuth connections to upstream MCP servers (docs/decisions/0027-upstream-oauth-connections.md),
 * as an admin makes them: the configuration, connect (authorization code with PKCE S256 at the
 * server's authorization server), the callback's code exchange, disconnect. The tokens it keeps,
 * sealed with the master key, are handed out and refreshed by upstream-tokens.ts. The OAuth
 * exchanges are the MCP SDK's client functions, over the egress guard (`oauthFetch`).
 */
import { createHash, randomBytes } from 'node:crypto';
import {
  discoverAuthorizationServerMetadata,
  discoverOAuthProtectedResourceMetadata,
  exchangeAuthorization,
  registerClient,
  startAuthorization,
} from '@modelcontextprotocol/sdk/client/auth.js';
import { OAuthError } from '@modelcontextprotocol/sdk/server/auth/errors.js';
import type { AuthorizationServerMetadata, OAuthClientInformationMixed, OAuthTokens } from '@modelcontextprotocol/sdk/shared/auth.js';
import { checkResourceAllowed, resourceUrlFromServerUrl } from '@modelcontextprotocol/sdk/shared/auth-utils.js';
import type { UpstreamOAuthInputWritable as UpstreamOAuthInput, UpstreamOAuth as UpstreamOAuthView } from '@warden/contract';
import type { Kysely } from 'kysely';
import { iso } from '../../db/paginate.ts';
import type { DB } from '../../db/schema.ts';
import { inTransaction } from '../../db/transaction.ts';
import { describeNetworkError } from '../../egress/guard.ts';
import type { Actor } from '../../shared/context.ts';
import { ApiError, notFound } from '../../shared/errors.ts';
import { recordChange } from '../audit/audit.service.ts';
import { findMcpServer } from '../mcp-servers/mcp-servers.repository.ts';
import type { SecretBox } from '../webhooks/secrets.ts';
import * as repo from './upstream-oauth.repository.ts';

/** Where authorization servers send the admin's browser back to (outside /api/v1: http/upstream-oauth-callback.ts). */
export const CALLBACK_PATH = '/oauth/upstream/callback';
/** How long an authorization may take from connect to callback. */
const PENDING_MS = 10 * 60_000;
/** An access token is refreshed this long before it expires (or halfway through a shorter life), so that none expires on the way. */
const REFRESH_AHEAD_MS = 60_000;
/** Each exchange with an authorization server. */
const OAUTH_TIMEOUT_MS = 10_000;

export type FetchLike = (url: string | URL, init?: RequestInit) => Promise<Response>;
export type Connection = repo.OAuthConnectionRow;

/** The egress guard's fetch as the SDK's OAuth functions need it: bounded in time, answering the global Response. */
export const oauthFetch =
  (fetchFn: FetchLike): FetchLike =>
  async (url, init = {}) => {
    const res = await fetchFn(url, { ...init, signal: init.signal ?? AbortSignal.timeout(OAUTH_TIMEOUT_MS) });
    // the SDK reads OAuth errors only from a global Response (instanceof), and the egress guard's is undici's own
    return new Response(res.body, { status: res.status, statusText: res.statusText, headers: res.headers });
  };

/** The client Warden is at a connection's authorization server (its secret opened). */
export const clientOf = (box: SecretBox, connection: Connection): OAuthClientInformationMixed & { client_secret?: string } => ({
  client_id: connection.client_id ?? '',
  ...(connection.client_secret_encrypted ? { client_secret: box.open(connection.client_secret_encrypted) } : {}),
});

const sha256 = (value: string) => createHash('sha256').update(value).digest('hex');
/** When the tokens expire, and when Warden refreshes them (null: the server did not say; refreshed when refused). */
export function lifeOf(tokens: OAuthTokens): { expires_at: Date | null; refresh_after: Date | null } {
  if (!tokens.expires_in) return { expires_at: null, refresh_after: null };
  const lifeMs = tokens.expires_in * 1000;
  const now = Date.now();
  return { expires_at: new Date(now + lifeMs), refresh_after: new Date(now + lifeMs - Math.min(REFRESH_AHEAD_MS, lifeMs / 2)) };
}
export const failed = (message: string, cause?: unknown) => new ApiError('upstream_authorization_failed', message, { cause });
export const why = (error: unknown) => (error instanceof OAuthError ? `${error.errorCode}: ${error.message}` : describeNetworkError(error));

/** The columns answers show of a connection, as mcp-servers.repository.ts selects them. */
export interface OAuthViewColumns {
  oauth_authorization_server: string | null;
  oauth_issuer: string | null;
  oauth_client_id: string | null;
  oauth_scopes: string[] | null;
  oauth_status: string | null;
  oauth_status_detail: string | null;
  oauth_connected_at: Date | null;
  oauth_expires_at: Date | null;
}

export const oauthView = (row: OAuthViewColumns): UpstreamOAuthView => ({
  type: 'oauth',
  header: 'authorization',
  hint: '…',
  authorization_server: row.oauth_issuer ?? row.oauth_authorization_server,
  client_id: row.oauth_client_id,
  scopes: row.oauth_scopes ?? [],
  status: (row.oauth_status ?? 'not_connected') as UpstreamOAuthView['status'],
  status_detail: row.oauth_status_detail,
  connected_at: row.oauth_connected_at ? iso(row.oauth_connected_at) : null,
  expires_at: row.oauth_expires_at ? iso(row.oauth_expires_at) : null,
});

/** Stores a server's OAuth configuration (in the caller's transaction), dropping the tokens of any earlier one. */
export async function configureOAuth(trx: Kysely<DB>, box: SecretBox, workspaceId: string, serverId: string, input: UpstreamOAuthInput) {
  if (input.client_secret !== undefined && input.client_id === undefined)
    throw new ApiError('invalid_request', 'body/upstream_auth.client_secret needs a client_id');
  await repo.configureConnection(trx, {
    workspace_id: workspaceId,
    server_id: serverId,
    authorization_server: input.authorization_server ? new URL(input.authorization_server).href : null,
    scopes: input.scopes ?? [],
    client_id: input.client_id ?? null,
    client_secret_encrypted: input.client_secret ? box.seal(input.client_secret) : null,
  });
}

/** What the callback tells the admin's browser. */
export interface CallbackOutcome {
  slug?: string;
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

  private async connection(workspaceId: string, idOrSlug: string): Promise<Connection> {
    const server = await findMcpServer(this.db, workspaceId, idOrSlug);
    if (!server) throw notFound('MCP server', idOrSlug);
    const connection = server.auth_type === 'oauth' ? await repo.findConnection(this.db, workspaceId, server.id) : undefined;
    if (!connection)
      throw new ApiError(
        'conflict',
        `MCP server '${server.slug}' has no OAuth upstream_auth: set {"upstream_auth": {"type": "oauth"}} first`,
      );
    return connection;
  }

  /**
   * The client Warden is at the authorization server: as configured, else registered now (RFC
   * 7591; at every connect, since the server or Warden's redirect URI may have changed since).
   */
  private async client(connection: Connection, issuer: string, metadata: AuthorizationServerMetadata, redirectUri: string) {
    if (connection.client_id && !connection.client_registered) return this.clientOf(connection);
    if (!metadata.registration_endpoint)
      throw failed(
        `the authorization server ${issuer} offers no dynamic client registration: register Warden there (redirect URI ${redirectUri}) and give its client_id`,
      );
    try {
      return await registerClient(issuer, {
        metadata,
        clientMetadata: {
          client_name: 'Warden',
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
   * Starts a connection: finds the authorization server and its metadata, registers Warden if
   * need be, and answers the URL to send the admin's browser to, with a one-use state.
   */
  async connect(workspaceId: string, idOrSlug: string, origin: string, actor: Actor) {
    const connection = await this.connection(workspaceId, idOrSlug);
    const redirectUri = `${origin}${CALLBACK_PATH}`;
    const serverUrl = connection.transport_url;
    let issuer: string;
    let metadata: AuthorizationServerMetadata | undefined;
    let resource = resourceUrlFromServerUrl(serverUrl);
    let scopes = connection.scopes;
    try {
      // the server's own metadata (RFC 9728), if it publishes one: its resource, its scopes, its authorization server
      const published = await discoverOAuthProtectedResourceMetadata(serverUrl, {}, this.fetchFn).catch(() => undefined);
      const named = published?.resource;
      // a server may name itself more generally (its origin), never another resource
      if (named) {
        if (!checkResourceAllowed({ requestedResource: resource, configuredResource: named }))
          throw failed(`MCP server '${connection.slug}' names another resource in its metadata (${named})`);
        resource = new URL(named);
      }
      if (scopes.length === 0) scopes = published?.scopes_supported ?? [];
      // as the MCP authorization spec says: else the server's origin is its authorization server
      issuer = connection.authorization_server ?? published?.authorization_servers?.[0] ?? new URL('/', serverUrl).href;
      metadata = await discoverAuthorizationServerMetadata(issuer, { fetchFn: this.fetchFn });
    } catch (error) {
      if (error instanceof ApiError) throw error;
      throw failed(`finding the authorization server of MCP server '${connection.slug}' failed: ${why(error)}`, error);
    }
    if (!metadata) throw failed(`no OAuth authorization server metadata (RFC 8414 or OpenID) at ${issuer}`);
    const client = await this.client(connection, metadata.issuer, metadata, redirectUri);
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
      await repo.updateConnection(trx, workspaceId, connection.server_id, {
        issuer: metadata.issuer,
        metadata: JSON.stringify(metadata),
        resource: resource.href,
        ...(connection.client_id && !connection.client_registered
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
        server_id: connection.server_id,
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
   * (once); its code is exchanged with the PKCE verifier; the tokens are sealed and kept, and the
   * connection's generation moves on, so that upstream sessions of an earlier one are closed.
   */
  async complete(query: URLSearchParams): Promise<CallbackOutcome> {
    const state = query.get('state');
    const pending = state ? await repo.takePending(this.db, sha256(state)) : undefined;
    if (!pending) return { connected: false, detail: 'This authorization is unknown, already used or expired: connect again' };
    const connection = await repo.findConnection(this.db, pending.workspace_id, pending.server_id);
    if (!connection?.issuer || !connection.metadata) return { connected: false, detail: 'The server no longer has an OAuth connection' };
    const actor = pending.actor as unknown as Actor;
    const refuse = async (detail: string): Promise<CallbackOutcome> => {
      await inTransaction(this.db, async (trx) => {
        await recordChange(trx, pending.workspace_id, actor, {
          action: 'mcp_server.oauth_failed',
          resource: pending.server_id,
          severity: 'medium',
          context: { slug: connection.slug, error: detail.slice(0, 200) },
        });
        await repo.updateConnection(trx, pending.workspace_id, pending.server_id, { status_detail: detail.slice(0, 500) });
      });
      return { slug: connection.slug, connected: false, detail };
    };
    const error = query.get('error');
    if (error) return refuse(`the authorization server answered ${error.slice(0, 100)}`);
    const metadata = connection.metadata as unknown as AuthorizationServerMetadata & {
      authorization_response_iss_parameter_supported?: boolean;
    };
    // RFC 9207: an answer names the server that gave it; another's answer (a mix-up) is refused
    const iss = query.get('iss');
    if (iss !== null ? iss !== connection.issuer : metadata.authorization_response_iss_parameter_supported === true)
      return refuse('the answer does not come from the authorization server Warden asked (iss)');
    const code = query.get('code');
    if (!code) return refuse('the authorization server sent no code');
    let tokens: OAuthTokens;
    try {
      tokens = await exchangeAuthorization(connection.issuer, {
        metadata,
        clientInformation: this.clientOf(connection),
        authorizationCode: code,
        codeVerifier: this.box.open(pending.code_verifier_encrypted),
        redirectUri: pending.redirect_uri,
        resource: connection.resource ?? undefined,
        fetchFn: this.fetchFn,
      });
    } catch (cause) {
      return refuse(`exchanging the code failed: ${why(cause)}`);
    }
    if (tokens.token_type.toLowerCase() !== 'bearer')
      return refuse(`the authorization server issued a '${tokens.token_type}' token, not a bearer token`);
    await inTransaction(this.db, async (trx) => {
      await recordChange(trx, pending.workspace_id, actor, {
        action: 'mcp_server.oauth_connected',
        resource: pending.server_id,
        context: { slug: connection.slug, authorization_server: connection.issuer, scopes: tokens.scope?.split(' ') ?? connection.scopes },
      });
      await repo.updateConnection(trx, pending.workspace_id, pending.server_id, {
        access_token_encrypted: this.box.seal(tokens.access_token),
        refresh_token_encrypted: tokens.refresh_token ? this.box.seal(tokens.refresh_token) : null,
        ...lifeOf(tokens),
        refresh_lease_until: null,
        status: 'connected',
        status_detail: null,
        connected_at: new Date(),
        generation: connection.generation + 1,
      });
      await repo.touchServer(trx, pending.workspace_id, pending.server_id);
    });
    return { slug: connection.slug, connected: true };
  }

  /** Forgets the tokens (revoking the refresh token where the server can), keeping the configuration. */
  async disconnect(workspaceId: string, idOrSlug: string, actor: Actor): Promise<void> {
    const connection = await this.connection(workspaceId, idOrSlug);
    if (connection.refresh_token_encrypted) await this.revoke(connection, this.box.open(connection.refresh_token_encrypted));
    await inTransaction(this.db, async (trx) => {
      await recordChange(trx, workspaceId, actor, {
        action: 'mcp_server.oauth_disconnected',
        resource: connection.server_id,
        severity: 'medium',
        context: { slug: connection.slug },
      });
      await repo.updateConnection(trx, workspaceId, connection.server_id, {
        ...repo.disconnected,
        status_detail: null,
        generation: connection.generation + 1,
      });
      await repo.touchServer(trx, workspaceId, connection.server_id);
    });
  }

  /** RFC 7009, best effort: a server that cannot be reached keeps a token Warden no longer holds. */
  private async revoke(connection: Connection, token: string): Promise<void> {
    const endpoint = (connection.metadata as { revocation_endpoint?: string } | null)?.revocation_endpoint;
    if (!endpoint) return;
    const client = this.clientOf(connection);
    const body = new URLSearchParams({ token, token_type_hint: 'refresh_token', client_id: client.client_id });
    if (client.client_secret) body.set('client_secret', client.client_secret);
    await this.fetchFn(endpoint, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body })
      .then((res) => res.body?.cancel())
      .catch(() => undefined);
  }

  private clientOf(connection: Connection) {
    return clientOf(this.box, connection);
  }
}
