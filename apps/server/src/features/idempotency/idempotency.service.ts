/**
 * Idempotency keys of the v1 API's POSTs (the HTTP layer's http/idempotency.ts calls this):
 * the first answer to a key is kept for 24 hours and replayed to the same request; another
 * request under the key, or the same one while the first still runs, is a 409.
 */
import type { Kysely } from 'kysely';
import type { DB } from '../../db/schema.ts';
import { ApiError } from '../../shared/errors.ts';
import * as repo from './idempotency.repository.ts';

export type { IdempotencyScope } from './idempotency.repository.ts';

export const IDEMPOTENCY_TTL_MS = 24 * 3600 * 1000;
/** How long a request holds its key before a retry may take over (it outlasts the 30 s upstream limits). */
export const IDEMPOTENCY_LEASE_MS = 120_000;
const CLEANUP_INTERVAL_MS = 10 * 60_000;
const CLEANUP_BATCH = 10_000;
const CLAIM_ATTEMPTS = 3;

export type Begun = { kind: 'run' } | { kind: 'replay'; status: number; body: string };

export function idempotencyService(db: Kysely<DB>) {
  let lastCleanup = 0;
  return {
    /** Owns the key for this request (`run`), or answers the stored answer (`replay`); else throws 409. */
    async begin(scope: repo.IdempotencyScope, requestHash: string): Promise<Begun> {
      const now = Date.now();
      if (now - lastCleanup > CLEANUP_INTERVAL_MS) {
        lastCleanup = now;
        void repo.deleteExpired(db, CLEANUP_BATCH).catch(() => undefined);
      }
      for (let attempt = 0; attempt < CLAIM_ATTEMPTS; attempt++) {
        if (await repo.claimKey(db, scope, requestHash, IDEMPOTENCY_LEASE_MS, IDEMPOTENCY_TTL_MS)) return { kind: 'run' };
        const row = await repo.findKey(db, scope);
        if (!row) continue; // expired or released meanwhile: claim again
        if (row.request_hash !== requestHash)
          throw new ApiError(
            'idempotency_key_reused',
            'This Idempotency-Key was already used with another request (method, path, body or agent key); use a new key',
          );
        if (row.status === null)
          throw new ApiError('idempotency_key_in_progress', 'A request with this Idempotency-Key is still being processed; retry later', {
            headers: { 'Retry-After': '1' },
          });
        return { kind: 'replay', status: row.status, body: row.response_body ?? '' };
      }
      throw new ApiError('idempotency_key_in_progress', 'This Idempotency-Key is contended; retry later', {
        headers: { 'Retry-After': '1' },
      });
    },
    complete: (scope: repo.IdempotencyScope, status: number, body: string) => repo.storeAnswer(db, scope, status, body),
    release: (scope: repo.IdempotencyScope) => repo.releaseKey(db, scope),
  };
}

export type IdempotencyService = ReturnType<typeof idempotencyService>;
