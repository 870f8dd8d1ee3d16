/**
 * The HTTP server of an Express app, built so that no request or response ever has its
 * prototype changed.
 *
 * Express 5 gives every request and response its app's prototype (`Object.setPrototypeOf` in
 * `app.handle`). Changing the prototype of a live object makes V8 keep what it reaches alive
 * through the next young-generation collections: nearly every surviving young object was
 * promoted to the old space, with long scavenges and frequent mark-compacts as the result
 * (docs/decisions/0004-http-hot-path.md).
 *
 * So Node builds requests and responses as instances of subclasses whose prototypes sit in
 * front of the app's, and the app is pointed at those prototypes: the `setPrototypeOf` in
 * Express then sets the prototype an object already has, which V8 does not treat as a change.
 * Every Express method and getter is still found on the chain (subclass → app → express →
 * node:http).
 */
import { createServer, IncomingMessage, type Server, ServerResponse } from 'node:http';
import type { Express } from 'express';

export function createHttpServer(app: Express): Server {
  class AppRequest extends IncomingMessage {}
  class AppResponse extends ServerResponse {}
  Object.setPrototypeOf(AppRequest.prototype, app.request);
  Object.setPrototypeOf(AppResponse.prototype, app.response);
  app.request = AppRequest.prototype as Express['request'];
  app.response = AppResponse.prototype as Express['response'];
  return createServer({ IncomingMessage: AppRequest, ServerResponse: AppResponse }, app);
}
