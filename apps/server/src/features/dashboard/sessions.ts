/**
 * Dashboard sessions: opened with a workspace API key holding `admin`; the browser keeps only
 * a random session token in an HttpOnly, SameSite=Strict cookie (Secure except on localhost).
 * State-changing requests must also echo the session's CSRF token in X-CSRF-Token.
 */
import { randomBytes, randomUUID, timingSafeEqual } from 'node:crypto';
import type { Permission } from '@warden/contract';
import type { NextFunction, Request, Response } from 'express';
import { type Kysely, sql } from 'kysely';
import { type RateLimiterAbstract, RateLimiterRes } from 'rate-limiter-flexible';
import type { DB } from '../../db/schema.ts';
import { keyIdentity } from '../../http/context.ts';
import { ApiError } from '../../http/errors.ts';
import { createStoreLimiter, type RateLimitStore } from '../../http/rate-limit.ts';
import { findActiveKeyByHash } from '../workspaces/workspaces.repository.ts';
import { displayPrefix, hashSecret } from '../workspaces/workspaces.service.ts';

export const SESSION_COOKIE = 'warden_session';
export const SESSION_HOURS = 8;
/** Sessions one key may hold; a login ends the oldest beyond. */
export const MAX_SESSIONS_PER_KEY = 10;
/** Failed logins allowed per client address, and per key prefix, in LOGIN_WINDOW_S. */
export const MAX_FAILED_LOGINS = 10;
const LOGIN_WINDOW_S = 15 * 60;
const LOCAL_HOSTS = new Set(['localhost', '127.0.0.1', '::1', '[::1]']);

export const readSessionCookie = (req: Request) => readCookie(req, SESSION_COOKIE);

function readCookie(req: Request, name: string): string | undefined {
  for (const part of (req.headers.cookie ?? '').split(';')) {
    const [key, ...value] = part.trim().split('=');
    if (key === name) return decodeURIComponent(value.join('='));
  }
  return undefined;
}

export function setSessionCookie(req: Request, res: Response, token: string | null): void {
  const secure = req.secure || !LOCAL_HOSTS.has(req.hostname);
  const attributes = [
    'Path=/dashboard',
    'HttpOnly',
    'SameSite=Strict',
    `Max-Age=${token ? SESSION_HOURS * 3600 : 0}`,
    ...(secure ? ['Secure'] : []),
  ];
  res.append('Set-Cookie', `${SESSION_COOKIE}=${token ?? ''}; ${attributes.join('; ')}`);
}

/**
 * Opens a session for `apiKey`, ending the session the browser sent (`replacing`): a login
 * always gets a new token and CSRF token. It also clears expired sessions, and keeps the key's
 * newest MAX_SESSIONS_PER_KEY.
 */
export async function openSession(db: Kysely<DB>, apiKey: string, replacing: string | undefined) {
  const key = await findActiveKeyByHash(db, hashSecret(apiKey));
  if (!key) throw new ApiError('unauthorized', 'A valid API key is required');
  if (!key.permissions.includes('admin'))
    throw new ApiError('insufficient_permission', 'The dashboard needs a key with the admin permission');
  const token = randomBytes(32).toString('base64url');
  const csrf = randomBytes(24).toString('base64url');
  await db.transaction().execute(async (trx) => {
    await trx.deleteFrom('dashboard_sessions').where('expires_at', '<=', sql<Date>`now()`).execute();
    if (replacing) await trx.deleteFrom('dashboard_sessions').where('token_hash', '=', hashSecret(replacing)).execute();
    await trx
      .insertInto('dashboard_sessions')
      .values({
        workspace_id: key.workspace_id,
        id: randomUUID(),
        token_hash: hashSecret(token),
        key_id: key.id,
        csrf_token: csrf,
        expires_at: new Date(Date.now() + SESSION_HOURS * 3600_000),
      })
      .execute();
    const ofKey = trx
      .selectFrom('dashboard_sessions')
      .select('id')
      .where('workspace_id', '=', key.workspace_id)
      .where('key_id', '=', key.id);
    await trx
      .deleteFrom('dashboard_sessions')
      .where('workspace_id', '=', key.workspace_id)
      .where('key_id', '=', key.id)
      .where('id', 'not in', ofKey.orderBy('created_at', 'desc').orderBy('id', 'desc').limit(MAX_SESSIONS_PER_KEY))
      .execute();
  });
  return { token, csrf, workspaceId: key.workspace_id, keyId: key.id };
}

/**
 * Limits failed logins per client address and per key prefix (what key listings show of a
 * key), in the rate limits' shared store, so every server process counts them. Past the limit
 * a login answers 429 without the key being checked, so a refusal reveals nothing. Each
 * attempt is counted before the key is checked (parallel guesses cannot overrun the limit) and
 * given back unless the key was wrong.
 */
