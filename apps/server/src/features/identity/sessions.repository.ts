import { type Kysely, sql } from 'kysely';
import type { DB } from '../../db/schema.ts';

export const deleteExpiredSessions = (db: Kysely<DB>) =>
  db.deleteFrom('dashboard_sessions').where('expires_at', '<=', sql<Date>`now()`).execute();

export const deleteSessionByTokenHash = (db: Kysely<DB>, tokenHash: string) =>
  db.deleteFrom('dashboard_sessions').where('token_hash', '=', tokenHash).execute();

export const insertSession = (
  db: Kysely<DB>,
  row: { workspace_id: string; id: string; token_hash: string; key_id: string; csrf_token: string; expires_at: Date },
) => db.insertInto('dashboard_sessions').values(row).execute();

/** Ends the key's sessions but its newest `keep`. */
export const keepNewestSessions = (db: Kysely<DB>, workspaceId: string, keyId: string, keep: number) => {
  const ofKey = db.selectFrom('dashboard_sessions').select('id').where('workspace_id', '=', workspaceId).where('key_id', '=', keyId);
  return db
    .deleteFrom('dashboard_sessions')
    .where('workspace_id', '=', workspaceId)
    .where('key_id', '=', keyId)
    .where('id', 'not in', ofKey.orderBy('created_at', 'desc').orderBy('id', 'desc').limit(keep))
    .execute();
};

/** The session of this key with this CSRF token, with its workspace and key. */
export const findSessionDescription = (db: Kysely<DB>, workspaceId: string, keyId: string, csrf: string) =>
  db
    .selectFrom('dashboard_sessions as s')
    .innerJoin('workspaces as w', 'w.id', 's.workspace_id')
    .innerJoin('api_keys as k', (join) => join.onRef('k.workspace_id', '=', 's.workspace_id').onRef('k.id', '=', 's.key_id'))
    .select(['w.id', 'w.slug', 'w.name', 'w.plan', 'k.name as key_name', 'k.permissions', 's.expires_at'])
    .where('s.workspace_id', '=', workspaceId)
    .where('s.key_id', '=', keyId)
    .where('s.csrf_token', '=', csrf)
    .executeTakeFirstOrThrow();

/** The unexpired session with this token hash, if its key is not revoked, with what authentication needs. */
export const findLiveSession = (db: Kysely<DB>, tokenHash: string) =>
  db
    .selectFrom('dashboard_sessions as s')
    .innerJoin('api_keys as k', (join) => join.onRef('k.workspace_id', '=', 's.workspace_id').onRef('k.id', '=', 's.key_id'))
    .innerJoin('workspaces as w', 'w.id', 's.workspace_id')
    .select([
      's.id as session_id',
      's.workspace_id',
      's.key_id',
      's.csrf_token',
      'k.name',
      'k.permissions',
      'w.rate_limit_per_minute',
      'w.policy_version',
      'w.agents_version',
      'w.mcp_servers_version',
    ])
    .where('s.token_hash', '=', tokenHash)
    .where('s.expires_at', '>', sql<Date>`now()`)
    .where('k.revoked_at', 'is', null)
    .executeTakeFirst();
