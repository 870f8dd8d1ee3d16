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
import { clientOf, type FetchLike, failed, type Grant, lifeOf, why } from './upstream-oauth-client.ts';

/** How long one process may hold the right to refresh; the others wait for its result as long. */
const REFRESH_LEASE_MS = 30_000;
const REFRESH_POLL_MS = 100;
/** Access tokens kept in memory (per connection generation), beyond which the oldest goes. */
const MAX_CACHED = 10_000;
/** The authorization server's answers that mean its grant is gone: only an admin can connect again. */
const GRANT_GONE = [InvalidGrantError, InvalidClientError, UnauthorizedClientError, InvalidScopeError];
/** Warden's actor for what it does on its own (a refused refresh). */
const WARDEN: Actor = Object.freeze({ user: 'warden' });

/** A call that needs a token: its server (the registry's view of it) and its agent. */
export interface TokenCall {
  workspaceId: string;
  serverId: string;
  slug: string;
  /** The server's connection generation, as the registry read it. */
  generation: number;
  agentId?: string;
  /** The token the server has just answered 401 to. */
  rejected?: string;
}

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
   * The access token to send the server now for `agentId`'s call (its own connection, else the
   * workspace's): the one in memory while it is fresh, else the stored one, else a refreshed
   * one. `rejected` is a token the server has just answered 401 to: it is not used again.
   * Throws 502 upstream_authorization_required when no admin has connected or the authorization
   * server refused the refresh.
   */
  async accessToken(call: TokenCall): Promise<string> {
    const key = `${call.workspaceId}\u0000${call.serverId}\u0000${call.generation}\u0000${call.agentId ?? ''}`;
    // a renewal waits only for a flight that also renews that token, not for one that may answer it
    const flightKey = `${key}\u0000${call.rejected ?? ''}`;
    const cached = this.tokens.get(key);
    if (cached && cached.token !== call.rejected && cached.refreshAfter > Date.now()) return cached.token;
    let flight = this.inflight.get(flightKey);
    if (!flight) {
      flight = this.current(call).then((current) => {
        this.tokens.delete(key);
        if (this.tokens.size >= MAX_CACHED) this.tokens.delete(this.tokens.keys().next().value as string);
        this.tokens.set(key, current);
        return current.token;
      });
      const settled = () => this.inflight.delete(flightKey);
      flight.then(settled, settled);
      this.inflight.set(flightKey, flight);
    }
    return flight;
  }

  /** The agent's own connection, else the workspace's. */
  private async grantFor({ workspaceId, serverId, agentId }: TokenCall): Promise<Grant | undefined> {
    const own = agentId ? await repo.findGrant(this.db, workspaceId, serverId, agentId) : undefined;
    return own ?? repo.findGrant(this.db, workspaceId, serverId, null);
  }

  private async current(call: TokenCall): Promise<Token> {
    const deadline = Date.now() + REFRESH_LEASE_MS;
    for (;;) {
      const grant = await this.grantFor(call);
      if (grant?.status !== 'connected' || !grant.access_token_encrypted) throw required(call.slug, grant);
      const stored = {
        token: this.box.open(grant.access_token_encrypted),
        refreshAfter: grant.refresh_after?.getTime() ?? Number.POSITIVE_INFINITY,
        expiresAt: grant.expires_at?.getTime() ?? Number.POSITIVE_INFINITY,
      };
      const usable = stored.token !== call.rejected && stored.expiresAt > Date.now();
      if (usable && stored.refreshAfter > Date.now()) return stored;
      if (!grant.refresh_token_encrypted) {
        if (usable) return stored;
        throw await this.reauthorize(grant, 'the access token expired and the authorization server gave no refresh token');
      }
      if (await repo.claimRefresh(this.db, grant.id, grant.refresh_token_encrypted, REFRESH_LEASE_MS))
        return this.refresh(grant, usable ? stored : undefined);
      // another process is refreshing: its result is awaited; the current token serves meanwhile
      if (usable) return stored;
      if (Date.now() > deadline) throw failed(`MCP server '${grant.slug}': refreshing its OAuth token took too long`);
      await new Promise((resolve) => setTimeout(resolve, REFRESH_POLL_MS));
    }
  }

  /** Refreshes with the lease held; a refused refresh ends the connection, a failed one keeps a token still valid. */
  private async refresh(grant: Grant, still?: Token): Promise<Token> {
    let tokens: OAuthTokens;
    try {
      tokens = await refreshAuthorization(grant.issuer ?? '', {
        metadata: (grant.metadata ?? undefined) as unknown as AuthorizationServerMetadata | undefined,
        clientInformation: clientOf(this.box, grant),
        refreshToken: this.box.open(grant.refresh_token_encrypted ?? ''),
        resource: grant.resource ?? undefined,
        fetchFn: this.fetchFn,
      });
    } catch (error) {
      await repo.updateGrant(this.db, grant.id, { refresh_lease_until: null });
      if (GRANT_GONE.some((gone) => error instanceof gone)) throw await this.reauthorize(grant, why(error));
      if (still) return still;
      throw failed(`MCP server '${grant.slug}': refreshing its OAuth token failed: ${why(error)}`, error);
    }
    const life = lifeOf(tokens);
    await repo.updateGrant(this.db, grant.id, {
      access_token_encrypted: this.box.seal(tokens.access_token),
      // a server that does not rotate keeps the refresh token valid (refreshAuthorization keeps it in `tokens`)
      refresh_token_encrypted: tokens.refresh_token ? this.box.seal(tokens.refresh_token) : grant.refresh_token_encrypted,
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
  private async reauthorize(grant: Grant, detail: string): Promise<ApiError> {
    await inTransaction(this.db, async (trx) => {
      await recordChange(trx, grant.workspace_id, WARDEN, {
        action: 'mcp_server.oauth_reauthorization_required',
        resource: grant.server_id,
        severity: 'medium',
        context: { slug: grant.slug, ...(grant.agent_id ? { agent_id: grant.agent_id } : {}), error: detail.slice(0, 200) },
      });
      await repo.updateGrant(trx, grant.id, {
        access_token_encrypted: null,
        refresh_token_encrypted: null,
        expires_at: null,
        refresh_after: null,
        refresh_lease_until: null,
        status: 'reauthorization_required',
        status_detail: detail.slice(0, 500),
      });
    });
    return required(grant.slug, { ...grant, status: 'reauthorization_required', status_detail: detail });
  }
}

/** 502 upstream_authorization_required: what an admin does about it, and why when the server refused. */
function required(slug: string, grant: Pick<Grant, 'status' | 'status_detail' | 'agent_id'> | undefined): ApiError {
  const reason =
    grant?.status === 'reauthorization_required' ? `: the authorization server refused to refresh its token (${grant.status_detail})` : '';
  const whose = grant?.agent_id ? ', with this agent as "agent",' : '';
  return new ApiError(
    'upstream_authorization_required',
    `MCP server '${slug}' needs its OAuth connection made by an admin (POST /mcp-servers/${slug}/oauth/connect${whose} or Connect in the dashboard)${reason}`,
  );
}
