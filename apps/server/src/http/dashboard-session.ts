/**
 * The dashboard API's identity: the session cookie (HttpOnly, SameSite=Strict, Secure except on
 * localhost) resolved to the key's workspace and permissions, as `authenticate` does for bearer
 * keys, with the CSRF check on state-changing requests. Sessions themselves are opened and
 * closed by features/identity/sessions.service.ts.
 */
import { timingSafeEqual } from 'node:crypto';
import type { NextFunction, Request, Response } from 'express';
import { SESSION_HOURS, type SessionsService } from '../features/identity/sessions.service.ts';
import type { SessionCookie } from '../shared/context.ts';
import { ApiError } from '../shared/errors.ts';
import { keyIdentity } from './context.ts';

export const SESSION_COOKIE = 'warden_session';
const LOCAL_HOSTS = new Set(['localhost', '127.0.0.1', '::1', '[::1]']);
const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

declare global {
  namespace Express {
    interface Request {
      dashboardCsrf?: string;
    }
  }
}

function readCookie(req: Request, name: string): string | undefined {
  for (const part of (req.headers.cookie ?? '').split(';')) {
    const [key, ...value] = part.trim().split('=');
    if (key === name) return decodeURIComponent(value.join('='));
  }
  return undefined;
}

function setSessionCookie(req: Request, res: Response, token: string | null): void {
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

/** The request's session cookie as the dashboard handlers see it (RouterOptions.session). */
export const sessionCookie = (req: Request, res: Response): SessionCookie => ({
  token: readCookie(req, SESSION_COOKIE),
  csrf: req.dashboardCsrf ?? '',
  clientAddress: req.ip ?? '',
  set: (token) => setSessionCookie(req, res, token),
});

/** Resolves the session cookie to the key's workspace and permissions (as `authenticate` does for bearer keys). */
export function dashboardSession(resolve: SessionsService['resolve'], defaultRateLimit: number) {
  return async (req: Request, _res: Response, next: NextFunction) => {
    try {
      const token = readCookie(req, SESSION_COOKIE);
      if (token) {
        const row = await resolve(token);
        if (row) {
          const csrfOk = (() => {
            if (SAFE_METHODS.has(req.method)) return true;
            const sent = Buffer.from(req.get('x-csrf-token') ?? '');
            const expected = Buffer.from(row.csrf_token);
            return sent.length === expected.length && timingSafeEqual(sent, expected);
          })();
          if (!csrfOk && !(req.method === 'POST' && req.path === '/session')) {
            return next(
              new ApiError(
                'csrf_token_invalid',
                'Missing or wrong X-CSRF-Token: send the CSRF token the dashboard session was opened with',
              ),
            );
          }
          req.dashboardCsrf = row.csrf_token;
          // The session's id (never its token) names the actor of the changes it makes.
          req.auth = { ...keyIdentity({ ...row, id: row.key_id }, defaultRateLimit), sessionId: row.session_id };
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
