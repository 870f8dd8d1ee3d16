/**
 * Calls typed by the contract: the method and path of a test's request pick the operation
 * from the generated operation types (`@warden/contract`, hey-api's `XxxData` /
 * `XxxResponses`), which then types the request body, the query and the answer's body.
 *
 *   const res = await server.api('POST', '/agents', { body: { name: 'Bot', provider: 'local' } });
 *   res.body.data.slug; // string: the body is CreateAgentResponses[201], i.e. AgentResponse
 *   await server.api('PATCH', `/agents/${id}`, { body: { status: 'inactive' } }); // '/agents/{id}'
 *   await server.api('GET', '/agents?limit=2'); // a query string may follow any path
 *   await server.api('GET', '/agents', { query: { limit: 2, status: 'active' } }); // or a typed query
 *
 * Deliberately invalid input stays possible, and visible: `raw` sends a string as is (e.g. a
 * malformed JSON body), and `unchecked: true` drops every check for that call (a body of the
 * wrong shape, a method or a path that the contract does not have, such as /dashboard/api,
 * /mcp or /no-such-route) and answers a body typed `any`.
 *
 * The decision on answers: a response's `body` is typed as the operation's documented success
 * body (every operation has exactly one success status) together with the error envelope
 * `{ error: { code, message } }`, whatever the status. Narrowing on `status` would need an
 * assertion function at every call, and most tests check an error code right after a status
 * (`expect(res.status).toBe(409); expect(res.body.error.code).toBe('conflict')`): a union of
 * success and error bodies would make each of those reads a type error. So reading `body.data`
 * of an error answer, or `body.error` of a success, is caught at run time by the assertion on
 * `status`, as before; everything else — a field the contract does not document, a misspelt
 * property, a wrong request body, a path or method that no operation has — fails the type
 * check. Request bodies, queries, paths and methods are checked strictly. Fields the contract
 * documents as nullable stay nullable: a test that knows an `approval_id` is there says so (`!`).
 *
 * The same typing serves the dashboard API (`DashboardSession.api`, from `dashboardLogin`) and
 * a server's API under another key (`withKey(server, key)`).
 */
import type { dashboard, Error as ErrorBody, Operations } from '@warden/contract';

type DashboardOperations = dashboard.DashboardOperations;

export type HttpMethod = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';

/** '/agents/{id}' → `/agents/${string}`: what a test writes as `/agents/${id}`. */
type PathPattern<T extends string> = T extends `${infer Head}{${string}}${infer Tail}` ? `${Head}${string}${PathPattern<Tail>}` : T;

interface OperationTypes {
  method: HttpMethod;
  data: { body?: unknown; query?: unknown; url: string };
  responses: object;
}

/** One row per operation of the generated contract: its method, its path pattern and its types. */
type RoutesOf<Ops extends { [K in keyof Ops]: OperationTypes }> = {
  [Id in keyof Ops]: {
    id: Id;
    method: Ops[Id]['method'];
    pattern: PathPattern<Ops[Id]['data']['url']>;
    data: Ops[Id]['data'];
    responses: Ops[Id]['responses'];
  };
}[keyof Ops];

export type V1Route = RoutesOf<Operations>;
export type DashboardRoute = RoutesOf<DashboardOperations>;
type AnyRoute = { method: HttpMethod; pattern: string; data: OperationTypes['data']; responses: object };

/**
 * A path of an operation with this method; a GET's optionally followed by a query string (only
 * reads take one: with the query variants of every method's routes, a route with a parameter
 * inside its path, `/mcp-servers/{id}/oauth/connect`, made each call too deep for the compiler).
 */
export type PathOf<R extends AnyRoute, M extends HttpMethod> = R extends { method: M }
  ? M extends 'GET'
    ? R['pattern'] | `${R['pattern']}?${string}`
    : R['pattern']
  : never;

type WithoutQuery<P extends string> = P extends `${infer Path}?${string}` ? Path : P;

