/**
 * An API's middleware chain as one Express handler. Express walks its layers for every
 * request (a path match, URL rewriting, and a closure per layer); an API's steps always run
 * in the same order on every request it serves, so they are called here directly, one after
 * the other. Semantics are Express 5's: a step calls `next()` to go on, `next(error)` (or
 * throws, or returns a rejected promise) to hand the error to the app's error handler, or
 * answers and stops; after the last step, `next()` goes on to the app's next layer.
 */
import type { NextFunction, Request, RequestHandler, Response } from 'express';

export function pipeline(steps: readonly RequestHandler[]): RequestHandler {
  return (req: Request, res: Response, done: NextFunction) => {
    let index = 0;
    const next = (error?: unknown): void => {
      const step = error ? undefined : steps[index++];
      if (!step) {
        done(error);
        return;
      }
      try {
        const result = step(req, res, next) as unknown;
        if (result instanceof Promise) result.catch(done);
      } catch (thrown) {
        done(thrown);
      }
    };
    next();
  };
}
