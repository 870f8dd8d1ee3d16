/** What the HTTP layer keeps on a request: its identity, and how a missing one is refused. */
import type { Permission } from '@warden/contract';
import type { Request } from 'express';
import type { AuthContext } from '../shared/context.ts';
import { ApiError } from '../shared/errors.ts';

declare global {
  namespace Express {
    interface Request {
      requestId: string;
      /** performance.now() when the request reached the app (X-Response-Time). */
      startedAt?: number;
      auth?: AuthContext;
      /**
       * Why the caller's credentials could not be checked (the database failed the lookup).
       * The identity gate answers with it instead of 401 on every operation that needs a key;
       * a public one (health, login) goes on without an identity.
       */
      authFailure?: unknown;
    }
  }
}

/** The identity of a workspace API key, from its row (bearer requests and dashboard sessions alike). */
export function keyIdentity(
  key: {
    workspace_id: string;
    id: string;
    name: string;
    permissions: string[];
    rate_limit_per_minute: number | null;
    policy_version: number;
    agents_version: number;
    mcp_servers_version: number;
  },
  defaultRateLimit: number,
): AuthContext {
  return {
    workspaceId: key.workspace_id,
    keyId: key.id,
    keyName: key.name,
    permissions: new Set(key.permissions as Permission[]),
    rateLimitPerMinute: key.rate_limit_per_minute ?? defaultRateLimit,
    policyVersion: key.policy_version,
    agentsVersion: key.agents_version,
    mcpServersVersion: key.mcp_servers_version,
  };
}

/**
 * Why a request that needs an identity has none: the lookup that failed (answered 503 when the
 * database is down), else the one fixed 401 for a missing, malformed, unknown or revoked key.
 */
export const identityRefusal = (req: Request): unknown => req.authFailure ?? new ApiError('unauthorized', 'A valid API key is required');
