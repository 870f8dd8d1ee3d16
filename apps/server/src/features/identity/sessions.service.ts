/**
 * Dashboard sessions: opened with a workspace API key holding `admin`; the browser keeps only
 * a random session token in a cookie (http/dashboard-session.ts). State-changing requests must
 * also echo the session's CSRF token in X-CSRF-Token.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import type { Permission } from '@warden/contract';
import type { Kysely } from 'kysely';
import { type RateLimiterAbstract, RateLimiterRes } from 'rate-limiter-flexible';
import type { DB } from '../../db/schema.ts';
import { inTransaction } from '../../db/transaction.ts';
import { hashSecret } from '../../shared/crypto.ts';
import { ApiError } from '../../shared/errors.ts';
import * as repo from './sessions.repository.ts';
import { findActiveKeyByHash } from './workspaces.repository.ts';
import { displayPrefix } from './workspaces.service.ts';

export const SESSION_HOURS = 8;
/** Sessions one key may hold; a login ends the oldest beyond. */
export const MAX_SESSIONS_PER_KEY = 10;
/** Failed logins allowed per client address, and per key prefix, in LOGIN_WINDOW_S. */
export const MAX_FAILED_LOGINS = 10;
export const LOGIN_WINDOW_S = 15 * 60;

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
  await inTransaction(db, async (trx) => {
    await repo.deleteExpiredSessions(trx);
    if (replacing) await repo.deleteSessionByTokenHash(trx, hashSecret(replacing));
    await repo.insertSession(trx, {
      workspace_id: key.workspace_id,
      id: randomUUID(),
      token_hash: hashSecret(token),
      key_id: key.id,
      csrf_token: csrf,
      expires_at: new Date(Date.now() + SESSION_HOURS * 3600_000),
    });
    await repo.keepNewestSessions(trx, key.workspace_id, key.id, MAX_SESSIONS_PER_KEY);
  });
  return { token, csrf, workspaceId: key.workspace_id, keyId: key.id };
}

/**
 * Limits failed logins per client address and per key prefix (what key listings show of a
 * key), in the rate limits' shared store (`failures`: MAX_FAILED_LOGINS per LOGIN_WINDOW_S), so
 * every server process counts them. Past the limit a login answers 429 without the key being
 * checked, so a refusal reveals nothing. Each attempt is counted before the key is checked
 * (parallel guesses cannot overrun the limit) and given back unless the key was wrong.
 */
export class LoginGuard {
  constructor(private readonly failures: RateLimiterAbstract) {}

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
  const row = await repo.findSessionDescription(db, workspaceId, keyId, csrf);
  return {
    workspace: { id: row.id, slug: row.slug, name: row.name, plan: row.plan },
    key_id: keyId,
    key_name: row.key_name,
    permissions: row.permissions as Permission[],
    csrf_token: csrf,
    expires_at: new Date(row.expires_at).toISOString(),
  };
}

export async function closeSession(db: Kysely<DB>, token: string | undefined): Promise<void> {
  if (token) await repo.deleteSessionByTokenHash(db, hashSecret(token));
}

export function sessionsService(db: Kysely<DB>, loginGuard: LoginGuard) {
  return {
    /** Opens a session (see openSession), unless `address` or the key's prefix failed too often. */
    login: (address: string, apiKey: string, replacing: string | undefined) =>
      loginGuard.attempt(address, apiKey, () => openSession(db, apiKey, replacing)),
    describe: (workspaceId: string, keyId: string, csrf: string) => describeSession(db, workspaceId, keyId, csrf),
    close: (token: string | undefined) => closeSession(db, token),
    /** The live session of this token, with what authentication needs. */
    resolve: (token: string) => repo.findLiveSession(db, hashSecret(token)),
  };
}

export type SessionsService = ReturnType<typeof sessionsService>;
