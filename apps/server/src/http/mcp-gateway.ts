/**
 * The HTTP side of the MCP gateway (features/mcp-gateway): `/api/v1/mcp` and
 * `/api/v1/mcp/{server}` speak MCP's Streamable HTTP transport (JSON-RPC), not the contract's
 * JSON operations, so they have a pipeline of their own in front of the contract validator:
 * the Origin check (DNS rebinding) → identity (a workspace key, or an agent key as the bearer; both served from the KeyCache,
 * an agent key's negative answer too) → rate limit → JSON body → input guard → the gateway. Refusals answer with a JSON-RPC error body, and a 401 with
 * `WWW-Authenticate`, as MCP clients expect.
 */
import type { ErrorRequestHandler, NextFunction, Request, RequestHandler, Response } from 'express';
import type { Config } from '../config.ts';
import type { WorkspacesService } from '../features/identity/workspaces.service.ts';
import { ALLOW } from '../features/mcp-gateway/gateway-sessions.ts';
import type { McpGateway } from '../features/mcp-gateway/mcp-gateway.service.ts';
import type { AccessTokens } from '../features/oauth/access-tokens.ts';
import { bearerChallenge, MCP_PATH, resourceOfPath } from '../features/oauth/protected-resource.ts';
import type { AuthContext, RequestContext } from '../shared/context.ts';
import { hashSecret } from '../shared/crypto.ts';
import { ApiError } from '../shared/errors.ts';
import { keyIdentity } from './context.ts';
import type { KeyCache } from './key-cache.ts';
import { NO_OAUTH_ORIGIN, oauthOrigin, publicOrigin } from './oauth-resource.ts';

