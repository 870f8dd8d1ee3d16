/**
 * The HTTP server of an Express app, built so that no request or response ever has its
 * prototype changed.
 *
 * Express 5 gives every request and response its app's prototype (`Object.setPrototypeOf` in
 * `app.handle`). Changing the prototype of a live object makes V8 keep what it reaches alive
 * through the next young-generation collections: measured on Warden's decision path at
 * 1,000 requests/s, 99 % of the objects that survived a scavenge were promoted (~20 MB/s into
 * the old space), scavenges paused the event loop 4.5 ms on average instead of 0.5 ms, and a
 * 10–20 ms mark-compact followed every ~6 s. (A bare `node:http` server, or one that builds
 * its responses from a subclass, promotes ~5 KB per scavenge.) Without the change of prototype
 * (and with the sealer's keyed read, measured together) the benchmark's closed loop went from
 * 4,124 to 7,890 decisions/s (0.315 → 0.127 ms of CPU per decision).
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
