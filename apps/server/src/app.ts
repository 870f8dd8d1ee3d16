/**
 * The Express application: the HTTP layer around the handlers. Order matters:
 * request id and timing → JSON body → key → rate limit → contract validation → handler →
 * the one error mapper.
 */
import express, { type Express } from 'express';
import * as OpenApiValidator from 'express-openapi-validator';
import type { Config } from './config.ts';
import type { Database } from './db/database.ts';
import { checkRules, createHandlers } from './handlers.ts';
import type { EgressGuard } from './egress/guard.ts';
import type { AuditSealer } from './features/audit/chain.ts';
import type { McpConnector } from './features/runtime/mcp-connector.ts';
import type { WebhookService } from './features/webhooks/webhooks.service.ts';
import { PolicyCache } from './features/policies/policy-cache.ts';
import { DecisionService } from './features/runtime/decisions.ts';
import { authenticate } from './http/authenticate.ts';
import { ApiError } from './http/errors.ts';
import { errorMapper } from './http/error-mapper.ts';
import { rateLimit } from './http/rate-limit.ts';
import { requestContext } from './http/request-context.ts';
import { createRouter } from './http/router.ts';
import type { Logger } from './logger.ts';
import { loadSpec, specText } from './spec.ts';

export const BASE_PATH = '/api/v1';
export const BODY_LIMIT = '1mb';

export interface AppDeps {
  config: Config;
  database: Database;
  logger: Logger;
  sealer: AuditSealer;
  egress: EgressGuard;
  mcp: McpConnector;
  webhooks: WebhookService;
}

export function createApp(deps: AppDeps): Express {
  const { config, database, logger, sealer, egress, mcp } = deps;
  const decisions = new DecisionService(database.db, new PolicyCache(database.db), sealer);
  const app = express();
  app.disable('x-powered-by');
  app.set('trust proxy', false);
  app.set('query parser', 'simple');

  app.use(requestContext);
  app.get(`${BASE_PATH}/openapi.json`, (_req, res) => {
    res.type('application/json').send(specText);
  });

  const api = express.Router();
  api.use(express.json({ limit: BODY_LIMIT }));
  api.use(authenticate(database.db, config.rateLimitPerMinute));
  api.use(rateLimit(config.rateLimitPerMinute));
  api.use((req, _res, next) => {
    // Everything but the health check needs a key; refusing here (before validation) means an
    // anonymous caller learns nothing about the shape of the API.
    if (!req.auth && req.path !== '/health') return next(new ApiError('unauthorized', 'A valid API key is required'));
    next();
  });
  app.use(BASE_PATH, api);
  app.use(
    OpenApiValidator.middleware({
      apiSpec: loadSpec() as never,
      validateApiSpec: false,
      validateRequests: { allowUnknownQueryParameters: false, coerceTypes: true },
      validateResponses: config.validateResponses ? { removeAdditional: false } : false,
      validateSecurity: false,
      ignoreUndocumented: false,
      ignorePaths: (path: string) => !path.startsWith(`${BASE_PATH}/`),
    }),
  );
  app.use(BASE_PATH, createRouter(createHandlers({ database, config, logger, sealer, decisions, checkRules, egress, mcp })));
  app.use((req, _res, next) => next(new ApiError('route_not_found', `No operation at ${req.method} ${req.path}`)));
  app.use(errorMapper(logger));
  return app;
}
