/**
 * Contract validation of requests (always) and responses (in tests and development) by
 * express-openapi-validator, from the bundled spec.
 *
 * The validator finds each request's operation by compiling every route of the spec with
 * path-to-regexp, on every request (openapi.metadata.js `lookupRoute`; upstream fix pending:
 * cdimascio/express-openapi-validator#1217), a visible share of the server's CPU under load
 * (docs/decisions/0004-http-hot-path.md). The routes are fixed for the life of the process, so
 * the compiled form is memoised here, on the copy of path-to-regexp the validator itself
 * loads. A compiled route is a plain value ({ regexp, keys }; the regexp has no `g` or `y`
 * flag, so it keeps no state between uses).
 *
 * Both patches (this memo and withoutRepeatedWork below) lean on the validator's internals:
 * test/validator.test.ts fails when either stops applying, e.g. after an upgrade.
 */
import { createHash } from 'node:crypto';
import { createRequire } from 'node:module';
import type { NextFunction, Request, RequestHandler, Response } from 'express';
import * as OpenApiValidator from 'express-openapi-validator';
import { ApiError } from '../shared/errors.ts';

type PathToRegexp = (path: string, options?: Record<string, unknown>) => { regexp: RegExp; keys: unknown[] };

function memoisePathToRegexp(): void {
  const requireFromValidator = createRequire(createRequire(import.meta.url).resolve('express-openapi-validator'));
  const module = requireFromValidator('path-to-regexp') as { pathToRegexp: PathToRegexp & { memoised?: true } };
  if (module.pathToRegexp.memoised) return;
  const compile = module.pathToRegexp;
  const compiled = new Map<string, ReturnType<PathToRegexp>>();
  const memoised = Object.assign(
    (path: string, options?: Record<string, unknown>) => {
      // The validator passes a string path and { sensitive, strict }; anything else compiles as before.
      if (typeof path !== 'string' || (options && Object.keys(options).some((name) => name !== 'sensitive' && name !== 'strict'))) {
        return compile(path, options);
      }
      const key = `${options?.sensitive ? 's' : '-'}${options?.strict ? 's' : '-'}${path}`;
      let result = compiled.get(key);
      if (!result) {
        result = compile(path, options);
        compiled.set(key, result);
      }
      return result;
    },
    { memoised: true as const },
  );
  module.pathToRegexp = memoised;
}

/**
 * Validators already built in this process, by spec, base path and response checking: a second
 * server of the same contract (tests start one per file in each worker process) reuses the
 * first's, with the schemas it has compiled, instead of dereferencing the spec and compiling
 * them again (0.3–0.8 s of CPU per server start). The validator keeps no state of its app.
 */
const built = new Map<string, RequestHandler[]>();

export function contractValidator(apiSpec: Record<string, unknown>, basePath: string, validateResponses: boolean): RequestHandler[] {
  const key = `${basePath}\0${validateResponses}\0${createHash('sha256').update(JSON.stringify(apiSpec)).digest('hex')}`;
  let handlers = built.get(key);
  if (!handlers) {
    handlers = newContractValidator(apiSpec, basePath, validateResponses);
    built.set(key, handlers);
  }
  return handlers;
}

function newContractValidator(apiSpec: Record<string, unknown>, basePath: string, validateResponses: boolean): RequestHandler[] {
  memoisePathToRegexp();
  const validator = OpenApiValidator.middleware({
    apiSpec: apiSpec as never,
    validateApiSpec: false,
    validateRequests: { allowUnknownQueryParameters: false, coerceTypes: true },
    validateResponses: validateResponses ? { removeAdditional: false } : false,
    validateSecurity: false,
    ignoreUndocumented: false,
    ignorePaths: (path: string) => !path.startsWith(`${basePath}/`),
  });
  return [...withoutRepeatedWork(validator as RequestHandler[]), finiteQueryNumbers];
}

/** Fixed paths (no path parameters) whose operation metadata is kept; a bound, since case and trailing-slash variants match too. */
const MAX_KNOWN_PATHS = 256;

/**
 * The validator's steps, minus the work that gives the same result on every request. Each of
 * its steps first awaits the loaded spec (a promise hop each), and its metadata step looks the
 * operation up by matching the path against every route of the spec, in order (a visible share
 * of the CPU per decision, with the hops; docs/decisions/0004-http-hot-path.md). So, by their
 * names in the pinned express-openapi-validator (a step not recognised is kept as is):
 * - `pathParamsMiddleware` installs path-parameter hooks on its first request, and
 *   `securityMiddleware` passes every request on (security is checked by our own identity step,
 *   `validateSecurity: false`): once either has passed a request on, it is skipped;
 * - `metadataMiddleware`'s answer for a fixed path (one with no path parameters) depends on the
 *   method and the path only: it is kept per "METHOD path" and set again on later requests.
 * Request validation itself (and response validation in tests) runs on every request.
 */
function withoutRepeatedWork(steps: RequestHandler[]): RequestHandler[] {
  return steps.map((step) => {
    if (step.name === 'pathParamsMiddleware' || step.name === 'securityMiddleware') return untilPassedOnce(step);
    if (step.name === 'metadataMiddleware') return withKnownPaths(step);
    return step;
  });
}

function untilPassedOnce(step: RequestHandler): RequestHandler {
  let passed = false;
  return (req, res, next) => {
    if (passed) return next();
    return step(req, res, (error?: unknown) => {
      if (!error) passed = true;
      next(error);
    });
  };
}

/** What the metadata step leaves on a matched request (OpenApiRequestMetadata, plus `_responseSchema` when responses are validated). */
type OperationMetadata = { pathParams?: Record<string, string> } & Record<string, unknown>;
type MatchedRequest = Request & { openapi?: OperationMetadata };

function withKnownPaths(step: RequestHandler): RequestHandler {
  const known = new Map<string, OperationMetadata>();
  return (request, res, next) => {
    const req = request as MatchedRequest;
    const query = req.originalUrl.indexOf('?');
    const key = `${req.method} ${query === -1 ? req.originalUrl : req.originalUrl.slice(0, query)}`;
    const metadata = known.get(key);
    if (metadata) {
      const pathParams = {};
      req.openapi = { ...metadata, pathParams };
      req.params = pathParams;
      return next();
    }
    return step(req, res, (error?: unknown) => {
      const found = req.openapi;
      if (!error && found && Object.keys(found.pathParams ?? {}).length === 0 && known.size < MAX_KNOWN_PATHS) known.set(key, { ...found });
      next(error);
    });
  };
}

/**
 * Runs right after the validator. With type coercion, ajv turns a query value such as
 * `1e999` or `Infinity` into an infinite number and then skips the number's checks
 * (`minimum`, `maximum`, `format`), which apply to finite numbers only: `limit=Infinity`
 * would pass as valid. Any number in the validated query must therefore be finite.
 */
function finiteQueryNumbers(req: Request, _res: Response, next: NextFunction): void {
  for (const [name, value] of Object.entries(req.query)) {
    if (typeof value === 'number' && !Number.isFinite(value)) {
      next(new ApiError('invalid_request', `/query/${name} must be a finite number`));
      return;
    }
  }
  next();
}
