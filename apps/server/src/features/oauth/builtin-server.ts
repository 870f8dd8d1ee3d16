/**
 * Warden's built-in OAuth 2.1 authorization server, the rules behind the MCP SDK's router
 * (http/oauth-server.ts mounts the SDK's handlers, which parse requests, authenticate clients,
 * check PKCE S256 and answer errors as RFC 6749 says): registered clients, authorizations held
 * until a dashboard admin consents, grants (a client acting as one agent at one MCP endpoint),
 * one-time codes, access tokens and rotated refresh tokens. Codes and tokens are random,
 * answered once and stored by their SHA-256 (docs/decisions/0021-oauth-authorization-servers.md).
 */
import { randomBytes, randomUUID } from 'node:crypto';
import {
  InvalidClientMetadataError,
  InvalidGrantError,
  InvalidScopeError,
  InvalidTargetError,
} from '@modelcontextprotocol/sdk/server/auth/errors.js';
import type { OAuthClientInformationFull, OAuthTokens } from '@modelcontextprotocol/sdk/shared/auth.js';
import type { Kysely } from 'kysely';
import { iso, type Page, type PageRequest, paginate } from '../../db/paginate.ts';
import type { DB } from '../../db/schema.ts';
import { inTransaction } from '../../db/transaction.ts';
import type { Actor, AuthContext } from '../../shared/context.ts';
import { hashSecret } from '../../shared/crypto.ts';
import { ApiError, notFound } from '../../shared/errors.ts';
import { recordChange } from '../audit/audit.service.ts';
import { ACCESS_TOKEN_PREFIX, type BuiltinTokenCheck, tokenIdentity } from './access-tokens.ts';
import { fetchClientDocument, type GuardedFetch, isDocumentClientId } from './client-metadata-document.ts';
import { invalidToken } from './external-issuer.ts';
import * as repo from './oauth.repository.ts';
import { MCP_PATH, MCP_SCOPE, mcpResource, SCOPES_SUPPORTED } from './protected-resource.ts';
import { redirectUrisRefusal } from './redirect-uris.ts';

const AUTHORIZATION_TTL_MS = 10 * 60_000;
const CODE_TTL_MS = 60_000;
export const ACCESS_TOKEN_TTL_S = 3600;
const REFRESH_TOKEN_TTL_S = 30 * 24 * 3600;
const REFRESH_TOKEN_PREFIX = 'wrt_';

const secret = (prefix = '') => `${prefix}${randomBytes(32).toString('base64url')}`;

/** What an authorize request asks, once the SDK has checked the client and its redirect URI. */
export interface AuthorizationAsk {
  redirectUri: string;
  codeChallenge: string;
  scopes?: string[];
  resource?: URL;
  state?: string;
}

/** An MCP endpoint of this origin (`/api/v1/mcp` or `/api/v1/mcp/{slug}`), as a resource; undefined for anything else. */
function ownResource(origin: string, resource: URL | undefined): { resource: string; slug?: string } | undefined {
  if (resource === undefined) return { resource: `${origin}${MCP_PATH}` };
  if (resource.origin !== origin || resource.search || resource.hash) return undefined;
  const path = resource.pathname.replace(/\/$/, '');
  if (path === MCP_PATH) return { resource: `${origin}${MCP_PATH}` };
  const slug = path.startsWith(`${MCP_PATH}/`) ? path.slice(MCP_PATH.length + 1) : undefined;
  const named = slug === undefined ? undefined : mcpResource(origin, slug);
  return named === undefined ? undefined : { resource: named, slug };
}

const toGrant = (row: Awaited<ReturnType<typeof repo.findGrant>> & object) => ({
  id: row.id,
  client_id: row.client_id,
  client_name: row.client_name,
  client_registered_at: row.client_registered_at === null ? null : iso(row.client_registered_at),
  agent: row.agent_slug,
  resource: row.resource,
  scopes: row.scopes,
  granted_by: row.granted_by,
  created_at: iso(row.created_at),
  revoked_at: row.revoked_at === null ? null : iso(row.revoked_at),
});
export type OAuthGrant = ReturnType<typeof toGrant>;

