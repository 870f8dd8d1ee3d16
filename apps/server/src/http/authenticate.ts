/**
 * Resolves `Authorization: Bearer <key>` to the key's workspace and permissions. It never
 * answers by itself: the rate limiter runs next (an unauthenticated caller is limited by
 * address), and the route refuses a missing identity with one fixed 401 body, whatever the
 * reason (missing, malformed, unknown or revoked), so the answer reveals nothing.
 *
 * Keys are looked up by their SHA-256: the lookup compares hashes, never the secret, so its
 * timing tells nothing about the key.
 */
import type { NextFunction, Request, Response } from 'express';
import type { Kysely } from 'kysely';
import type { DB } from '../db/schema.ts';
import { findActiveKeyByHash } from '../features/workspaces/workspaces.repository.ts';
import { hashSecret } from '../features/workspaces/workspaces.service.ts';
import { keyIdentity } from './context.ts';

const BEARER = /^Bearer ([\x21-\x7e]{1,512})$/;

export function authenticate(db: Kysely<DB>, defaultRateLimit: number) {
  return async (req: Request, _res: Response, next: NextFunction) => {
    try {
      const match = BEARER.exec(req.get('authorization') ?? '');
      if (match?.[1]) {
        const key = await findActiveKeyByHash(db, hashSecret(match[1]));
        if (key) req.auth = keyIdentity(key, defaultRateLimit);
      }
      next();
    } catch (error) {
      next(error);
    }
  };
}
