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
 *
 * Quota is taken from the store in leases (see QuotaLeases), not one request at a time.
 */
import type { NextFunction, Request, Response } from 'express';
import type { Redis } from 'ioredis';
import type pg from 'pg';
import { type RateLimiterAbstract, RateLimiterMemory, RateLimiterPostgres, RateLimiterRedis, RateLimiterRes } from 'rate-limiter-flexible';
import { ApiError } from '../shared/errors.ts';

const WINDOW_SECONDS = 60;

export interface RateLimitStore {
  redis?: Redis;
  pool?: pg.Pool;
}

/** A counter of `points` per `duration` seconds in the shared store (with in-memory insurance). */
export function createStoreLimiter(
  points: number,
  store: RateLimitStore,
  duration = WINDOW_SECONDS,
  keyPrefix = `rl${points}`,
): RateLimiterAbstract {
  const options = { points, duration, keyPrefix };
  const insuranceLimiter = new RateLimiterMemory(options);
  if (store.redis) return new RateLimiterRedis({ ...options, storeClient: store.redis, insuranceLimiter, rejectIfRedisNotReady: true });
  if (store.pool)
    return new RateLimiterPostgres({ ...options, storeClient: store.pool, tableName: 'rate_limits', tableCreated: true, insuranceLimiter });
  return insuranceLimiter;
}

export interface RateDecision {
  allowed: boolean;
  /** Requests left in the window for this subject. */
  remaining: number;
  msBeforeReset: number;
}

/** At most this many requests' worth of quota is leased at once. */
const MAX_LEASE = 256;
/** A lease takes at most this fraction of what is left of the quota, so the last requests of a window go one by one. */
const LEASE_SHARE = 16;
/** Subjects whose lease state a process keeps (beyond, expired states are dropped, then all). */
const MAX_SUBJECTS = 100_000;

interface Lease {
  /** When the store's window ends (local clock). */
  windowEndsAt: number;
  /** Requests the store has counted for the subject (all processes), as of this process's last lease. */
  counted: number;
  /** Leased and not yet used by this process. */
  tokens: number;
  /** The next lease's size: doubles while the subject keeps using them up. */
  nextSize: number;
  /** Requests waiting for the lease in flight. */
  waiting: number;
  inFlight?: Promise<void>;
}

/**
 * Takes quota from the shared store in leases and hands it out in process. Asking the store
 * for every request cost a round trip to Redis (or an upsert in PostgreSQL) per request
 * (docs/decisions/0005-rate-limit-quota-leases.md). A subject's first request of a window
 * leases 1; each further lease doubles while the leases get used, up to MAX_LEASE and to
 * 1/LEASE_SHARE of what is left of the quota.
 *
 * Never more than the limit is admitted in a window, in total over all processes: every
 * admitted request holds a unit the store counted within the limit. In one process the count
 * is exact (Remaining too). With several processes, quota one process has leased but not used
 * is not available to the others: a subject sending its requests to several processes at once
 * may be refused that much early — at most 1/LEASE_SHARE of what was left, per process, and the
 * last requests of a window are leased one at a time. Refusals err that way, never the other.
 */
export class QuotaLeases {
  private readonly leases = new Map<string, Lease>();

  constructor(
    private readonly store: RateLimiterAbstract,
    readonly limit: number,
  ) {}

  /** A decision now when this process holds quota (or knows the window is used up), else after a lease. */
  consume(subject: string, now = Date.now()): RateDecision | Promise<RateDecision> {
    let lease = this.leases.get(subject);
    if (lease && !lease.inFlight && now >= lease.windowEndsAt) {
      this.leases.delete(subject);
      lease = undefined;
    }
    if (lease) {
      if (lease.tokens > 0) {
        lease.tokens -= 1;
        return this.decision(lease, true, now);
      }
      if (lease.counted >= this.limit) return this.decision(lease, false, now);
      const { inFlight } = lease;
      if (inFlight) {
        const waited = lease;
        waited.waiting += 1;
        return inFlight.then(() => {
          waited.waiting -= 1;
          return this.consume(subject);
        });
      }
    }
    return this.lease(subject, lease);
  }

