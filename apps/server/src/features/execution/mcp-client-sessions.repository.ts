import { type Kysely, sql } from 'kysely';
import type { DB } from '../../db/schema.ts';

export interface ClientSessionRow {
  id: string;
  workspace_id: string;
  agent_id: string;
  endpoint: string;
  capabilities: unknown;
  protocol_version: string;
}

export const insertClientSession = (db: Kysely<DB>, row: ClientSessionRow) =>
  db
    .insertInto('mcp_client_sessions')
    .values({ ...row, capabilities: JSON.stringify(row.capabilities) })
    .execute();

export const findClientSession = (db: Kysely<DB>, id: string) =>
  db
    .selectFrom('mcp_client_sessions')
    .select(['id', 'workspace_id', 'agent_id', 'endpoint', 'capabilities', 'protocol_version'])
    .where('id', '=', id)
    .executeTakeFirst();

/** Moves the session's last use to now; false when it no longer exists. */
export const touchClientSession = async (db: Kysely<DB>, id: string) =>
  (await db.updateTable('mcp_client_sessions').set({ last_seen_at: sql`now()` }).where('id', '=', id).executeTakeFirst()).numUpdatedRows >
  0n;

/** Deletes the session; true when it was there. */
export const deleteClientSession = async (db: Kysely<DB>, id: string) =>
  (await db.deleteFrom('mcp_client_sessions').where('id', '=', id).executeTakeFirst()).numDeletedRows > 0n;

/** Deletes the agent's sessions beyond its `keep` most recently seen; their ids. */
export const deleteSessionsBeyond = async (db: Kysely<DB>, workspaceId: string, agentId: string, keep: number) =>
  (
    await db
      .deleteFrom('mcp_client_sessions')
      .where('id', 'in', (q) =>
        q
          .selectFrom('mcp_client_sessions')
          .select('id')
          .where('workspace_id', '=', workspaceId)
          .where('agent_id', '=', agentId)
          .orderBy('last_seen_at', 'desc')
          .orderBy('created_at', 'desc')
          .offset(keep),
      )
      .returning('id')
      .execute()
  ).map((row) => row.id);

/** Deletes sessions unseen since `before`, at most `limit`; their ids. */
export const deleteIdleClientSessions = async (db: Kysely<DB>, before: Date, limit: number) =>
  (
    await db
      .deleteFrom('mcp_client_sessions')
      .where('id', 'in', (q) => q.selectFrom('mcp_client_sessions').select('id').where('last_seen_at', '<', before).limit(limit))
      .returning('id')
      .execute()
  ).map((row) => row.id);

/** Stores a relay message too large for a NOTIFY payload and notifies `channel` with `{ to, row }`, in one statement. */
export const publishRelayRow = (db: Kysely<DB>, channel: string, to: string, payload: unknown) =>
  sql`WITH m AS (INSERT INTO mcp_relay_messages (payload) VALUES (${JSON.stringify(payload)}::jsonb) RETURNING id)
      SELECT pg_notify(${channel}, json_build_object('to', ${to}::text, 'row', (SELECT id FROM m))::text)`.execute(db);

export const notifyRelay = (db: Kysely<DB>, channel: string, payload: string) => sql`SELECT pg_notify(${channel}, ${payload})`.execute(db);

/** Reads and deletes a stored relay message (undefined: another process took it, or it was swept). */
export const takeRelayRow = async (db: Kysely<DB>, id: number) =>
  (await db.deleteFrom('mcp_relay_messages').where('id', '=', id).returning('payload').executeTakeFirst())?.payload;

export const deleteOldRelayRows = (db: Kysely<DB>, before: Date) =>
  db.deleteFrom('mcp_relay_messages').where('created_at', '<', before).execute();
