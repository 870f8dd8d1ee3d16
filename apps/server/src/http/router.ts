/**
 * The typed adapter between Express and the handlers: each row of a generated operation
 * table calls the handler of its operationId. Handler types are derived
 * from the generated types, so a missing handler or a wrong body/response type fails to
 * compile. One adapter serves both contracts: v1 and the dashboard API.
 */
import type { dashboard, OperationRow, Operations } from '@warden/contract';
import type { NextFunction, Request, RequestHandler, Response } from 'express';
import { ANONYMOUS, type AuthContext, identityRefusal, type RequestContext } from './context.ts';
import { ApiError } from './errors.ts';

interface OperationTypes {
  data: { body?: unknown; path?: unknown; query?: unknown };
  responses: unknown;
  errors: unknown;
}

/** Statuses other than the default error response that the spec gives a body of their own (e.g. health's 503). */
type DeclaredErrors<T extends OperationTypes> = Omit<T['errors'], 'default'>;

/** What a handler returns: a declared status with its body. Errors are thrown as ApiError. */
export type ReplyOf<T extends OperationTypes> =
  | { [S in keyof T['responses']]: { status: S; body: T['responses'][S] } }[keyof T['responses']]
  | { [S in keyof DeclaredErrors<T>]: { status: S; body: DeclaredErrors<T>[S] } }[keyof DeclaredErrors<T>];

export interface InputOf<T extends OperationTypes> {
  body: T['data']['body'];
  path: T['data']['path'];
  query: T['data']['query'];
  ctx: RequestContext;
}

export type HandlersOf<Ops> = {
  [Op in keyof Ops]: Ops[Op] extends OperationTypes ? (input: InputOf<Ops[Op]>) => Promise<ReplyOf<Ops[Op]>> : never;
};

/** The v1 handler map. */
export type Handlers = HandlersOf<Operations>;
/** The dashboard API's handler map. */
export type DashboardHandlers = HandlersOf<dashboard.DashboardOperations>;

/** A handler whose behaviour has not landed yet: an honest 501. */
export const notImplemented = async (): Promise<never> => {
  throw new ApiError('not_implemented', 'This operation is not implemented yet');
};

type AnyHandler = (input: InputOf<OperationTypes>) => Promise<{ status: unknown; body: unknown }>;

/** What express-openapi-validator leaves on a request whose path and method it matched in the spec. */
interface MatchedOperation {
  openapi?: { schema?: { operationId?: string }; pathParams?: Record<string, string> };
}

export interface RouterOptions {
  /** Called after a handler succeeded and before its answer is sent. */
  onSuccess?: (row: OperationRow, auth: AuthContext) => void;
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
      const reply = await handler({
        body: req.body,
        path: openapi?.pathParams ?? {},
        query: req.query,
        ctx: { requestId: req.requestId, auth, agentKey, res },
      });
      options.onSuccess?.(row, auth);
      res.status(Number(reply.status)).json(reply.body);
    } catch (error) {
      next(error);
    }
  };
}
