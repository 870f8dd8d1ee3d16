/** What a request carries once the HTTP layer has authenticated it. */
import type { Permission } from '@warden/contract';
import type { Request, Response } from 'express';
import { ApiError } from './errors.ts';

export interface AuthContext {
  workspaceId: string;
  keyId: string;
  keyName: string;
  permissions: ReadonlySet<Permission>;
  rateLimitPerMinute: number;
  /** The workspace's policy-set version, read with the key: compiled policy sets are cached by it. */
  policyVersion: number;
  /** The workspace's agents version, read with the key: agent lookups are cached by it. */
  agentsVersion: number;
}

export interface RequestContext {
  requestId: string;
  /** The caller's key. For the one public operation (health) it holds no workspace and no permission. */
  auth: AuthContext;
  /** X-Warden-Agent-Key, on operations that accept it. */
  agentKey: string | undefined;
  /** The response, for the few handlers that set cookies (dashboard login and logout). */
  res?: Response;
}

export const ANONYMOUS: AuthContext = {
  workspaceId: '00000000-0000-0000-0000-000000000000',
  keyId: '',
  keyName: 'anonymous',
  permissions: new Set(),
  rateLimitPerMinute: 0,
  policyVersion: 0,
  agentsVersion: 0,
};

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
  };
}

/**
 * Why a request that needs an identity has none: the lookup that failed (answered 503 when the
 * database is down), else the one fixed 401 for a missing, malformed, unknown or revoked key.
 */
export const identityRefusal = (req: Request): unknown => req.authFailure ?? new ApiError('unauthorized', 'A valid API key is required');
