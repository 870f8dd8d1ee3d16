/**
 * The Express application: the HTTP layer around the handlers. For each API (v1 under
 * /api/v1, the dashboard's under /dashboard/api) the order is: request id and timing →
 * JSON body → identity (bearer key, or dashboard session) → rate limit → contract
 * validation → handler → the one error mapper. It builds only the HTTP layer: the services it
 * serves come from the composition root (composition.ts).
 */
import { dashboard, operations } from '@warden/contract';
import express, { type Express, type RequestHandler } from 'express';
import type { Config } from './config.ts';
import { createDashboardHandlers } from './features/dashboard/dashboard.handlers.ts';
import { createHandlers } from './handlers.ts';
import { authenticate } from './http/authenticate.ts';
import { identityRefusal } from './http/context.ts';
import { dashboardAssets } from './http/dashboard-assets.ts';
import { dashboardSession, sessionCookie } from './http/dashboard-session.ts';
import { docsRouter } from './http/docs.ts';
import { errorMapper } from './http/error-mapper.ts';
import { idempotency } from './http/idempotency.ts';
import { inputGuard } from './http/input-guard.ts';
import { jsonBody } from './http/json-body.ts';
import { sendJson } from './http/json-response.ts';
import type { KeyCache } from './http/key-cache.ts';
import { mcpAuthenticate, mcpGatewayErrors, mcpGatewayHandler, mcpOriginGuard } from './http/mcp-gateway.ts';
import { protectedResourceRouter, publicOrigin } from './http/oauth-resource.ts';
import { authorizationServerRouter } from './http/oauth-server.ts';
import { pipeline } from './http/pipeline.ts';
import { type RateLimitStore, rateLimit } from './http/rate-limit.ts';
import { requestContext } from './http/request-context.ts';
import { createRouter, type RouterOptions } from './http/router.ts';
import { StaticAsset } from './http/static-asset.ts';
import {
  keyHoldersLog,
  PUBLIC_TLOG_PATH,
  publicTlogCaching,
  publishedLog,
  TLOG_PATH,
  tlogCaching,
  tlogTilesRouter,
} from './http/tlog-tiles.ts';
import { upstreamOAuthCallbackRouter } from './http/upstream-oauth-callback.ts';
import { contractValidator } from './http/validator.ts';
import type { Logger } from './logger.ts';
import { createHttpObserver, type HttpObserver } from './observability/http.ts';
import type { Probes } from './observability/probes.ts';
import type { Services } from './services.ts';
import { ApiError } from './shared/errors.ts';
import { loadDashboardSpec, loadSpec, specText } from './spec.ts';

export const BASE_PATH = '/api/v1';
export const DASHBOARD_API_PATH = '/dashboard/api';
/** Largest request body accepted, after inflating (413 payload_too_large beyond). */
export const BODY_LIMIT_BYTES = 1024 * 1024;

/** What the HTTP layer is built around (by the composition root, composition.ts). */
export interface AppDeps {
  config: Config;
  logger: Logger;
  services: Services;
  rateLimitStore: RateLimitStore;
  /** Identities of recently used keys; the server keeps it in step with the database's notifications. */
  keys: KeyCache;
  /** Request logs, request metrics and the in-flight count (observability/http.ts); built here unless given. */
  observer?: HttpObserver;
  /** GET /livez and /readyz (observability/probes.ts), when given. */
  probes?: Probes;
}

/** Operations that can change what a key's identity carries: keys, workspace settings, policy, agent and MCP server versions. */
const CONFIGURATION_PERMISSIONS = new Set(['policies:write', 'agents:write', 'mcp_servers:write', 'admin']);

/** Everything but the listed public paths needs an identity; refusing before validation tells an anonymous caller nothing about the API. */
const requireIdentity =
  (...publicPaths: string[]): RequestHandler =>
  (req, _res, next) => {
    next(!req.auth && !publicPaths.includes(req.path) ? identityRefusal(req) : undefined);
  };

