/**
 * What the upstream OAuth connections (upstream-oauth.ts) and their tokens (upstream-tokens.ts)
 * share as an OAuth client: the guarded fetch the SDK's functions use, the client Warden is, a
 * token's life, and how failures are answered.
 */
import { OAuthError } from '@modelcontextprotocol/sdk/server/auth/errors.js';
import type { OAuthClientInformationMixed, OAuthTokens } from '@modelcontextprotocol/sdk/shared/auth.js';
import { describeNetworkError } from '../../egress/guard.ts';
import { ApiError } from '../../shared/errors.ts';
import type { SecretBox } from '../webhooks/secrets.ts';
import type * as repo from './upstream-oauth.repository.ts';

/** An access token is refreshed this long before it expires (or halfway through a shorter life), so that none expires on the way. */
const REFRESH_AHEAD_MS = 60_000;
/** Each exchange with an authorization server. */
const OAUTH_TIMEOUT_MS = 10_000;

export type FetchLike = (url: string | URL, init?: RequestInit) => Promise<Response>;
export type Config = repo.OAuthConfigRow;
export type Grant = repo.OAuthGrantRow;

/** The egress guard's fetch as the SDK's OAuth functions need it: bounded in time, answering the global Response. */
export const oauthFetch =
  (fetchFn: FetchLike): FetchLike =>
  async (url, init = {}) => {
    const res = await fetchFn(url, { ...init, signal: init.signal ?? AbortSignal.timeout(OAUTH_TIMEOUT_MS) });
    // the SDK reads OAuth errors only from a global Response (instanceof), and the egress guard's is undici's own
    return new Response(res.body, { status: res.status, statusText: res.statusText, headers: res.headers });
  };

/** The client Warden is at an authorization server, as a configuration or a connection holds it (its secret opened). */
export const clientOf = (
  box: SecretBox,
  held: { client_id: string | null; client_secret_encrypted: string | null },
): OAuthClientInformationMixed & { client_secret?: string } => ({
  client_id: held.client_id ?? '',
  ...(held.client_secret_encrypted ? { client_secret: box.open(held.client_secret_encrypted) } : {}),
});

/** When the tokens expire, and when Warden refreshes them (null: the server did not say; refreshed when refused). */
export function lifeOf(
  tokens: Pick<OAuthTokens, 'expires_in'>,
  issuedAt = Date.now(),
): { expires_at: Date | null; refresh_after: Date | null } {
  if (!tokens.expires_in) return { expires_at: null, refresh_after: null };
  const lifeMs = tokens.expires_in * 1000;
  const now = issuedAt;
  return { expires_at: new Date(now + lifeMs), refresh_after: new Date(now + lifeMs - Math.min(REFRESH_AHEAD_MS, lifeMs / 2)) };
}
/** Two spellings of one issuer (RFC 8414 compares them as given; a trailing slash is tolerated, as the SDK does). */
export const sameIssuer = (a: string, b: string) => a.replace(/\/$/, '') === b.replace(/\/$/, '');
export const failed = (message: string, cause?: unknown) => new ApiError('upstream_authorization_failed', message, { cause });
export const why = (error: unknown) => (error instanceof OAuthError ? `${error.errorCode}: ${error.message}` : describeNetworkError(error));
