/**
 * Input the database cannot store or that costs too much to walk is refused up front with a
 * clear 400, instead of failing deep inside (PostgreSQL text and jsonb refuse the NUL
 * character): no NUL in the path, the query or any JSON string or key, and JSON nested at
 * most MAX_DEPTH levels. The scan is iterative, so no body can exhaust the stack.
 */
import type { NextFunction, Request, Response } from 'express';
import { ApiError } from './errors.ts';

export const MAX_DEPTH = 32;

function bodyProblem(body: unknown): string | null {
  const stack: Array<[unknown, number]> = [[body, 0]];
  while (stack.length > 0) {
    const [value, depth] = stack.pop() as [unknown, number];
    if (typeof value === 'string') {
      if (value.includes('\u0000')) return 'strings may not contain the NUL character';
    } else if (value !== null && typeof value === 'object') {
      if (depth >= MAX_DEPTH) return `JSON may be nested at most ${MAX_DEPTH} levels deep`;
      for (const [key, child] of Object.entries(value)) {
        if (key.includes('\u0000')) return 'keys may not contain the NUL character';
        stack.push([child, depth + 1]);
      }
    }
  }
  return null;
}

export function inputGuard(req: Request, _res: Response, next: NextFunction): void {
  if (/%00/i.test(req.originalUrl)) {
    next(new ApiError('invalid_request', 'the URL may not contain the NUL character'));
    return;
  }
  const problem = bodyProblem(req.body);
  next(problem ? new ApiError('invalid_request', `body: ${problem}`) : undefined);
}
