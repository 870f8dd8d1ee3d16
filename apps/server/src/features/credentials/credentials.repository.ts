import type { Insertable, Kysely, Updateable } from 'kysely';
import { isUuid } from '../../db/paginate.ts';
import type { Credentials, DB } from '../../db/schema.ts';

export type CredentialRow = Awaited<ReturnType<typeof findCredential>> & {};

/** By UUID or by name. */
export const findCredential = (db: Kysely<DB>, workspaceId: string, idOrName: string) =>
  db
    .selectFrom('credentials')
    .selectAll()
    .where('workspace_id', '=', workspaceId)
    .where(isUuid(idOrName) ? 'id' : 'name', '=', idOrName)
    .executeTakeFirst();

export const credentialsQuery = (db: Kysely<DB>, workspaceId: string) =>
  db.selectFrom('credentials').selectAll().where('workspace_id', '=', workspaceId);

export const insertCredential = (db: Kysely<DB>, row: Insertable<Credentials>) =>
  db.insertInto('credentials').values(row).returningAll().executeTakeFirstOrThrow();

export const updateCredential = (db: Kysely<DB>, workspaceId: string, id: string, changes: Updateable<Credentials>) =>
  db
    .updateTable('credentials')
    .set({ ...changes, updated_at: new Date() })
    .where('workspace_id', '=', workspaceId)
    .where('id', '=', id)
    .returningAll()
    .executeTakeFirst();

export const deleteCredential = (db: Kysely<DB>, workspaceId: string, id: string) =>
  db.deleteFrom('credentials').where('workspace_id', '=', workspaceId).where('id', '=', id).returning(['id']).executeTakeFirst();

/** Whether the workspace brokers any secret: a credential, or an MCP server with upstream auth (compliance). */
export async function brokersCredentials(db: Kysely<DB>, workspaceId: string): Promise<boolean> {
  const [credential, server] = await Promise.all([
    db.selectFrom('credentials').select('id').where('workspace_id', '=', workspaceId).limit(1).executeTakeFirst(),
    db
      .selectFrom('mcp_servers')
      .select('id')
      .where('workspace_id', '=', workspaceId)
      .where('auth_type', 'is not', null)
      .limit(1)
      .executeTakeFirst(),
  ]);
  return credential !== undefined || server !== undefined;
}