const clientName = (metadata: { client_name?: string; client_id: string }) => (metadata.client_name ?? metadata.client_id).slice(0, 200);

export class BuiltinAuthorizationServer implements BuiltinTokenCheck {
  constructor(
    private readonly db: Kysely<DB>,
    /** Fetches Client ID Metadata Documents (through the egress guard). */
    private readonly fetchVia: GuardedFetch,
  ) {}

  // ---- clients: registered (RFC 7591: the SDK validates the metadata and issues the id and
  // any secret), or described by a metadata document at their https id, read afresh each time

  async getClient(clientId: string): Promise<OAuthClientInformationFull | undefined> {
    if (isDocumentClientId(clientId)) {
      const client = await fetchClientDocument(this.fetchVia, clientId);
      // kept as last read, so its authorizations and grants refer to it
      if (client) await repo.upsertClient(this.db, clientId, client);
      return client;
    }
    const row = await repo.findClient(this.db, clientId);
    return row ? (row.metadata as OAuthClientInformationFull) : undefined;
  }

  async registerClient(client: OAuthClientInformationFull): Promise<OAuthClientInformationFull> {
    const refusal = redirectUrisRefusal(client.redirect_uris);
    if (refusal !== null) throw new InvalidClientMetadataError(`redirect_uris: ${refusal}`);
    await repo.insertClient(this.db, client.client_id, client);
    return client;
  }

  // ---- the authorize step: held until consent

  /** Stores the authorization and answers its id (the consent page's); OAuth errors for a foreign resource or unknown scope. */
  async begin(client: OAuthClientInformationFull, ask: AuthorizationAsk, origin: string): Promise<string> {
    const target = ownResource(origin, ask.resource);
    if (!target) throw new InvalidTargetError(`The resource must be an MCP endpoint of this Warden (${origin}${MCP_PATH}[/{server}])`);
    const scopes = ask.scopes?.length ? [...new Set(ask.scopes)] : [MCP_SCOPE];
    const unknown = scopes.filter((s) => !(SCOPES_SUPPORTED as readonly string[]).includes(s));
    if (unknown.length) throw new InvalidScopeError(`Unknown scope: ${unknown.join(' ')} (supported: ${SCOPES_SUPPORTED.join(' ')})`);
    const id = randomUUID();
    await repo.deleteExpiredAuthorizations(this.db);
    await repo.insertAuthorization(this.db, {
      id,
      client_id: client.client_id,
      redirect_uri: ask.redirectUri,
      code_challenge: ask.codeChallenge,
      scopes,
      resource: target.resource,
      state: ask.state ?? null,
      expires_at: new Date(Date.now() + AUTHORIZATION_TTL_MS),
    });
    return id;
  }

  /** What the consent page shows of an authorization, for an admin of `workspaceId`. */
  async describe(id: string, workspaceId: string) {
    const row = await repo.findAuthorization(this.db, id);
    if (!row) throw notFound('authorization', id);
    const metadata = row.metadata as OAuthClientInformationFull;
    const slug = ownResource(new URL(row.resource).origin, new URL(row.resource))?.slug;
    const [servers, agents] = await Promise.all([
      repo.enabledServerSlugs(this.db, workspaceId, slug),
      repo.activeAgents(this.db, workspaceId),
    ]);
    return {
      id: row.id,
      client_id: row.client_id,
      client_name: clientName(metadata),
      redirect_uri: row.redirect_uri,
      resource: row.resource,
      scopes: row.scopes,
      servers: servers.map((s) => s.slug),
      agents,
      expires_at: iso(row.expires_at),
    };
  }

