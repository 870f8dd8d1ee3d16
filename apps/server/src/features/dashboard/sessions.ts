/**
 * Dashboard sessions: opened with a workspace API key holding `admin`; the browser keeps only
 * a random session token in an HttpOnly, SameSite=Strict cookie (Secure except on localhost).
 * State-changing requests must also echo the session's CSRF token in X-CSRF-Token.
 */
import { randomBytes, randomUUID, timingSafeEqual } from 'node:crypto';
import type { Permission } from '@warden/contract';
import type { NextFunction, Request, Response } from 'express';
import { type Kysely, sql } from 'kysely';
import type { DB } from '../../db/schema.ts';
import { keyIdentity } from '../../http/context.ts';
import { ApiError } from '../../http/errors.ts';
import { findActiveKeyByHash } from '../workspaces/workspaces.repository.ts';
import { hashSecret } from '../workspaces/workspaces.service.ts';

export const SESSION_COOKIE = 'warden_session';
export const SESSION_HOURS = 8;
const LOCAL_HOSTS = new Set(['localhost', '127.0.0.1', '::1', '[::1]']);

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

export async function openSession(db: Kysely<DB>, apiKey: string) {
  const key = await findActiveKeyByHash(db, hashSecret(apiKey));
  if (!key) throw new ApiError('unauthorized', 'A valid API key is required');
  if (!key.permissions.includes('admin'))
    throw new ApiError('insufficient_permission', 'The dashboard needs a key with the admin permission');
  const token = randomBytes(32).toString('base64url');
  const csrf = randomBytes(24).toString('base64url');
  await db
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
  return { token, csrf };
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
