/**
 * Resolves `Authorization: Bearer <key>` to the key's workspace and permissions. It never
 * answers by itself: the rate limiter runs next (an unauthenticated caller is limited by
 * address), and the route refuses a missing identity with one fixed 401 body, whatever the
 * reason (missing, malformed, unknown or revoked), so the answer reveals nothing.
 *
 * If the lookup itself fails (the database is down), the request goes on without an identity
 * and with the failure in `req.authFailure`: the identity gate answers it (503 for an
 * unreachable database) on every operation that needs a key, and a public one still runs.
 * Nothing passes without a successful lookup.
 *
 * Keys are looked up by their SHA-256: the lookup compares hashes, never the secret, so its
 * timing tells nothing about the key. Known keys are served from the KeyCache (see there for
 * how it stays right).
 */
import type { NextFunction, Request, Response } from 'express';
import type { WorkspacesService } from '../features/identity/workspaces.service.ts';
import { hashSecret } from '../shared/crypto.ts';
import { keyIdentity } from './context.ts';
import type { KeyCache } from './key-cache.ts';

const BEARER = /^Bearer ([\x21-\x7e]{1,512})$/;

export function authenticate(findActiveKey: WorkspacesService['findActiveKey'], defaultRateLimit: number, cache: KeyCache) {
  return async (req: Request, _res: Response, next: NextFunction) => {
    try {
      const match = BEARER.exec(req.get('authorization') ?? '');
      if (match?.[1]) {
        const keyHash = hashSecret(match[1]);
        req.auth = cache.get(keyHash);
        if (!req.auth) {
          const epoch = cache.begin();
          const key = await findActiveKey(keyHash);
          if (key) {
            req.auth = keyIdentity(key, defaultRateLimit);
            cache.set(keyHash, req.auth, epoch);
          }
        }
      }
      next();
    } catch (error) {
      req.authFailure = error;
      next();
    }
  };
}
