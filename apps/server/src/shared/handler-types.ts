/**
 * The types of handlers, derived from the generated contract: a handler per operationId gets
 * the operation's body, path and query with the request's context, and returns a declared
 * status with its body, so a missing handler or a wrong body/response type fails to compile.
 * One shape serves both contracts: v1 and the dashboard API.
 */
import type { dashboard, Operations } from '@warden/contract';
import type { RequestContext } from './context.ts';
import { ApiError } from './errors.ts';

export interface OperationTypes {
  data: { body?: unknown; path?: unknown; query?: unknown };
  responses: unknown;
  errors: unknown;
}

/** Statuses other than the default error response that the spec gives a body of their own (e.g. health's 503). */
type DeclaredErrors<T extends OperationTypes> = Omit<T['errors'], 'default'>;

/**
 * A body written as it is produced, for a response that the spec gives as a string of a
 * non-JSON media type (an export). The router pulls the first chunk before it sends the
 * status, so what fails early is still answered as an error.
 */
export class StreamedBody {
  constructor(
    readonly contentType: string,
    readonly chunks: AsyncIterable<string>,
    readonly headers: Readonly<Record<string, string>> = {},
  ) {}
}

/** A response body as a handler may give it: a string body may also be streamed. */
type BodyOf<B> = B extends string ? B | StreamedBody : B;

/** What a handler returns: a declared status with its body. Errors are thrown as ApiError. */
export type ReplyOf<T extends OperationTypes> =
  | { [S in keyof T['responses']]: { status: S; body: BodyOf<T['responses'][S]> } }[keyof T['responses']]
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
