/**
 * Warden's MCP endpoints as OAuth 2.1 protected resources (MCP authorization, 2025-11-25):
 * each endpoint's resource identifier (RFC 8707: the URL a token's audience must name), its
 * Protected Resource Metadata (RFC 9728) and the `WWW-Authenticate` challenges (RFC 6750 §3)
 * that point a client to it. Pure: the HTTP layer serves what these build.
 */

/** The one scope of the MCP gateway: act as the granted agent on the servers it may reach. */
export const MCP_SCOPE = 'mcp';
export const SCOPES_SUPPORTED = [MCP_SCOPE] as const;

/** Where the gateway lives, under the public origin. */
export const MCP_PATH = '/api/v1/mcp';
const SLUG = /^[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?$/;

/** The resource identifier of `/api/v1/mcp` (no slug) or `/api/v1/mcp/{slug}`; undefined for a malformed slug. */
export function mcpResource(origin: string, slug?: string): string | undefined {
  if (slug !== undefined && !SLUG.test(slug)) return undefined;
  return `${origin}${MCP_PATH}${slug === undefined ? '' : `/${slug}`}`;
}

/** RFC 9728 §3.1: the well-known path is inserted between the origin and the resource's path. */
export function metadataUrl(resource: string): string {
  const url = new URL(resource);
  return `${url.origin}/.well-known/oauth-protected-resource${url.pathname === '/' ? '' : url.pathname}`;
}

/** The resource a request path under the gateway stands for (`/` or `/{slug}`, a trailing slash allowed). */
export function resourceOfPath(origin: string, path: string): string | undefined {
  if (path === '/' || path === '') return mcpResource(origin);
  const slug = /^\/([^/]+)\/?$/.exec(path)?.[1];
  return slug === undefined ? undefined : mcpResource(origin, slug);
}

export interface ProtectedResourceMetadata {
  resource: string;
  authorization_servers: string[];
  scopes_supported: string[];
  bearer_methods_supported: string[];
  resource_name: string;
  resource_documentation: string;
}

export function protectedResourceMetadata(resource: string, authorizationServers: readonly string[]): ProtectedResourceMetadata {
  const origin = new URL(resource).origin;
  return {
    resource,
    authorization_servers: [...authorizationServers],
    scopes_supported: [...SCOPES_SUPPORTED],
    bearer_methods_supported: ['header'],
    resource_name: `Warden MCP gateway (${new URL(resource).pathname})`,
    resource_documentation: `${origin}/docs`,
  };
}

/** RFC 6750 §3 error codes the gateway answers with. */
export type BearerError = 'invalid_token' | 'insufficient_scope';

/** The `WWW-Authenticate` value of a refusal: where the metadata is, the scope needed and, when a token was sent, why it failed. */
export function bearerChallenge(resource: string, error?: BearerError, description?: string): string {
  const parts = [`realm="warden"`, `resource_metadata="${metadataUrl(resource)}"`, `scope="${SCOPES_SUPPORTED.join(' ')}"`];
  if (error) parts.push(`error="${error}"`);
  // a quoted-string may not hold '"' or '\' unescaped: the descriptions are Warden's own text, kept plain
  if (description) parts.push(`error_description="${description.replace(/["\\]/g, '')}"`);
  return `Bearer ${parts.join(', ')}`;
}
