/**
 * Per-key rate limits (per client address for requests without a valid key), one-minute
 * windows. Every response carries X-RateLimit-Limit/-Remaining/-Reset (seconds) and the IETF
 * RateLimit / RateLimit-Policy fields; a refused request gets 429 `rate_limited` with
 * Retry-After.
 *
 * Counters live where every server process sees them: Redis when REDIS_URL is set, else the
 * PostgreSQL database (DATABASE_URL), else process memory (the embedded database allows one
 * process anyway). If the shared store fails, each process falls back to its own in-memory
 * counters (insurance), so requests are still limited, per process, rather than refused or
 * let through unlimited.
 */
import type { NextFunction, Request, Response } from 'express';
import type { Redis } from 'ioredis';
import type pg from 'pg';
import { type RateLimiterAbstract, RateLimiterMemory, RateLimiterPostgres, RateLimiterRedis, RateLimiterRes } from 'rate-limiter-flexible';
import { ApiError } from './errors.ts';

const WINDOW_SECONDS = 60;

export interface RateLimitStore {
  redis?: Redis;
  pool?: pg.Pool;
}

function createLimiter(points: number, store: RateLimitStore): RateLimiterAbstract {
  const options = { points, duration: WINDOW_SECONDS, keyPrefix: `rl${points}` };
  const insuranceLimiter = new RateLimiterMemory(options);
  if (store.redis) return new RateLimiterRedis({ ...options, storeClient: store.redis, insuranceLimiter, rejectIfRedisNotReady: true });
  if (store.pool)
    return new RateLimiterPostgres({ ...options, storeClient: store.pool, tableName: 'rate_limits', tableCreated: true, insuranceLimiter });
  return insuranceLimiter;
}

export function rateLimit(defaultLimit: number, store: RateLimitStore = {}) {
  // One limiter per distinct limit: workspaces may override the default.
  const limiters = new Map<number, RateLimiterAbstract>();
  const limiterFor = (points: number) => {
    let limiter = limiters.get(points);
    if (!limiter) {
      limiter = createLimiter(points, store);
      limiters.set(points, limiter);
    }
    return limiter;
  };

  return async (req: Request, res: Response, next: NextFunction) => {
    const limit = req.auth?.rateLimitPerMinute ?? defaultLimit;
    const subject = req.auth ? `key:${req.auth.keyId}` : `ip:${req.ip}`;
    const setHeaders = (state: RateLimiterRes) => {
      const remaining = Math.max(0, state.remainingPoints);
      const reset = Math.max(0, Math.ceil(state.msBeforeNext / 1000));
      res.setHeader('X-RateLimit-Limit', String(limit));
      res.setHeader('X-RateLimit-Remaining', String(remaining));
      res.setHeader('X-RateLimit-Reset', String(reset));
      res.setHeader('RateLimit', `"default";r=${remaining};t=${reset}`);
      res.setHeader('RateLimit-Policy', `"default";q=${limit};w=${WINDOW_SECONDS}`);
      return reset;
    };
    try {
      setHeaders(await limiterFor(limit).consume(subject));
      next();
    } catch (rejection) {
      if (!(rejection instanceof RateLimiterRes)) return next(rejection);
      const retryAfter = Math.max(1, setHeaders(rejection));
      next(
        new ApiError('rate_limited', `Rate limit of ${limit} requests per minute exceeded`, {
          headers: { 'Retry-After': String(retryAfter) },
        }),
      );
    }
  };
}
