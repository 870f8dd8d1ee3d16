/**
 * The MCP endpoints as OAuth protected resources, over HTTP: their Protected Resource Metadata
 * (RFC 9728 §3.1, `/.well-known/oauth-protected-resource/api/v1/mcp[/{slug}]`, public, any
 * origin may read it) and the origin they are named under (WARDEN_PUBLIC_URL, else a loopback
 * request's own: oauthOrigin). What the documents say is built in features/oauth/protected-resource.ts.
 */
import { type Request, type Response, Router } from 'express';
import type { Config } from '../config.ts';
import { MCP_PATH, mcpResource, protectedResourceMetadata } from '../features/oauth/protected-resource.ts';
import { ApiError } from '../shared/errors.ts';

/** The origin clients reach Warden at: the configured one, else this request's (for links a browser follows). */
export const publicOrigin = (config: Pick<Config, 'publicUrl'>, req: Request): string =>
  config.publicUrl ?? `${req.protocol}://${req.get('host') ?? 'localhost'}`;

const LOOPBACK_HOSTS = new Set(['localhost', '127.0.0.1', '[::1]']);

/**
 * The origin OAuth names Warden by (the built-in server's issuer, the resource its tokens and the
 * organisation's are for): WARDEN_PUBLIC_URL; without it, a loopback request's own origin (a
 * developer's machine), never a name a request's Host header makes up. Undefined otherwise.
 */
export function oauthOrigin(config: Pick<Config, 'publicUrl'>, req: Request): string | undefined {
  if (config.publicUrl) return config.publicUrl;
  const origin = publicOrigin(config, req);
  const host = URL.parse(origin)?.hostname;
  return host !== undefined && LOOPBACK_HOSTS.has(host) ? origin : undefined;
}

/** Why OAuth is not served on a request's host: the fix, for the client and the operator. */
export const NO_OAUTH_ORIGIN =
  'OAuth here needs WARDEN_PUBLIC_URL (the origin clients reach Warden at): without it only loopback requests are served, so that no Host header names the issuer or audience';

/** The authorization servers whose tokens the MCP endpoints accept: the built-in one (this origin) and the organisation's. */
export function authorizationServers(config: Pick<Config, 'publicUrl' | 'oauthBuiltin' | 'oauthIssuer'>, req: Request): string[] {
  const builtin = config.oauthBuiltin ? oauthOrigin(config, req) : undefined;
  return [...(builtin ? [builtin] : []), ...(config.oauthIssuer && config.publicUrl ? [config.oauthIssuer] : [])];
}

export function protectedResourceRouter(config: Config): Router {
  const router = Router();
  const serve = (req: Request, res: Response) => {
    const origin = oauthOrigin(config, req);
    if (origin === undefined) throw new ApiError('not_found', NO_OAUTH_ORIGIN);
    const resource = mcpResource(origin, req.params.slug as string | undefined);
    if (resource === undefined) throw new ApiError('route_not_found', `No MCP endpoint at ${MCP_PATH}/${String(req.params.slug)}`);
    res.set('Access-Control-Allow-Origin', '*');
    res.set('Cache-Control', 'public, max-age=300');
    res.json(protectedResourceMetadata(resource, authorizationServers(config, req)));
  };
  router.get(`/.well-known/oauth-protected-resource${MCP_PATH}`, serve);
  router.get(`/.well-known/oauth-protected-resource${MCP_PATH}/:slug`, serve);
  return router;
}
