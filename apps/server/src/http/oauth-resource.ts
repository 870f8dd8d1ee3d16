/**
 * The MCP endpoints as OAuth protected resources, over HTTP: their Protected Resource Metadata
 * (RFC 9728 §3.1, `/.well-known/oauth-protected-resource/api/v1/mcp[/{slug}]`, public, any
 * origin may read it) and the origin they are named under (WARDEN_PUBLIC_URL, else the
 * request's own). What the documents say is built in features/oauth/protected-resource.ts.
 */
import { type Request, type Response, Router } from 'express';
import type { Config } from '../config.ts';
import { MCP_PATH, mcpResource, protectedResourceMetadata } from '../features/oauth/protected-resource.ts';
import { ApiError } from '../shared/errors.ts';

/** The origin clients reach Warden at: the configured one, else this request's (loopback use). */
export const publicOrigin = (config: Pick<Config, 'publicUrl'>, req: Request): string =>
  config.publicUrl ?? `${req.protocol}://${req.get('host') ?? 'localhost'}`;

/** The authorization servers whose tokens the MCP endpoints accept: the built-in one (this origin) and the organisation's. */
export function authorizationServers(config: Pick<Config, 'publicUrl' | 'oauthBuiltin' | 'oauthIssuer'>, req: Request): string[] {
  return [...(config.oauthBuiltin ? [publicOrigin(config, req)] : []), ...(config.oauthIssuer ? [config.oauthIssuer] : [])];
}

export function protectedResourceRouter(config: Config): Router {
  const router = Router();
  const serve = (req: Request, res: Response) => {
    const resource = mcpResource(publicOrigin(config, req), req.params.slug as string | undefined);
    if (resource === undefined) throw new ApiError('route_not_found', `No MCP endpoint at ${MCP_PATH}/${String(req.params.slug)}`);
    res.set('Access-Control-Allow-Origin', '*');
    res.set('Cache-Control', 'public, max-age=300');
    res.json(protectedResourceMetadata(resource, authorizationServers(config, req)));
  };
  router.get(`/.well-known/oauth-protected-resource${MCP_PATH}`, serve);
  router.get(`/.well-known/oauth-protected-resource${MCP_PATH}/:slug`, serve);
  return router;
}
