/**
 * Access tokens of the organisation's own authorization server (WARDEN_OAUTH_ISSUER): JWTs
 * checked with `jose` against the keys its metadata names (RFC 8414, else OpenID discovery →
 * `jwks_uri`): signature, issuer, audience = the MCP endpoint called (RFC 8707), expiry, then
 * the scope. Its claims map to an identity: the workspace WARDEN_OAUTH_WORKSPACE, the agent
 * whose slug is in the claim WARDEN_OAUTH_AGENT_CLAIM (default `warden_agent`).
 */
import { createRemoteJWKSet, errors, type JWTPayload, type JWTVerifyGetKey, jwtVerify } from 'jose';
import { ApiError } from '../../shared/errors.ts';
import { MCP_SCOPE } from './protected-resource.ts';

/** Asymmetric algorithms only: a shared-secret (HS*) or `none` token is refused whatever its header says. */
const ALGORITHMS = ['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'ES256', 'ES384', 'ES512', 'EdDSA', 'Ed25519'];
const DISCOVERY_TIMEOUT_MS = 5_000;
/** After a failed discovery, the next attempt waits this long (a down IdP is not asked on every request). */
const DISCOVERY_RETRY_MS = 10_000;

export interface ExternalClaims {
  subject: string;
  agent: string | undefined;
  scopes: string[];
}

export const invalidToken = (message: string) => new ApiError('unauthorized', message);

/** RFC 8414 §3.1 (the well-known part inserted before the issuer's path), then OpenID Connect Discovery (appended). */
function discoveryUrls(issuer: string): string[] {
  const url = new URL(issuer);
  const path = url.pathname === '/' ? '' : url.pathname.replace(/\/$/, '');
  return [`${url.origin}/.well-known/oauth-authorization-server${path}`, `${url.origin}${path}/.well-known/openid-configuration`];
}

/** The scopes a JWT access token holds: `scope` (RFC 9068, space-separated) or `scp` (a list, as some IdPs write it). */
export function scopesOf(payload: JWTPayload): string[] {
  if (typeof payload.scope === 'string') return payload.scope.split(' ').filter(Boolean);
  if (Array.isArray(payload.scp)) return payload.scp.filter((s): s is string => typeof s === 'string');
  return [];
}

export class ExternalIssuer {
  private keys: JWTVerifyGetKey | undefined;
  private discovering: Promise<JWTVerifyGetKey> | undefined;
  private failedAt = 0;

  constructor(
    readonly issuer: string,
    private readonly agentClaim: string,
  ) {}

  /** Whether the token says this issuer issued it (read unverified, only to choose who verifies it). */
  claims(payload: JWTPayload): boolean {
    return payload.iss === this.issuer;
  }

  /** The token's verified claims, for `resource`; ApiError 401 `unauthorized` or 403 `insufficient_scope` otherwise. */
  async verify(token: string, resource: string): Promise<ExternalClaims> {
    const keys = await this.jwks();
    let payload: JWTPayload;
    try {
      ({ payload } = await jwtVerify(token, keys, {
        issuer: this.issuer,
        audience: resource,
        algorithms: ALGORITHMS,
        requiredClaims: ['exp'],
      }));
    } catch (error) {
      throw refusal(error, resource);
    }
    const scopes = scopesOf(payload);
    if (!scopes.includes(MCP_SCOPE)) throw new ApiError('insufficient_scope', `The access token lacks the scope '${MCP_SCOPE}'`);
    const agent = payload[this.agentClaim];
    return { subject: String(payload.sub ?? ''), agent: typeof agent === 'string' ? agent : undefined, scopes };
  }

  private jwks(): Promise<JWTVerifyGetKey> {
    if (this.keys) return Promise.resolve(this.keys);
    if (!this.discovering) {
      if (Date.now() - this.failedAt < DISCOVERY_RETRY_MS)
        return Promise.reject(new ApiError('service_unavailable', 'The authorization server could not be reached: try again shortly'));
      this.discovering = this.discover().then(
        (keys) => {
          this.keys = keys;
          return keys;
        },
        (error) => {
          this.failedAt = Date.now();
          this.discovering = undefined;
          throw new ApiError('service_unavailable', 'The authorization server could not be reached: try again shortly', { cause: error });
        },
      );
    }
    return this.discovering;
  }

  private async discover(): Promise<JWTVerifyGetKey> {
    let lastError: unknown;
    for (const url of discoveryUrls(this.issuer)) {
      try {
        const res = await fetch(url, { signal: AbortSignal.timeout(DISCOVERY_TIMEOUT_MS), redirect: 'error' });
        if (!res.ok) throw new Error(`${url} answered ${res.status}`);
        const metadata = (await res.json()) as { issuer?: unknown; jwks_uri?: unknown };
        // RFC 8414 §3.3: the metadata must name the issuer it was asked for
        if (metadata.issuer !== this.issuer) throw new Error(`${url} names issuer ${String(metadata.issuer)}`);
        if (typeof metadata.jwks_uri !== 'string') throw new Error(`${url} names no jwks_uri`);
        return createRemoteJWKSet(new URL(metadata.jwks_uri), { timeoutDuration: DISCOVERY_TIMEOUT_MS });
      } catch (error) {
        lastError = error;
      }
    }
    throw lastError;
  }
}

/** Why a token failed, in words a person can act on (never the token itself). */
function refusal(error: unknown, resource: string): ApiError {
  if (error instanceof errors.JWTExpired) return invalidToken('The access token has expired');
  if (error instanceof errors.JWTClaimValidationFailed) {
    if (error.claim === 'aud') return invalidToken(`The access token is not for this resource (${resource}): its audience must name it`);
    if (error.claim === 'iss') return invalidToken('The access token was issued by an authorization server Warden does not accept');
    return invalidToken(`The access token's ${error.claim} claim is not valid`);
  }
  if (error instanceof errors.JWKSNoMatchingKey || error instanceof errors.JWSSignatureVerificationFailed)
    return invalidToken("The access token's signature does not verify with the authorization server's keys");
  if (error instanceof errors.JOSEAlgNotAllowed) return invalidToken("The access token's algorithm is not accepted");
  if (error instanceof errors.JWKSTimeout)
    return new ApiError('service_unavailable', "The authorization server's keys could not be fetched in time");
  return invalidToken('The access token is malformed');
}
