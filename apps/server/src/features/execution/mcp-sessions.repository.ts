import type { Kysely } from 'kysely';
import type { DB } from '../../db/schema.ts';

/** The agent's unexpired session `id` on this server, if any. */
export const findOpenSession = (db: Kysely<DB>, session: { workspaceId: string; id: string; serverId: string; agentId: string }) =>
  db
    .selectFrom('mcp_sessions')
    .select(['id', 'expires_at'])
    .where('workspace_id', '=', session.workspaceId)
    .where('id', '=', session.id)
    .where('server_id', '=', session.serverId)
    .where('agent_id', '=', session.agentId)
    .where('expires_at', '>', new Date())
    .executeTakeFirst();

export const insertSession = (
  db: Kysely<DB>,
  row: { workspace_id: string; id: string; server_id: string; agent_id: string; expires_at: Date },
) => db.insertInto('mcp_sessions').values(row).execute();