/** The operations whose pattern matches; when several do (`/webhooks/{id}` and `/webhooks/{id}/deliveries`), the most specific. */
type Candidates<R extends AnyRoute, M extends HttpMethod, P extends string> = R extends { method: M }
  ? WithoutQuery<P> extends R['pattern']
    ? R
    : never
  : never;
type MostSpecific<C extends AnyRoute, All extends AnyRoute = C> = C extends AnyRoute
  ? [StrictlyNarrower<Exclude<All, C>, C['pattern']>] extends [never]
    ? C
    : never
  : never;
type StrictlyNarrower<R extends AnyRoute, Pattern extends string> = R extends AnyRoute
  ? R['pattern'] extends Pattern
    ? Pattern extends R['pattern']
      ? never
      : R
    : never
  : never;
/** The operation of a path (of each member, when the path is a union, e.g. a helper's parameter). */
export type RouteOf<R extends AnyRoute, M extends HttpMethod, P extends string> = P extends string
  ? MostSpecific<Candidates<R, M, P>>
  : never;

/** The envelope of every error answer (`Error` in the spec). */
export type ErrorEnvelope = ErrorBody;

/** The documented success body (one per operation), with the error envelope for error answers: see the decision above. */
export type ResponseBody<R extends AnyRoute> = R['responses'][keyof R['responses']] & ErrorEnvelope;

interface CommonOptions {
  /** The API key (the server's bootstrap key unless given; null sends none). */
  key?: string | null;
  headers?: Record<string, string>;
  /** Abort the call after this long (for servers a test kills or stops). */
  timeoutMs?: number;
}

type BodyOptions<D> = D extends { body: infer B }
  ? // the operation requires a body: this one, or a raw string sent as is
    { body: B; raw?: never } | { raw: string; body?: never }
  : D extends { body?: infer B }
    ? [B] extends [never] | [undefined]
      ? { body?: never; raw?: string }
      : { body?: B; raw?: never } | { raw: string; body?: never }
    : { body?: never; raw?: string };

type QueryOptions<D> = D extends { query?: infer Q }
  ? [Q] extends [never] | [undefined]
    ? { query?: never }
    : { query?: Q }
  : { query?: never };

export type TypedOptions<R extends AnyRoute> = CommonOptions & BodyOptions<R['data']> & QueryOptions<R['data']> & { unchecked?: false };

/** The options are optional unless the operation requires a body. */
export type OptionsArgs<R extends AnyRoute> = [R] extends [never]
  ? [options?: never]
  : R['data'] extends { body: unknown }
    ? [options: TypedOptions<R>]
    : [options?: TypedOptions<R>];

/** Escape hatch: any method, path and body; the answer's body is `any`. */
export interface UncheckedOptions extends CommonOptions {
  unchecked: true;
  body?: unknown;
  /** A raw body, sent as is (with its own content type in headers). */
  raw?: string;
  query?: object;
}

export interface ApiResponse<Body = any> {
  status: number;
  body: Body;
  headers: Headers;
}

/** `server.api(...)`: typed by the contract, or `unchecked: true`. */
export interface TypedApi<Routes extends AnyRoute> {
  (method: string, path: string, options: UncheckedOptions): Promise<ApiResponse<any>>;
  <M extends HttpMethod, P extends PathOf<Routes, M>>(
    method: M,
    path: P,
    ...options: OptionsArgs<RouteOf<Routes, M, P>>
  ): Promise<ApiResponse<ResponseBody<RouteOf<Routes, M, P>>>>;
}

/** What the runtime part of a call takes, typed or not. */
export interface RequestOptions extends CommonOptions {
  body?: unknown;
  raw?: string;
  query?: object;
  unchecked?: boolean;
}

/** The path with the `query` option appended (arrays repeat the parameter). */
export function withQuery(path: string, query: object | undefined): string {
  if (!query) return path;
  const params = new URLSearchParams();
  for (const [name, value] of Object.entries(query)) {
    if (value === undefined) continue;
    for (const item of Array.isArray(value) ? value : [value]) params.append(name, String(item));
  }
  const qs = params.toString();
  if (!qs) return path;
  return `${path}${path.includes('?') ? '&' : '?'}${qs}`;
}
