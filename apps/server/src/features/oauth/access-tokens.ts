/**
 * OAuth access tokens sent to the MCP endpoints, to the identity they stand for: the one agent
 * they were granted for, in its workspace, with `runtime:execute` only (as an agent key). A JWT
 * is the organisation's authorization server's (external-issuer.ts); a `wat_` token is the
 * built-in server's (builtin-tokens.ts). Any other bearer is a key, as before.
 */
import type { Permission } from '@warden/contract';
import { decodeJwt, type JWTPayload } from 'jose';
import type { Kysely } from 'kysely';
import type { DB } from '../../db/schema.ts';
import type { AuthContext } from '../../shared/context.ts';
import { ApiError } from '../../shared/errors.ts';
import { type ExternalIssuer, invalidToken } from './external-issuer.ts';
import { findWorkspaceAuth } from './oauth.repository.ts';

const RUNTIME_EXECUTE: Permission = 'runtime:execute';
const JWT = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$/;
/** The prefix of the built-in authorization server's access tokens. */
export const ACCESS_TOKEN_PREFIX = 'wat_';

/** What the identity needs of the token's workspace. */
export interface WorkspaceAuth {
  id: string;
  rate_limit_per_minute: number | null;
  policy_version: number;
  agents_version: number;
  mcp_servers_version: number;
}

/** The identity of a token acting as agent `slug` (rate-limited per agent, at the workspace's limit). */
export function tokenIdentity(workspace: WorkspaceAuth, slug: string, defaultRateLimit: number): AuthContext {
  return {
    workspaceId: workspace.id,
    // the rate limiter's bucket: one per agent, and slugs repeat across workspaces
    keyId: `oauth:${workspace.id}/${slug}`,
    keyName: `agent:${slug}`,
    permissions: new Set([RUNTIME_EXECUTE]),
    rateLimitPerMinute: workspace.rate_limit_per_minute ?? defaultRateLimit,
    policyVersion: workspace.policy_version,
    agentsVersion: workspace.agents_version,
    mcpServersVersion: workspace.mcp_servers_version,
    agent: slug,
  };
}

/** The built-in server's side (builtin-tokens.ts), kept apart so this file has no database writes. */
export interface BuiltinTokenCheck {
  identify(token: string, resource: string, defaultRateLimit: number): Promise<AuthContext>;
}

export class AccessTokens {
  constructor(
    private readonly db: Kysely<DB>,
    /** `audienceConfigured`: WARDEN_PUBLIC_URL is set, so the audience a token must carry is the configured origin's. */
    private readonly external: { issuer: ExternalIssuer; workspace: string; audienceConfigured: boolean } | undefined,
    private readonly builtin: BuiltinTokenCheck | undefined,
  ) {}

  /** Whether a bearer is an access token rather than one of Warden's keys (those keep their own path). */
  recognises(bearer: string): boolean {
    return bearer.startsWith(ACCESS_TOKEN_PREFIX) || JWT.test(bearer);
  }

  /** The identity the token stands for at `resource`; ApiError 401 (invalid token) or 403 (insufficient_scope) otherwise. */
  async identify(bearer: string, resource: string, defaultRateLimit: number): Promise<AuthContext> {
    if (bearer.startsWith(ACCESS_TOKEN_PREFIX)) {
      if (!this.builtin) throw invalidToken("The access token was issued by Warden's built-in authorization server, which is off");
      return this.builtin.identify(bearer, resource, defaultRateLimit);
    }
    let payload: JWTPayload;
    try {
      payload = decodeJwt(bearer);
    } catch {
      throw invalidToken('The access token is malformed');
    }
    if (!this.external?.issuer.claims(payload))
      throw invalidToken('The access token was issued by an authorization server Warden does not accept');
    if (!this.external.audienceConfigured)
      throw invalidToken(
        "Tokens of the organisation's authorization server are accepted only once WARDEN_PUBLIC_URL is set: the audience they must carry comes from configuration, never from a request",
      );
    const claims = await this.external.issuer.verify(bearer, resource);
    if (claims.agent === undefined) throw new ApiError('agent_not_found', 'The access token names no agent of Warden');
    const workspace = await findWorkspaceAuth(this.db, { slug: this.external.workspace });
    if (!workspace) throw new ApiError('internal_error', 'WARDEN_OAUTH_WORKSPACE names no workspace');
    return tokenIdentity(workspace, claims.agent, defaultRateLimit);
  }
}