export function createApp(deps: AppDeps): Express {
  const { config, logger, services, rateLimitStore, keys } = deps;
  // This process's own configuration changes are dropped from the key cache before their answer
  // leaves (other processes learn of them by notification).
  const routerOptions: RouterOptions = {
    origin: (req) => publicOrigin(config, req),
    onSuccess: (row, auth) => {
      if (row.method !== 'get' && row.permission && CONFIGURATION_PERMISSIONS.has(row.permission)) keys.forgetWorkspace(auth.workspaceId);
    },
  };
  // One limiter for both APIs: a key's requests count once, whichever API they use.
  const limit = rateLimit(config.rateLimitPerMinute, rateLimitStore);
  const readJson = jsonBody(BODY_LIMIT_BYTES, '1 MiB');
  const app = express();
  app.disable('x-powered-by');
  // API answers are not cached by validators: an ETag would only cost a hash per response.
  app.set('etag', false);
  app.set('trust proxy', false);
  app.set('query parser', 'simple');
  app.response.json = sendJson;

  app.use(requestContext(app));
  // One line per answered request (no bodies, no headers), request metrics, the in-flight count.
  app.use((deps.observer ?? createHttpObserver({ logger, logRequests: config.logRequests, v1BasePath: BASE_PATH })).middleware);
  if (deps.probes) {
    app.get('/livez', deps.probes.live);
    app.get('/readyz', deps.probes.ready);
  }
  const spec = new StaticAsset(specText, 'application/json; charset=utf-8');
  app.get(`${BASE_PATH}/openapi.json`, (req, res, next) => {
    spec.send(req, res).catch(next);
  });
  // CORS preflight for browser integrators (the SDK runs in browsers): bearer keys only, so
  // any origin may call; no cookies are involved in v1.
  app.options(`${BASE_PATH}/*splat`, (_req, res) => {
    res.setHeader('Access-Control-Allow-Methods', 'GET, POST, PATCH, DELETE');
    res.setHeader(
      'Access-Control-Allow-Headers',
      'Authorization, Content-Type, X-Warden-Agent-Key, X-Request-Id, Idempotency-Key, Mcp-Protocol-Version, Mcp-Session-Id',
    );
    res.setHeader('Access-Control-Max-Age', '600');
    res.status(204).end();
  });

  // Each API is one pipeline: identity and rate limit come before the body parser, so that
  // every answer (a malformed body's 400 and a large body's 413 too) carries the rate-limit
  // headers; the contract validator matches the operation the router then dispatches on.
  // The MCP gateway speaks JSON-RPC over MCP's Streamable HTTP, not the contract's operations:
  // its own pipeline, in front of the contract validator (http/mcp-gateway.ts).
  // RFC 9728 metadata of the MCP endpoints: public, where a client that was refused looks first.
  app.use(protectedResourceRouter(config));
  // The built-in authorization server (RFC 8414 metadata, /authorize, /token, /register, /revoke).
  if (services.authorizationServer) app.use(authorizationServerRouter(config, services.authorizationServer));
  // Where upstreams' authorization servers send an admin back after connecting an MCP server.
  app.use(upstreamOAuthCallbackRouter(services.mcpServers));
  app.use(
    `${BASE_PATH}/mcp`,
    pipeline([
      mcpOriginGuard(config.mcpAllowedOrigins ?? []),
      mcpAuthenticate(services.workspaces, config.rateLimitPerMinute, keys, { config, check: services.accessTokens }),
      limit,
      readJson,
      inputGuard,
      mcpGatewayHandler(services.mcpGateway),
    ]),
    mcpGatewayErrors(config),
  );
  // The audit log as C2SP tlog-tiles: the format's paths, not the contract's operations (http/tlog-tiles.ts).
  app.use(
    `${BASE_PATH}${TLOG_PATH}`,
    pipeline([tlogCaching, authenticate(services.workspaces.findActiveKey, config.rateLimitPerMinute, keys), limit]),
    tlogTilesRouter(services.audit, keyHoldersLog, 'private'),
  );
  // The same for a workspace that publishes its log: no key, rate-limited per address.
  app.use(
    `${BASE_PATH}${PUBLIC_TLOG_PATH}`,
    pipeline([publicTlogCaching, limit]),
    tlogTilesRouter(services.audit, publishedLog(services.settings.isAuditLogPublic), 'public'),
  );
  app.use(
    BASE_PATH,
    pipeline([
      authenticate(services.workspaces.findActiveKey, config.rateLimitPerMinute, keys),
      limit,
      requireIdentity('/health'),
      readJson,
      inputGuard,
      ...contractValidator(loadSpec(), BASE_PATH, config.validateResponses),
      idempotency(services.idempotency, logger),
      createRouter(operations, createHandlers(services), routerOptions),
    ]),
  );
  app.use(
    DASHBOARD_API_PATH,
    pipeline([
      dashboardSession(services.sessions.resolve, config.rateLimitPerMinute),
      limit,
      requireIdentity('/session'),
      readJson,
      inputGuard,
      ...contractValidator(loadDashboardSpec(), DASHBOARD_API_PATH, config.validateResponses),
      createRouter(dashboard.dashboardOperations, createDashboardHandlers(services), { ...routerOptions, session: sessionCookie }),
    ]),
  );
  // After the APIs: a request to an API path does not walk these routers first.
  app.use(docsRouter());
  app.use(dashboardAssets());

  app.use((req, _res, next) => next(new ApiError('route_not_found', `No operation at ${req.method} ${req.path}`)));
  app.use(errorMapper(logger));
  return app;
}
