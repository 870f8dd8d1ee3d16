/**
 * The access tokens of upstream OAuth connections (upstream-oauth.ts), as requests upstream need
 * them (mcp-registry.ts, mcp-connector.ts `fetchFor`): kept in memory while fresh, refreshed
 * halfway through a short life or a minute before expiry, and once when the server refuses one.
 * One process refreshes at a time (a lease on the row), so a rotated refresh token is never
 * sent twice — a server that sees one reused would end the grant (RFC 9700 §4.14.2).
 */

import { refreshAuthorization } from '@modelcontextprotocol/sdk/client/auth.js';
import {
  InvalidClientError,
  InvalidGrantError,
  InvalidScopeError,
  UnauthorizedClientError,
} from '@modelcontextprotocol/sdk/server/auth/errors.js';
import type { AuthorizationServerMetadata, OAuthTokens } from '@modelcontextprotocol/sdk/shared/auth.js';
import type { Kysely } from 'kysely';
import type { DB } from '../../db/schema.ts';
import { inTransaction } from '../../db/transaction.ts';
import type { Actor } from '../../shared/context.ts';
import { ApiError } from '../../shared/errors.ts';
import { recordChange } from '../audit/audit.service.ts';
import type { SecretBox } from '../webhooks/secrets.ts';
import * as repo from './upstream-oauth.repository.ts';
import { type Connection, clientOf, type FetchLike, failed, lifeOf, why } from './upstream-oauth.ts';

/** How long one process may hold the right to refresh; the others wait for its result as long. */
const REFRESH_LEASE_MS = 30_000;
const REFRESH_POLL_MS = 100;
/** Access tokens kept in memory (per connection generation), beyond which the oldest goes. */
const MAX_CACHED = 10_000;
/** The authorization server's answers that mean its grant is gone: only an admin can connect again. */
const GRANT_GONE = [InvalidGrantError, InvalidClientError, UnauthorizedClientError, InvalidScopeError];
/** Warden's actor for what it does on its own (a refused refresh). */
const WARDEN: Actor = Object.freeze({ user: 'warden' });

/** An access token in memory: sent until `refreshAfter`, usable until `expiresAt` (epoch ms). */
interface Token {
  token: string;
  refreshAfter: number;
  expiresAt: number;
}

export class UpstreamTokens {
  private readonly tokens = new Map<string, Token>();
  private readonly inflight = new Map<string, Promise<string>>();

  constructor(
    private readonly db: Kysely<DB>,
    private readonly box: SecretBox,
    /** oauthFetch over the egress guard. */
    private readonly fetchFn: FetchLike,
  ) {}

  /**
   * The access token to send the server now: the one in memory while it is fresh, else the
   * stored one, else a refreshed one. `rejected` is a token the server has just answered 401
   * to: it is not used again. Throws 502 upstream_authorization_required when no admin has
   * connected or the authorization server refused the refresh.
   */
  async accessToken(workspaceId: string, serverId: string, generation: number, rejected?: string): Promise<string> {
    const key = `${workspaceId}\u0000${serverId}\u0000${generation}`;
    const cached = this.tokens.get(key);
    if (cached && cached.token !== rejected && cached.refreshAfter > Date.now()) return cached.token;
    let flight = this.inflight.get(key);
    if (!flight) {
      flight = this.current(workspaceId, serverId, rejected).then((current) => {
        this.tokens.delete(key);
        if (this.tokens.size >= MAX_CACHED) this.tokens.delete(this.tokens.keys().next().value as string);
        this.tokens.set(key, current);
        return current.token;
      });
      const settled = () => this.inflight.delete(key);
      flight.then(settled, settled);
      this.inflight.set(key, flight);
    }
    return flight;
  }

