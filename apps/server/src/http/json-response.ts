/**
 * How every JSON answer is written: installed as the app's `res.json`, so the router, the
 * error mapper and the response validator (which wraps `res.json` in tests) all use it.
 *
 * Express's own `res.json` goes through `res.send`, which parses and re-formats the
 * Content-Type, turns the text into a Buffer and so writes headers and body in two chunks;
 * none of its other work (ETag, JSON settings, freshness) applies to this API. Writing the
 * text directly sends headers and body in one write, for less CPU per answer
 * (docs/decisions/0004-http-hot-path.md).
 */
import type { Response } from 'express';

const NO_BODY = new Set([204, 304]);

export function sendJson(this: Response, body: unknown): Response {
  if (NO_BODY.has(this.statusCode)) {
    this.removeHeader('Content-Type');
    this.end();
    return this;
  }
  const text = JSON.stringify(body) ?? '';
  if (!this.hasHeader('Content-Type')) this.setHeader('Content-Type', 'application/json; charset=utf-8');
  this.setHeader('Content-Length', Buffer.byteLength(text));
  this.end(this.req.method === 'HEAD' ? undefined : text);
  return this;
}
