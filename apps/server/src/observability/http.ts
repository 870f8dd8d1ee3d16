/**
 * What the HTTP layer tells the operator about each request: one JSON log line (operation id,
 * status, duration, workspace id, key id, request id, trace id — never a header or a body),
 * the request metrics, and the count of requests in flight that a graceful shutdown waits for.
 *
 * Request lines are written at level info with WARDEN_LOG_REQUESTS=true, otherwise at debug
 * (so WARDEN_LOG_LEVEL=debug shows them too); when neither would write, no listener is added.
 */
import { context, propagation, ROOT_CONTEXT, type Span, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import type { NextFunction, Request, RequestHandler, Response } from 'express';
import type { Logger } from '../logger.ts';
import type { Metrics } from './metrics.ts';
import { createRouteLabels } from './route-labels.ts';

/** What express-openapi-validator leaves on a request whose operation it matched. */
interface MatchedOperation {
  openapi?: { schema?: { operationId?: string } };
}

export interface HttpObserver {
  readonly middleware: RequestHandler;
  /** Requests received and not yet answered (or abandoned). */
  inFlight(): number;
  /** From now on every answer closes its connection (keep-alive ends), for a shutdown. */
  startDraining(): void;
  readonly draining: boolean;
}

export interface HttpObserverOptions {
  logger: Logger;
  logRequests: boolean;
  metrics?: Metrics;
  /** A SERVER span per request (tracing.ts started the SDK), continuing an incoming traceparent. */
  tracing?: boolean;
  /** Where the API paths live (`/api/v1` → api `v1`; anything else is the dashboard's). */
  v1BasePath: string;
}

export function createHttpObserver(options: HttpObserverOptions): HttpObserver {
  const { logger, metrics } = options;
  const tracer = trace.getTracer('warden');
  const level = options.logRequests ? 'info' : 'debug';
  const routeLabel = createRouteLabels(options.v1BasePath);
  let inFlight = 0;
  let draining = false;
  /** Answers not yet sent: told to close their connection when a drain begins. */
  const unanswered = new Set<Response>();

  const middleware = (req: Request, res: Response, next: NextFunction): void => {
    inFlight++;
    if (draining) res.setHeader('Connection', 'close');
    else unanswered.add(res);
    const started = performance.now();
    const logging = logger.enabled ? logger.enabled(level) : level === 'info';
    let span: Span | undefined;
    let counted = false;
    const done = () => {
      if (counted) return;
      counted = true;
      inFlight--;
      unanswered.delete(res);
      span?.end(); // abandoned before an answer (finish ends it first otherwise)
    };
    res.once('close', done);
    if (!logging && !metrics && !options.tracing) {
      next();
      return;
    }
    res.once('finish', () => {
      const seconds = (performance.now() - started) / 1000;
      const operation = (req as MatchedOperation).openapi?.schema?.operationId;
      // what the validator did not reach (a probe, the MCP gateway, a refusal before it) is labelled by its route
      const label = operation ?? routeLabel(req.method, req.originalUrl.split('?')[0] as string);
      const status = res.statusCode;
      const traceId = span?.spanContext().traceId;
      if (span) {
        span.updateName(`${req.method} ${label}`);
        span.setAttribute('http.response.status_code', status);
        if (operation) span.setAttribute('warden.operation_id', operation);
        if (req.auth?.workspaceId) span.setAttribute('warden.workspace_id', req.auth.workspaceId);
        if (status >= 500) span.setStatus({ code: SpanStatusCode.ERROR });
      }
      done();
      if (metrics) {
        metrics.httpRequest(label, req.method, status, seconds);
        if (status === 429) metrics.rateLimited(req.originalUrl.startsWith(options.v1BasePath) ? 'v1' : 'dashboard');
      }
      if (logging) {
        const fields: Record<string, unknown> = {
          operation: operation ?? null,
          method: req.method,
          path: req.originalUrl.split('?')[0],
          status,
          durationMs: Math.round(seconds * 10_000) / 10,
          requestId: req.requestId,
          workspaceId: req.auth?.workspaceId ?? null,
          keyId: req.auth?.keyId || null,
        };
        if (req.auth?.sessionId) fields.sessionId = req.auth.sessionId;
        if (traceId) fields.traceId = traceId;
        if (level === 'info') logger.info('request', fields);
        else logger.debug?.('request', fields);
      }
    });
    if (!options.tracing) {
      next();
      return;
    }
    const parent = propagation.extract(ROOT_CONTEXT, req.headers);
    span = tracer.startSpan(
      req.method,
      {
        kind: SpanKind.SERVER,
        attributes: { 'http.request.method': req.method, 'url.path': req.originalUrl.split('?')[0], 'warden.request_id': req.requestId },
      },
      parent,
    );
    const active = trace.setSpan(parent, span);
    // The body arrives in the socket's events: bound, so what runs after it stays in this request's trace.
    context.bind(active, req);
    context.bind(active, res);
    context.with(active, next);
  };

  return {
    middleware,
    inFlight: () => inFlight,
    startDraining: () => {
      draining = true;
      // under way already: their answers end keep-alive too (those whose headers left keep it until the client ends)
      for (const res of unanswered) if (!res.headersSent) res.setHeader('Connection', 'close');
      unanswered.clear();
    },
    get draining() {
      return draining;
    },
  };
}