  private async current(workspaceId: string, serverId: string, rejected?: string): Promise<Token> {
    const deadline = Date.now() + REFRESH_LEASE_MS;
    for (;;) {
      const connection = await repo.findConnection(this.db, workspaceId, serverId);
      if (connection?.status !== 'connected' || !connection.access_token_encrypted) throw this.required(connection);
      const stored = {
        token: this.box.open(connection.access_token_encrypted),
        refreshAfter: connection.refresh_after?.getTime() ?? Number.POSITIVE_INFINITY,
        expiresAt: connection.expires_at?.getTime() ?? Number.POSITIVE_INFINITY,
      };
      const usable = stored.token !== rejected && stored.expiresAt > Date.now();
      if (usable && stored.refreshAfter > Date.now()) return stored;
      if (!connection.refresh_token_encrypted) {
        if (usable) return stored;
        throw await this.reauthorize(connection, 'the access token expired and the authorization server gave no refresh token');
      }
      if (await repo.claimRefresh(this.db, workspaceId, serverId, connection.refresh_token_encrypted, REFRESH_LEASE_MS))
        return this.refresh(connection, usable ? stored : undefined);
      // another process is refreshing: its result is awaited; the current token serves meanwhile
      if (usable) return stored;
      if (Date.now() > deadline) throw failed(`MCP server '${connection.slug}': refreshing its OAuth token took too long`);
      await new Promise((resolve) => setTimeout(resolve, REFRESH_POLL_MS));
    }
  }

  /** Refreshes with the lease held; a refused refresh ends the connection, a failed one keeps a token still valid. */
  private async refresh(connection: Connection, still?: Token): Promise<Token> {
    const { workspace_id: workspaceId, server_id: serverId } = connection;
    let tokens: OAuthTokens;
    try {
      tokens = await refreshAuthorization(connection.issuer ?? '', {
        metadata: (connection.metadata ?? undefined) as unknown as AuthorizationServerMetadata | undefined,
        clientInformation: clientOf(this.box, connection),
        refreshToken: this.box.open(connection.refresh_token_encrypted ?? ''),
        resource: connection.resource ?? undefined,
        fetchFn: this.fetchFn,
      });
    } catch (error) {
      await repo.updateConnection(this.db, workspaceId, serverId, { refresh_lease_until: null });
      if (GRANT_GONE.some((gone) => error instanceof gone)) throw await this.reauthorize(connection, why(error));
      if (still) return still;
      throw failed(`MCP server '${connection.slug}': refreshing its OAuth token failed: ${why(error)}`, error);
    }
    const life = lifeOf(tokens);
    await repo.updateConnection(this.db, workspaceId, serverId, {
      access_token_encrypted: this.box.seal(tokens.access_token),
      // a server that does not rotate keeps the refresh token valid (refreshAuthorization keeps it in `tokens`)
      refresh_token_encrypted: tokens.refresh_token ? this.box.seal(tokens.refresh_token) : connection.refresh_token_encrypted,
      ...life,
      refresh_lease_until: null,
    });
    const never = Number.POSITIVE_INFINITY;
    return {
      token: tokens.access_token,
      refreshAfter: life.refresh_after?.getTime() ?? never,
      expiresAt: life.expires_at?.getTime() ?? never,
    };
  }

  /** The grant is gone: the connection needs an admin, which the audit log says once. */
  private async reauthorize(connection: Connection, detail: string): Promise<ApiError> {
    await inTransaction(this.db, async (trx) => {
      await recordChange(trx, connection.workspace_id, WARDEN, {
        action: 'mcp_server.oauth_reauthorization_required',
        resource: connection.server_id,
        severity: 'medium',
        context: { slug: connection.slug, error: detail.slice(0, 200) },
      });
      await repo.updateConnection(trx, connection.workspace_id, connection.server_id, {
        ...repo.disconnected,
        status: 'reauthorization_required',
        status_detail: detail.slice(0, 500),
      });
    });
    return this.required({ ...connection, status: 'reauthorization_required', status_detail: detail });
  }

  private required(connection: Pick<Connection, 'slug' | 'status' | 'status_detail'> | undefined): ApiError {
    const slug = connection?.slug ?? 'this server';
    const reason =
      connection?.status === 'reauthorization_required'
        ? `: the authorization server refused to refresh its token (${connection.status_detail})`
        : '';
    return new ApiError(
      'upstream_authorization_required',
      `MCP server '${slug}' needs its OAuth connection made by an admin (POST /mcp-servers/${slug}/oauth/connect, or Connect in the dashboard)${reason}`,
    );
  }
}
