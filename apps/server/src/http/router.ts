/**
 * The adapter between Express and the handlers: each row of a generated operation table calls
 * the handler of its operationId (handler types: shared/handler-types.ts). One adapter serves
 * both contracts: v1 and the dashboard API.
 */
import type { OperationRow } from '@warden/contract';
import type { NextFunction, Request, RequestHandler, Response } from 'express';
import { ANONYMOUS, type AuthContext, type RequestContext, type SessionCookie } from '../shared/context.ts';
import { ApiError } from '../shared/errors.ts';
import { type InputOf, type OperationTypes, StreamedBody } from '../shared/handler-types.ts';
import { identityRefusal } from './context.ts';

type AnyHandler = (input: InputOf<OperationTypes>) => Promise<{ status: unknown; body: unknown }>;

/** What express-openapi-validator leaves on a request whose path and method it matched in the spec. */
interface MatchedOperation {
  openapi?: { schema?: { operationId?: string }; pathParams?: Record<string, string> };
}

export interface RouterOptions {
  /** Called after a handler succeeded and before its answer is sent. */
  onSuccess?: (row: OperationRow, auth: AuthContext) => void;
  /** The session cookie of a request, for the handlers that set it (the dashboard API's). */
  session?: (req: Request, res: Response) => SessionCookie;
  /** The origin clients reach Warden at (oauth-resource.ts publicOrigin); else the request's own. */
  origin?: (req: Request) => string;
}

/**
 * The validator in front has already matched the request against the spec (and answered 404/405
 * otherwise), so routing is a map lookup on the operationId it found rather than a second walk
 * over every route's pattern. Path parameters are the validator's (coerced and decoded).
 */
export function createRouter(
  rows: readonly OperationRow[],
  handlers: Record<string, unknown>,
  options: RouterOptions = {},
): RequestHandler {
  const byOperationId = new Map(rows.map((row) => [row.operationId as string, { row, handler: handlers[row.operationId] as AnyHandler }]));
  return async (req: Request, res: Response, next: NextFunction) => {
    const { openapi } = req as MatchedOperation;
    const operation = byOperationId.get(openapi?.schema?.operationId ?? '');
    if (!operation) return next();
    const { row, handler } = operation;
    try {
      const auth = row.authenticated ? req.auth : ANONYMOUS;
      if (!auth) throw identityRefusal(req);
      if (row.permission && !auth.permissions.has(row.permission as never)) {
        throw new ApiError('insufficient_permission', `This key lacks the permission ${row.permission}`);
      }
      const agentKey = row.agentKey ? req.get('x-warden-agent-key') : undefined;
      const origin = options.origin?.(req) ?? `${req.protocol}://${req.get('host')}`;
      const ctx: RequestContext = { requestId: req.requestId, auth, agentKey, origin };
      if (options.session) ctx.session = options.session(req, res);
      const reply = await handler({ body: req.body, path: openapi?.pathParams ?? {}, query: req.query, ctx });
      options.onSuccess?.(row, auth);
      if (reply.body instanceof StreamedBody) await sendStreamed(req, res, Number(reply.status), reply.body);
      else res.status(Number(reply.status)).json(reply.body);
    } catch (error) {
      next(error);
    }
  };
}

/**
 * Writes a streamed body: its first chunk is awaited before the status goes out (an error until
 * then is answered as one), later chunks as the socket drains. It stops when the client goes
 * away; a failure midway destroys the response, so the client sees an unfinished body rather
 * than a complete-looking one (chunked encoding never terminated).
 */
async function sendStreamed(req: Request, res: Response, status: number, body: StreamedBody): Promise<void> {
  const chunks = body.chunks[Symbol.asyncIterator]();
  let next = await chunks.next();
  res.status(status).set({ ...body.headers, 'content-type': body.contentType });
  const gone = () => res.destroyed || req.destroyed;
  try {
    while (!next.done && !gone()) {
      if (!res.write(next.value)) await drainedOrClosed(res);
      next = await chunks.next();
    }
    res.end();
  } catch (error) {
    res.destroy();
    throw error; // logged by the error mapper, which answers nothing once headers are out
  } finally {
    if (!next.done) await chunks.return?.();
  }
}

/** Resolves when `res` can take more, or is closed; leaves no listener behind. */
function drainedOrClosed(res: Response): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      res.off('drain', done);
      res.off('close', done);
      resolve();
    };
    res.on('drain', done);
    res.on('close', done);
  });
}
