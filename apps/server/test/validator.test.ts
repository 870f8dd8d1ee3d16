/**
 * Tripwires for src/http/validator.ts's two patches of express-openapi-validator's internals
 * (docs/decisions/0004-http-hot-path.md). Each test fails when its patch is removed, and when an
 * upgrade of the validator silently stops the patch from applying (path-to-regexp bound at
 * load time, steps renamed); the first two fail when an upgrade makes a patch unneeded.
 *
 * Requests are counted where the validator reaches its routes: the `pathToRegexp` of the copy
 * of path-to-regexp it loads, counted beneath the memo (compiles) and above it (lookups).
 */
import { createRequire } from 'node:module';
import type { AddressInfo } from 'node:net';
import express, { type ErrorRequestHandler, type Request, type RequestHandler, type Response } from 'express';
import * as OpenApiValidator from 'express-openapi-validator';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHttpServer } from '../src/http/http-server.ts';
import { pipeline } from '../src/http/pipeline.ts';
import { contractValidator } from '../src/http/validator.ts';

type Compile = (path: string, options?: Record<string, unknown>) => { regexp: RegExp; keys: unknown[] };
const fromValidator = createRequire(createRequire(import.meta.url).resolve('express-openapi-validator'));
const pathToRegexp = fromValidator('path-to-regexp') as { pathToRegexp: Compile };

let compiles = 0;
const compile = pathToRegexp.pathToRegexp;
pathToRegexp.pathToRegexp = (path, options) => {
  compiles += 1;
  return compile(path, options);
};

const BASE = '/api';
const spec = {
  openapi: '3.1.0',
  info: { title: 'tripwire', version: '1.0.0' },
  servers: [{ url: BASE }],
  paths: Object.fromEntries([
    ...['alpha', 'beta', 'gamma'].map((name) => [`/${name}`, { get: { operationId: name, responses: { 200: { description: 'ok' } } } }]),
    [
      '/things/{id}',
      {
        get: {
          operationId: 'getThing',
          parameters: [{ name: 'id', in: 'path', required: true, schema: { type: 'string' } }],
          responses: { 200: { description: 'ok' } },
        },
      },
    ],
  ]),
};

/** The options contractValidator gives the validator. */
const options = {
  apiSpec: spec as never,
  validateApiSpec: false,
  validateRequests: { allowUnknownQueryParameters: false, coerceTypes: true },
  validateResponses: false,
  validateSecurity: false,
  ignoreUndocumented: false,
  ignorePaths: (path: string) => !path.startsWith(`${BASE}/`),
};

const answer: RequestHandler = (req, res) => {
  const { openapi } = req as Request & { openapi?: { schema?: { operationId?: string } } };
  res.json({ operation: openapi?.schema?.operationId ?? null, params: req.params });
};
const errors: ErrorRequestHandler = (error, _req, res, _next) => {
  res.status(error.status ?? 500).json({ error: String(error.message) });
};

const servers: ReturnType<typeof createHttpServer>[] = [];
afterAll(async () => {
  await Promise.all(servers.map((server) => new Promise((closed) => server.close(closed))));
});

async function serve(steps: RequestHandler[]) {
  const app = express();
  app.use(BASE, pipeline([...steps, answer]));
  app.use(errors);
  const server = createHttpServer(app);
  servers.push(server);
  await new Promise<void>((listening) => server.listen(0, '127.0.0.1', listening));
  const { port } = server.address() as AddressInfo;
  return async (path: string) => {
    const response = await fetch(`http://127.0.0.1:${port}${BASE}${path}`);
    expect(response.status, `GET ${path}`).toBe(200);
    return (await response.json()) as { operation: string; params: Record<string, string> };
  };
}

describe('the validator as shipped (what the patches are for)', () => {
  it('compiles routes of the spec on every request (upstream: cdimascio/express-openapi-validator#1217)', async () => {
    const get = await serve(OpenApiValidator.middleware(options) as RequestHandler[]);
    const perRequest: number[] = [];
    for (let i = 0; i < 3; i++) {
      const before = compiles;
      expect(await get('/gamma')).toEqual({ operation: 'gamma', params: {} });
      perRequest.push(compiles - before);
    }
    expect(Math.min(...perRequest), 'if no longer, the memo in validator.ts can go').toBeGreaterThan(0);
  });

  it('has the three steps that validator.ts skips or caches, under the names it looks for', () => {
    const names = (OpenApiValidator.middleware(options) as RequestHandler[]).map((step) => step.name);
    expect(names.slice(0, 3)).toEqual(['pathParamsMiddleware', 'metadataMiddleware', 'securityMiddleware']);
  });
});

describe('contractValidator', () => {
  let steps: RequestHandler[] = [];
  let lookups = 0;
  let started: ReturnType<typeof serve>;
  beforeAll(() => {
    // After the tests above: lookups are counted above the memo, which contractValidator
    // installs over the counter of compiles.
    steps = contractValidator(spec, BASE, false);
    const memoised = pathToRegexp.pathToRegexp;
    pathToRegexp.pathToRegexp = (path, routeOptions) => {
      lookups += 1;
      return memoised(path, routeOptions);
    };
    started = serve(steps);
  });

  it('compiles each route once, not on every request (memoised path-to-regexp)', async () => {
    const get = await started;
    expect(await get('/things/a')).toEqual({ operation: 'getThing', params: { id: 'a' } });
    const compiled = compiles;
    const looked = lookups;
    for (const id of ['b', 'c', 'd']) expect(await get(`/things/${id}`)).toEqual({ operation: 'getThing', params: { id } });
    expect(lookups - looked, 'the validator looks each request with a path parameter up, through the memo').toBeGreaterThanOrEqual(3);
    expect(compiles - compiled, 'and compiles nothing more').toBe(0);
  });

  it('looks the operation of a fixed path up on its first request only (metadata step kept per fixed path)', async () => {
    const get = await started;
    expect(await get('/beta')).toEqual({ operation: 'beta', params: {} });
    const looked = lookups;
    for (let i = 0; i < 3; i++) expect(await get('/beta')).toEqual({ operation: 'beta', params: {} });
    expect(lookups - looked).toBe(0);
  });

  it('passes requests on at once through the path-params and security steps once they have passed one', async () => {
    const get = await started;
    await get('/alpha');
    const names = (OpenApiValidator.middleware(options) as RequestHandler[]).map((step) => step.name);
    for (const name of ['pathParamsMiddleware', 'securityMiddleware']) {
      const step = steps[names.indexOf(name)] as RequestHandler;
      let passedOn = false;
      // The validator's own step awaits the loaded spec first: it would call next later.
      step({} as Request, {} as Response, () => {
        passedOn = true;
      });
      expect(passedOn, name).toBe(true);
    }
  });
});
