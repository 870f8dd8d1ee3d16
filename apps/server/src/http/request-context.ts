/**
 * Every response carries X-Request-Id, X-Response-Time and Access-Control-Allow-Origin.
 * X-Response-Time is stamped when the headers are written, so it covers the handler's work:
 * by a writeHead on the app's response prototype, which Node also calls for implicit headers
 * (test/request-context.test.ts fails if an upgrade writes headers another way).
 */
import { randomUUID } from 'node:crypto';
import type { Express, NextFunction, Request, RequestHandler, Response } from 'express';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const EXPOSED_HEADERS =
  'X-Request-Id, X-Response-Time, Retry-After, X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset, RateLimit, RateLimit-Policy, Idempotent-Replayed';

/** Installs the stamp on the app's response prototype (once, not a closure per request) and returns the middleware. */
export function requestContext(app: Express): RequestHandler {
  const writeHead = app.response.writeHead;
  app.response.writeHead = function (this: Response, ...args: Parameters<typeof writeHead>) {
    const startedAt = this.req?.startedAt;
    if (startedAt !== undefined && !this.headersSent) {
      this.setHeader('X-Response-Time', `${Math.round(performance.now() - startedAt)}ms`);
    }
    return writeHead.apply(this, args);
  } as typeof writeHead;

  return (req: Request, res: Response, next: NextFunction): void => {
    req.startedAt = performance.now();
    const incoming = req.headers['x-request-id'];
    req.requestId = typeof incoming === 'string' && UUID.test(incoming) ? incoming.toLowerCase() : randomUUID();
    res.setHeader('X-Request-Id', req.requestId);
    res.setHeader('Access-Control-Allow-Origin', '*');
    res.setHeader('Access-Control-Expose-Headers', EXPOSED_HEADERS);
    next();
  };
}
