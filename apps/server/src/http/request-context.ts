/**
 * Every response carries X-Request-Id, X-Response-Time and Access-Control-Allow-Origin.
 * X-Response-Time is stamped when the headers are written, so it covers the handler's work.
 */
import { randomUUID } from 'node:crypto';
import type { NextFunction, Request, Response } from 'express';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export function requestContext(req: Request, res: Response, next: NextFunction): void {
  const started = process.hrtime.bigint();
  const incoming = req.get('x-request-id');
  req.requestId = incoming && UUID.test(incoming) ? incoming.toLowerCase() : randomUUID();
  res.setHeader('X-Request-Id', req.requestId);
  res.setHeader('Access-Control-Allow-Origin', '*');
  res.setHeader(
    'Access-Control-Expose-Headers',
    'X-Request-Id, X-Response-Time, Retry-After, X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset, RateLimit, RateLimit-Policy',
  );
  const writeHead = res.writeHead;
  res.writeHead = function (this: Response, ...args: Parameters<typeof writeHead>) {
    if (!this.headersSent) {
      this.setHeader('X-Response-Time', `${Math.round(Number(process.hrtime.bigint() - started) / 1e6)}ms`);
    }
    return writeHead.apply(this, args);
  } as typeof writeHead;
  next();
}