  /**
   * The admin's decision: with consent, a grant for the agent and a one-time code; either way
   * where to send the browser (the client's redirect URI, with `iss` as RFC 9207 asks).
   */
  async decide(id: string, workspaceId: string, decision: { approve: boolean; agentId?: string }, actor: Actor) {
    return inTransaction(this.db, async (trx) => {
      let agent: { id: string; slug: string } | undefined;
      if (decision.approve) {
        agent = (await repo.activeAgents(trx, workspaceId)).find((a) => a.id === decision.agentId);
        if (!agent) throw new ApiError('invalid_request', 'Choose an active agent of this workspace for the client to act as');
      }
      const ask = await repo.takeAuthorization(trx, id);
      if (!ask) throw notFound('authorization', id);
      const redirect = new URL(ask.redirect_uri);
      if (ask.state !== null) redirect.searchParams.set('state', ask.state);
      // the issuer is the origin of the endpoint asked for (Warden serves both)
      redirect.searchParams.set('iss', new URL(ask.resource).origin);
      if (!agent) {
        redirect.searchParams.set('error', 'access_denied');
        redirect.searchParams.set('error_description', 'The request was denied');
        return { redirect_to: redirect.href };
      }
      const client = await repo.findClient(trx, ask.client_id);
      const grant = await repo.insertGrant(trx, {
        id: randomUUID(),
        workspace_id: workspaceId,
        agent_id: agent.id,
        client_id: ask.client_id,
        client_name: clientName(client?.metadata as OAuthClientInformationFull),
        scopes: ask.scopes,
        resource: ask.resource,
        granted_by: actor.user,
      });
      const code = secret();
      await repo.insertCode(trx, {
        code_hash: hashSecret(code),
        grant_id: grant.id,
        code_challenge: ask.code_challenge,
        redirect_uri: ask.redirect_uri,
        expires_at: new Date(Date.now() + CODE_TTL_MS),
      });
      await recordChange(trx, workspaceId, actor, {
        action: 'oauth_grant.created',
        resource: grant.id,
        context: {
          agent: agent.slug,
          client_id: ask.client_id,
          client_name: grant.client_name,
          resource: ask.resource,
          scopes: ask.scopes,
        },
      });
      redirect.searchParams.set('code', code);
      return { redirect_to: redirect.href };
    });
  }

  // ---- the token endpoint

  async challengeFor(client: OAuthClientInformationFull, code: string): Promise<string> {
    const row = await repo.findCode(this.db, hashSecret(code), client.client_id);
    if (!row) throw new InvalidGrantError('The authorization code is unknown, used or expired');
    return row.code_challenge;
  }

  /** Code → tokens, once (the SDK has checked the PKCE verifier against the stored challenge first). */
  async exchangeCode(client: OAuthClientInformationFull, code: string, redirectUri: string | undefined, resource: URL | undefined) {
    return inTransaction(this.db, async (trx) => {
      const codeHash = hashSecret(code);
      const row = await repo.findCode(trx, codeHash, client.client_id);
      if (!row || !(await repo.takeCode(trx, codeHash))) throw new InvalidGrantError('The authorization code is unknown, used or expired');
      if (redirectUri !== undefined && redirectUri !== row.redirect_uri)
        throw new InvalidGrantError('redirect_uri differs from the authorization request');
      if (resource !== undefined && resource.href !== row.resource && resource.href.replace(/\/$/, '') !== row.resource)
        throw new InvalidTargetError('The resource differs from the one consented to');
      return this.issue(trx, row.grant_id, row.scopes);
    });
  }