export class LoginGuard {
  private readonly failures: RateLimiterAbstract;

  constructor(store: RateLimitStore) {
    this.failures = createStoreLimiter(MAX_FAILED_LOGINS, store, LOGIN_WINDOW_S, 'login');
  }

  async attempt<T>(address: string, apiKey: string, login: () => Promise<T>): Promise<T> {
    // The address first: one address cannot count failures against many prefixes.
    const subjects = [`ip:${address}`, `prefix:${displayPrefix(apiKey)}`];
    const counted: string[] = [];
    const giveBack = () => Promise.all(counted.map((subject) => this.failures.reward(subject)));
    for (const subject of subjects) {
      try {
        await this.failures.consume(subject);
        counted.push(subject);
      } catch (refusal) {
        if (!(refusal instanceof RateLimiterRes)) throw refusal;
        await giveBack();
        const seconds = Math.max(1, Math.ceil(refusal.msBeforeNext / 1000));
        throw new ApiError('rate_limited', `Too many failed logins; retry in ${seconds} s`, {
          headers: { 'Retry-After': String(seconds) },
        });
      }
    }
    try {
      const result = await login();
      await giveBack();
      return result;
    } catch (error) {
      if (!(error instanceof ApiError && error.code === 'unauthorized')) await giveBack();
      throw error;
    }
  }
}

export async function describeSession(db: Kysely<DB>, workspaceId: string, keyId: string, csrf: string) {
  const row = await db
    .selectFrom('dashboard_sessions as s')
    .innerJoin('workspaces as w', 'w.id', 's.workspace_id')
    .innerJoin('api_keys as k', (join) => join.onRef('k.workspace_id', '=', 's.workspace_id').onRef('k.id', '=', 's.key_id'))
    .select(['w.id', 'w.slug', 'w.name', 'w.plan', 'k.name as key_name', 'k.permissions', 's.expires_at'])
    .where('s.workspace_id', '=', workspaceId)
    .where('s.key_id', '=', keyId)
    .where('s.csrf_token', '=', csrf)
    .executeTakeFirstOrThrow();
  return {
    workspace: { id: row.id, slug: row.slug, name: row.name, plan: row.plan },
    key_name: row.key_name,
    permissions: row.permissions as Permission[],
    csrf_token: csrf,
    expires_at: new Date(row.expires_at).toISOString(),
  };
}

export async function closeSession(db: Kysely<DB>, req: Request): Promise<void> {
  const token = readCookie(req, SESSION_COOKIE);
  if (token) await db.deleteFrom('dashboard_sessions').where('token_hash', '=', hashSecret(token)).execute();
}

declare global {
  namespace Express {
    interface Request {
      dashboardCsrf?: string;
    }
  }
}

const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

/** Resolves the session cookie to the key's workspace and permissions (as `authenticate` does for bearer keys). */
export function dashboardSession(db: Kysely<DB>, defaultRateLimit: number) {
  return async (req: Request, _res: Response, next: NextFunction) => {
    try {
      const token = readCookie(req, SESSION_COOKIE);
      if (token) {
        const row = await db
          .selectFrom('dashboard_sessions as s')
          .innerJoin('api_keys as k', (join) => join.onRef('k.workspace_id', '=', 's.workspace_id').onRef('k.id', '=', 's.key_id'))
          .innerJoin('workspaces as w', 'w.id', 's.workspace_id')
          .select([
            's.workspace_id',
            's.key_id',
            's.csrf_token',
            'k.name',
            'k.permissions',
            'w.rate_limit_per_minute',
            'w.policy_version',
            'w.agents_version',
          ])
          .where('s.token_hash', '=', hashSecret(token))
          .where('s.expires_at', '>', sql<Date>`now()`)
          .where('k.revoked_at', 'is', null)
          .executeTakeFirst();
        if (row) {
          const csrfOk = (() => {
            if (SAFE_METHODS.has(req.method)) return true;
            const sent = Buffer.from(req.get('x-csrf-token') ?? '');
            const expected = Buffer.from(row.csrf_token);
            return sent.length === expected.length && timingSafeEqual(sent, expected);
          })();
          if (!csrfOk && !(req.method === 'POST' && req.path === '/session')) {
            return next(new ApiError('insufficient_permission', 'Missing or wrong X-CSRF-Token'));
          }
          req.dashboardCsrf = row.csrf_token;
          req.auth = keyIdentity({ ...row, id: row.key_id }, defaultRateLimit);
        }
      }
      next();
    } catch (error) {
      // As for bearer keys: the identity gate answers the failed lookup (503 when the database is down).
      req.authFailure = error;
      next();
    }
  };
}