  private async lease(subject: string, previous: Lease | undefined): Promise<RateDecision> {
    const counted = previous?.counted ?? 0;
    const size = Math.max(1, Math.min(previous?.nextSize ?? 1, MAX_LEASE, Math.floor((this.limit - counted) / LEASE_SHARE)));
    // A new lease's window is known once the store answers; until then it holds the subject's place.
    const lease: Lease = previous ?? { windowEndsAt: Number.POSITIVE_INFINITY, counted, tokens: 0, nextSize: 1, waiting: 0 };
    const request = size + lease.waiting;
    let settle!: () => void;
    lease.inFlight = new Promise((resolve) => {
      settle = resolve;
    });
    if (!previous) this.remember(subject, lease);
    // The window's end as the store counts it from when it was asked: the local window may end
    // early (a lease more), never late (old-window quota spent in the next window).
    const askedAt = Date.now();
    try {
      let answer: RateLimiterRes;
      try {
        answer = await this.store.consume(subject, request);
      } catch (refusal) {
        if (!(refusal instanceof RateLimiterRes)) throw refusal;
        answer = refusal; // over the limit: only what was left of it is ours
      }
      const counted = answer.consumedPoints;
      const granted = Math.max(0, Math.min(request, this.limit - (counted - request)));
      lease.windowEndsAt = askedAt + answer.msBeforeNext;
      lease.counted = counted;
      lease.tokens += granted;
      lease.nextSize = Math.min(MAX_LEASE, request * 2);
    } catch (error) {
      if (this.leases.get(subject) === lease) this.leases.delete(subject);
      throw error;
    } finally {
      lease.inFlight = undefined;
      settle();
    }
    const allowed = lease.tokens > 0;
    if (allowed) lease.tokens -= 1;
    return this.decision(lease, allowed, Date.now());
  }

  private decision(lease: Lease, allowed: boolean, now: number): RateDecision {
    return {
      allowed,
      remaining: Math.max(0, this.limit - lease.counted) + lease.tokens,
      msBeforeReset: Math.max(0, lease.windowEndsAt - now),
    };
  }

  private remember(subject: string, lease: Lease): void {
    if (this.leases.size >= MAX_SUBJECTS) {
      // Full: drop the ended windows, and if that frees less than a tenth, every lease not in
      // flight (forgetting leased quota only refuses early, never admits more). Either way the
      // next sweep is at least MAX_SUBJECTS / 10 new subjects away, so many new subjects (one
      // address after another) cannot make every request pay a full sweep.
      const now = Date.now();
      for (const [key, held] of this.leases) if (now >= held.windowEndsAt && !held.inFlight) this.leases.delete(key);
      if (this.leases.size > MAX_SUBJECTS * 0.9) for (const [key, held] of this.leases) if (!held.inFlight) this.leases.delete(key);
    }
    this.leases.set(subject, lease);
  }
}

export function rateLimit(defaultLimit: number, store: RateLimitStore = {}) {
  // One limiter per distinct limit: workspaces may override the default.
  const limiters = new Map<number, QuotaLeases>();
  const limiterFor = (points: number) => {
    let limiter = limiters.get(points);
    if (!limiter) {
      limiter = new QuotaLeases(createStoreLimiter(points, store), points);
      limiters.set(points, limiter);
    }
    return limiter;
  };

  return (req: Request, res: Response, next: NextFunction): void => {
    const limit = req.auth?.rateLimitPerMinute ?? defaultLimit;
    const subject = req.auth ? `key:${req.auth.keyId}` : `ip:${req.ip}`;
    const answer = (decision: RateDecision) => {
      const reset = Math.ceil(decision.msBeforeReset / 1000);
      res.setHeader('X-RateLimit-Limit', String(limit));
      res.setHeader('X-RateLimit-Remaining', String(decision.remaining));
      res.setHeader('X-RateLimit-Reset', String(reset));
      res.setHeader('RateLimit', `"default";r=${decision.remaining};t=${reset}`);
      res.setHeader('RateLimit-Policy', `"default";q=${limit};w=${WINDOW_SECONDS}`);
      if (decision.allowed) {
        next();
        return;
      }
      next(
        new ApiError('rate_limited', `Rate limit of ${limit} requests per minute exceeded`, {
          headers: { 'Retry-After': String(Math.max(1, reset)) },
        }),
      );
    };
    const decision = limiterFor(limit).consume(subject);
    if (decision instanceof Promise) decision.then(answer, next);
    else answer(decision);
  };
}
