/**
 * Input the database cannot store or that costs too much to walk is refused up front with a
 * clear 400, instead of failing deep inside: PostgreSQL text and jsonb refuse the NUL
 * character, and jsonb refuses an unpaired UTF-16 surrogate (`"\ud800"` is valid JSON, but
 * no Unicode text), so neither may appear in the path, the query or any JSON string or key.
 * Nor may a string begin with a byte order mark (U+FEFF): the embedded database stores it but
 * drops it when it reads the text back, so the value would not read back as written (and a
 * sealed audit event holding it would no longer verify). JSON may be nested at most MAX_DEPTH
 * levels. The scan is iterative, so no body can
 * exhaust the stack.
 */
import type { NextFunction, Request, Response } from 'express';
import { ApiError } from '../shared/errors.ts';

export const MAX_DEPTH = 32;

/**
 * A leading byte order mark, NUL, or an unpaired surrogate (in a `u` regular expression a
 * well-formed pair is one code point, never `Cs`): one scan per string.
 */
// biome-ignore lint/suspicious/noControlCharactersInRegex: the NUL character is exactly what is looked for
const UNSTORABLE = /^\uFEFF|[\u0000\p{Cs}]/u;

function textProblem(text: string, what: string): string | null {
  if (!UNSTORABLE.test(text)) return null;
  if (text.includes('\u0000')) return `${what} may not contain the NUL character`;
  if (text.startsWith('\uFEFF')) return `${what} may not begin with a byte order mark (U+FEFF)`;
  return `${what} may not contain an unpaired UTF-16 surrogate`;
}

function jsonProblem(root: unknown): string | null {
  // Only strings and containers can hold a problem: numbers, booleans and null are never put
  // on the stack, and array indices are not keys (so a long list of numbers costs one loop).
  const values: unknown[] = [root];
  const depths: number[] = [0];
  while (values.length > 0) {
    const value = values.pop();
    const depth = depths.pop() as number;
    if (typeof value === 'string') {
      const problem = textProblem(value, 'strings');
      if (problem) return problem;
    } else if (value !== null && typeof value === 'object') {
      if (depth >= MAX_DEPTH) return `JSON may be nested at most ${MAX_DEPTH} levels deep`;
      const list = Array.isArray(value);
      if (!list) {
        for (const key of Object.keys(value)) {
          const problem = textProblem(key, 'keys');
          if (problem) return problem;
        }
      }
      for (const child of list ? value : Object.values(value)) {
        if (typeof child === 'string' || (child !== null && typeof child === 'object')) {
          values.push(child);
          depths.push(depth + 1);
        }
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
  // The query as parsed (strings, or arrays of them). Today's parser turns malformed UTF-8 into
  // U+FFFD, so no surrogate comes through it; the walk keeps it so if the parser changes.
  const queryProblem = jsonProblem(req.query);
  if (queryProblem) {
    next(new ApiError('invalid_request', `query: ${queryProblem}`));
    return;
  }
  const problem = jsonProblem(req.body);
  next(problem ? new ApiError('invalid_request', `body: ${problem}`) : undefined);
}