const BEARER = /^Bearer ([\x21-\x7e]{1,512})$/;
const SLUG = /^\/([a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?)\/?$/;

/** Hosts of loopback origins: a page served from this machine, never a DNS-rebinding page (its origin names the attacker's host). */
const LOOPBACK_HOST = /^(?:localhost|127(?:\.\d{1,3}){3}|\[::1\])$/i;

/**
 * Whether a browser page at `origin` may use the gateway: no Origin (a client that is not a
 * browser), a loopback origin, or one listed (`*`: any). Anything else, `null` and a
 * malformed origin included, is refused.
 */
export function originAllowed(origin: string | undefined, allowed: ReadonlySet<string>): boolean {
  if (origin === undefined || allowed.has('*')) return true;
  const url = URL.parse(origin);
  if (!url || (url.protocol !== 'http:' && url.protocol !== 'https:')) return false;
  return allowed.has(url.origin) || LOOPBACK_HOST.test(url.hostname);
}

/**
 * DNS-rebinding protection, as the Streamable HTTP transport asks of servers: a request whose
 * `Origin` is not allowed is refused (403 origin_not_allowed) before anything else is done.
 */
export function mcpOriginGuard(allowedOrigins: readonly string[]): RequestHandler {
  const allowed = new Set(allowedOrigins);
  return (req: Request, _res: Response, next: NextFunction) => {
    const sent = req.headersDistinct.origin;
    if (sent === undefined || (sent.length === 1 && originAllowed(sent[0], allowed))) return next();
    next(
      new ApiError(
        'origin_not_allowed',
        'The MCP gateway does not serve pages of this origin: list it in WARDEN_MCP_ALLOWED_ORIGINS to allow it',
      ),
    );
  };
}

/**
 * The gateway's `authenticate` (http/authenticate.ts): the bearer is an OAuth access token
 * (a JWT, or a `wat_` token of the built-in server: features/oauth/access-tokens.ts), else a
 * workspace key, else an agent's own key (its identity: the agent's workspace, runtime:execute only). Both answers
 * come from the KeyCache when it has them, so a desktop client's agent key costs no lookup
 * after its first request, and one that is nobody's costs none either.
 */
export function mcpAuthenticate(
  workspaces: Pick<WorkspacesService, 'findActiveKey' | 'findAgentBearer'>,
  defaultRateLimit: number,
  cache: KeyCache,
  tokens: { config: Pick<Config, 'publicUrl'>; check: AccessTokens },
): RequestHandler {
  /** Who `bearer` is, on `req`'s endpoint: the identity, and the agent key when the bearer is one (undefined: nobody). */
  const identify = async (bearer: string, req: Request): Promise<{ auth?: AuthContext; agentKey?: string }> => {
    if (tokens.check.recognises(bearer)) {
      // an OAuth access token: valid only for the endpoint it was issued for (its audience), named by configuration
      const origin = oauthOrigin(tokens.config, req);
      if (origin === undefined) throw new ApiError('unauthorized', NO_OAUTH_ORIGIN);
      const resource = resourceOfPath(origin, req.path) ?? `${origin}${MCP_PATH}`;
      return { auth: await tokens.check.identify(bearer, resource, defaultRateLimit) };
    }
    const keyHash = hashSecret(bearer);
    const cached = cache.get(keyHash);
    if (cached) return { auth: cached };
    let agent = cache.getAgent(keyHash);
    if (agent === undefined) {
      const epoch = cache.begin();
      const key = await workspaces.findActiveKey(keyHash);
      if (key) {
        const auth = keyIdentity(key, defaultRateLimit);
        cache.set(keyHash, auth, epoch);
        return { auth };
      }
      agent = (await workspaces.findAgentBearer(bearer, keyHash, defaultRateLimit)) ?? null;
      cache.setAgent(keyHash, agent, epoch);
    }
    return agent ? { auth: agent, agentKey: bearer } : {};
  };
  return async (req: Request, res: Response, next: NextFunction) => {
    try {
      const bearer = BEARER.exec(req.get('authorization') ?? '')?.[1];
      if (bearer) {
        const { auth, agentKey } = await identify(bearer, req);
        req.auth = auth;
        if (agentKey) res.locals.agentKey = agentKey;
        // a request that lasts (a session's GET stream, a listen stream) asks again whether its bearer still is someone
        res.locals.identifyAgain = async () => (await identify(bearer, req)).auth;
      }
      next();
    } catch (error) {
      req.authFailure = error;
      next();
    }
  };
}

/**
 * Serves the request with the gateway: POST carries MCP messages (a session's, or a client's
 * that keeps none), GET opens a client session's stream, DELETE ends the session.
 */
export function mcpGatewayHandler(gateway: McpGateway): RequestHandler {
  return async (req: Request, res: Response) => {
    if (req.method !== 'POST' && req.method !== 'GET' && req.method !== 'DELETE') {
      throw new ApiError('method_not_allowed', 'The MCP gateway takes POST, and GET and DELETE for a session', { headers: ALLOW });
    }
    if (!req.auth) {
      throw (
        req.authFailure ??
        new ApiError(
          'unauthorized',
          'Send a workspace key with runtime:execute as the bearer token and the agent key in X-Warden-Agent-Key, or the agent key as the bearer token',
        )
      );
    }
    const slug = req.path === '/' ? undefined : SLUG.exec(req.path)?.[1];
    if (slug === undefined && req.path !== '/')
      throw new ApiError('route_not_found', `No MCP endpoint at ${req.originalUrl.split('?')[0]}`);
    const ctx: RequestContext = {
      requestId: req.requestId,
      auth: req.auth,
      origin: `${req.protocol}://${req.get('host')}`,
      // a token acts as its granted agent: no agent key is read beside it
      agentKey: req.auth.agent !== undefined ? undefined : ((res.locals.agentKey as string | undefined) ?? req.get('x-warden-agent-key')),
    };
    const caller = await gateway.caller(ctx);
    // the same agent, by the same credentials, still active: else a stream the request opened ends
    const stillAllowed = async () => {
      const auth = await (res.locals.identifyAgain as (() => Promise<AuthContext | undefined>) | undefined)?.();
      if (!auth) return false;
      const again = await gateway.caller({ ...ctx, auth }).catch(() => null);
      return again?.agent.id === caller.agent.id;
    };
    if (req.method === 'GET') return gateway.stream(caller, slug, req, res, stillAllowed);
    if (req.method === 'DELETE') return gateway.end(caller, slug, req, res);
    await gateway.serve({ ...caller, stillAllowed }, slug, req, res, req.body, `${req.protocol}://${req.get('host')}`);
  };
}

/**
 * Refusals as JSON-RPC errors; anything else goes on to the app's error mapper. A 401 carries the
 * challenge MCP clients start OAuth from (RFC 9728 §5.1): where the endpoint's Protected Resource
 * Metadata is and the scope it needs, with `error="invalid_token"` when a credential was sent
 * (RFC 6750 §3.1); a 403 `insufficient_scope` names the scope it lacked.
 */
export const mcpGatewayErrors =
  (config: Pick<Config, 'publicUrl'>): ErrorRequestHandler =>
  (error, req, res, next) => {
    if (!(error instanceof ApiError)) return next(error);
    if (res.headersSent) return;
    res.set(error.headers);
    const origin = oauthOrigin(config, req) ?? publicOrigin(config, req);
    const resource = resourceOfPath(origin, req.path) ?? `${origin}${MCP_PATH}`;
    if (error.status === 401)
      res.set('WWW-Authenticate', bearerChallenge(resource, req.get('authorization') ? 'invalid_token' : undefined, error.message));
    if (error.code === 'insufficient_scope') res.set('WWW-Authenticate', bearerChallenge(resource, 'insufficient_scope', error.message));
    res
      .status(error.status)
      .json({ jsonrpc: '2.0', error: { code: -32000, message: error.message, data: { code: error.code } }, id: null });
  };
