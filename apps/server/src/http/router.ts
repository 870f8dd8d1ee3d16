/**
 * The typed adapter between Express and the handlers: one route per row of the generated
 * operation table, each calling the handler of its operationId. `Handlers` is derived from
 * the generated types, so a missing handler or a wrong body/response type fails to compile.
 */
import { type OperationId, type Operations, operations } from '@warden/contract';
import { type NextFunction, type Request, type Response, Router } from 'express';
import { ANONYMOUS, type RequestContext } from './context.ts';
import { ApiError } from './errors.ts';

type Data<Op extends OperationId> = Operations[Op]['data'];
type Responses<Op extends OperationId> = Operations[Op]['responses'];
/** Statuses other than the default error response that the spec gives a body of their own (e.g. health's 503). */
type DeclaredErrors<Op extends OperationId> = Omit<Operations[Op]['errors'], 'default'>;

/** What a handler returns: a declared status with its body. Errors are thrown as ApiError. */
export type Reply<Op extends OperationId> =
  | { [S in keyof Responses<Op>]: { status: S; body: Responses<Op>[S] } }[keyof Responses<Op>]
  | { [S in keyof DeclaredErrors<Op>]: { status: S; body: DeclaredErrors<Op>[S] } }[keyof DeclaredErrors<Op>];

export interface HandlerInput<Op extends OperationId> {
  body: Data<Op>['body'];
  path: Data<Op>['path'];
  query: Data<Op>['query'];
  ctx: RequestContext;
}

export type Handler<Op extends OperationId> = (input: HandlerInput<Op>) => Promise<Reply<Op>>;
export type Handlers = { [Op in OperationId]: Handler<Op> };

/** A handler whose behaviour has not landed yet: an honest 501. */
export const notImplemented = async (): Promise<never> => {
  throw new ApiError('not_implemented', 'This operation is not implemented yet');
};

const expressPath = (path: string) => path.replace(/\{(\w+)\}/g, ':$1');

export function createRouter(handlers: Handlers): Router {
  const router = Router();
  for (const row of operations) {
    const handler = handlers[row.operationId] as Handler<OperationId>;
    router[row.method](expressPath(row.path), async (req: Request, res: Response, next: NextFunction) => {
      try {
        const auth = row.authenticated ? req.auth : ANONYMOUS;
        if (!auth) throw new ApiError('unauthorized', 'A valid API key is required');
        if (row.permission && !auth.permissions.has(row.permission as never)) {
          throw new ApiError('insufficient_permission', `This key lacks the permission ${row.permission}`);
        }
        const agentKey = row.agentKey ? req.get('x-warden-agent-key') : undefined;
        const reply: { status: unknown; body: unknown } = await handler({
          body: req.body,
          path: req.params as never,
          query: req.query as never,
          ctx: { requestId: req.requestId, auth, agentKey },
        } as HandlerInput<OperationId>);
        res.status(Number(reply.status)).json(reply.body);
      } catch (error) {
        next(error);
      }
    });
  }
  return router;
}