  /**
   * Refresh token → a new access token and a new refresh token; the one used is marked used
   * (rotation). A used one presented again was copied (OAuth 2.1 §4.3.1): the grant is revoked
   * with every token it issued, audited, and the caller gets invalid_grant.
   */
  async exchangeRefresh(client: OAuthClientInformationFull, refreshToken: string, scopes: string[] | undefined, resource: URL | undefined) {
    const hash = hashSecret(refreshToken);
    type Outcome = { tokens: OAuthTokens } | { refused: 'unknown' | 'reused' };
    const outcome = await inTransaction(this.db, async (trx): Promise<Outcome> => {
      const row = await repo.takeRefreshToken(trx, hash, client.client_id);
      if (!row) {
        const reused = await repo.findReusedRefreshToken(trx, hash, client.client_id);
        if (!reused) return { refused: 'unknown' };
        await repo.revokeGrant(trx, reused.workspace_id, reused.grant_id);
        await recordChange(
          trx,
          reused.workspace_id,
          { user: `oauth-client:${client.client_id}` },
          {
            action: 'oauth_grant.revoked',
            resource: reused.grant_id,
            severity: 'medium',
            context: { reason: 'refresh_token_reused', client_id: client.client_id },
          },
        );
        return { refused: 'reused' };
      }
      if (resource !== undefined && resource.href !== row.resource && resource.href.replace(/\/$/, '') !== row.resource)
        throw new InvalidTargetError('The resource differs from the one consented to');
      const narrowed = scopes?.length ? scopes : row.scopes;
      if (narrowed.some((s) => !row.scopes.includes(s))) throw new InvalidScopeError('A refresh cannot add scopes to the grant');
      return { tokens: await this.issue(trx, row.grant_id, narrowed) };
    });
    // refused after the transaction: a reuse's revocation is committed first
    if ('tokens' in outcome) return outcome.tokens;
    throw new InvalidGrantError(
      outcome.refused === 'reused'
        ? 'The refresh token was already used, so it was copied: its grant is revoked'
        : 'The refresh token is unknown, used, revoked or expired',
    );
  }

  private async issue(trx: Kysely<DB>, grantId: string, scopes: string[]): Promise<OAuthTokens> {
    const access = secret(ACCESS_TOKEN_PREFIX);
    const refresh = secret(REFRESH_TOKEN_PREFIX);
    const now = Date.now();
    await repo.insertTokens(trx, [
      { token_hash: hashSecret(access), grant_id: grantId, kind: 'access', expires_at: new Date(now + ACCESS_TOKEN_TTL_S * 1000) },
      { token_hash: hashSecret(refresh), grant_id: grantId, kind: 'refresh', expires_at: new Date(now + REFRESH_TOKEN_TTL_S * 1000) },
    ]);
    return { access_token: access, token_type: 'Bearer', expires_in: ACCESS_TOKEN_TTL_S, refresh_token: refresh, scope: scopes.join(' ') };
  }

  /** RFC 7009: the client's own token goes; anything else is answered the same (nothing to tell). */
  async revokeToken(client: OAuthClientInformationFull, token: string): Promise<void> {
    await repo.deleteClientToken(this.db, hashSecret(token), client.client_id);
  }

  // ---- the MCP endpoints' side

  async identify(token: string, resource: string, defaultRateLimit: number): Promise<AuthContext> {
    const row = await repo.findAccessToken(this.db, hashSecret(token));
    if (!row) throw invalidToken('The access token is unknown or revoked');
    if (row.expires_at.getTime() <= Date.now()) throw invalidToken('The access token has expired');
    if (row.resource !== resource) throw invalidToken(`The access token is not for this resource (${resource}): its audience must name it`);
    if (!row.scopes.includes(MCP_SCOPE)) throw new ApiError('insufficient_scope', `The access token lacks the scope '${MCP_SCOPE}'`);
    return tokenIdentity({ ...row, id: row.workspace_id }, row.agent_slug, defaultRateLimit);
  }

  // ---- grants (API and dashboard)

  listGrants(workspaceId: string, page: PageRequest): Promise<Page<OAuthGrant>> {
    return paginate(repo.grantsQuery(this.db, workspaceId), 'created_at', page, toGrant);
  }

  async revokeGrant(workspaceId: string, id: string, actor: Actor): Promise<OAuthGrant> {
    return inTransaction(this.db, async (trx) => {
      if (!(await repo.revokeGrant(trx, workspaceId, id))) throw notFound('OAuth grant', id);
      const grant = await repo.findGrant(trx, workspaceId, id);
      if (!grant) throw notFound('OAuth grant', id);
      await recordChange(trx, workspaceId, actor, {
        action: 'oauth_grant.revoked',
        resource: id,
        severity: 'medium',
        context: { agent: grant.agent_slug, client_id: grant.client_id, client_name: grant.client_name },
      });
      return toGrant(grant);
    });
  }
}
