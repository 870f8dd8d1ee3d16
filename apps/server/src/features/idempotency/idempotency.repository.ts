import { type Kysely, sql } from 'kysely';
import type { DB } from '../../db/schema.ts';

export interface IdempotencyScope {
  workspaceId: string;
  apiKeyId: string;
  key: string;
}

export type IdempotencyRow = Awaited<ReturnType<typeof findKey>> & {};

/**
 * Claims a key for a request: a new key, an expired one, or one whose request stopped running
 * (lease over, same fingerprint) is taken in one statement; true when this request now owns it.
 */
export async function claimKey(
  db: Kysely<DB>,
  scope: IdempotencyScope,
  requestHash: string,
  leaseMs: number,
  ttlMs: number,
): Promise<boolean> {
  const result = await sql<{ claimed: boolean }>`
    INSERT INTO idempotency_keys (workspace_id, api_key_id, idempotency_key, request_hash, locked_until, expires_at)
    VALUES (${scope.workspaceId}::uuid, ${scope.apiKeyId}::uuid, ${scope.key}, ${requestHash},
      now() + make_interval(secs => ${leaseMs / 1000}), now() + make_interval(secs => ${ttlMs / 1000}))
    ON CONFLICT (workspace_id, api_key_id, idempotency_key) DO UPDATE SET
      request_hash = EXCLUDED.request_hash, status = NULL, response_body = NULL,
      locked_until = EXCLUDED.locked_until, created_at = now(), expires_at = EXCLUDED.expires_at
    WHERE idempotency_keys.expires_at <= now()
      OR (idempotency_keys.status IS NULL AND idempotency_keys.locked_until <= now()
        AND idempotency_keys.request_hash = EXCLUDED.request_hash)
    RETURNING true AS claimed`.execute(db);
  return result.rows.length > 0;
}

export const findKey = (db: Kysely<DB>, scope: IdempotencyScope) =>
  db
    .selectFrom('idempotency_keys')
    .select(['request_hash', 'status', 'response_body', 'expires_at'])
    .where('workspace_id', '=', scope.workspaceId)
    .where('api_key_id', '=', scope.apiKeyId)
    .where('idempotency_key', '=', scope.key)
    .where('expires_at', '>', sql<Date>`now()`)
    .executeTakeFirst();

/** Stores the answer of the request that owns the key (still in flight: status NULL). */
export const storeAnswer = (db: Kysely<DB>, scope: IdempotencyScope, status: number, body: string) =>
  db
    .updateTable('idempotency_keys')
    .set({ status, response_body: body })
    .where('workspace_id', '=', scope.workspaceId)
    .where('api_key_id', '=', scope.apiKeyId)
    .where('idempotency_key', '=', scope.key)
    .where('status', 'is', null)
    .execute();

/** Releases a key whose request produced no answer to keep (a 5xx, a dropped connection): a retry runs again. */
export const releaseKey = (db: Kysely<DB>, scope: IdempotencyScope) =>
  db
    .deleteFrom('idempotency_keys')
    .where('workspace_id', '=', scope.workspaceId)
    .where('api_key_id', '=', scope.apiKeyId)
    .where('idempotency_key', '=', scope.key)
    .where('status', 'is', null)
    .execute();

/** Removes expired keys, at most `limit` of them. */
export const deleteExpired = (db: Kysely<DB>, limit: number) =>
  sql`DELETE FROM idempotency_keys WHERE ctid IN (
    SELECT ctid FROM idempotency_keys WHERE expires_at <= now() LIMIT ${limit})`.execute(db);
