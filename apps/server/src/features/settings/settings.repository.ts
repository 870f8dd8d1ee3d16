import type { Kysely, Updateable } from 'kysely';
import type { DB, WorkspaceSettings } from '../../db/schema.ts';

export type SettingsRow = Awaited<ReturnType<typeof findSettings>> & {};

/** The workspace's settings row; none until they are first changed. */
export const findSettings = (db: Kysely<DB>, workspaceId: string) =>
  db
    .selectFrom('workspace_settings')
    .select(['default_development', 'default_staging', 'default_production', 'agents_hold_no_credentials', 'audit_mcp_arguments'])
    .where('workspace_id', '=', workspaceId)
    .executeTakeFirst();

type Changes = Pick<
  Updateable<WorkspaceSettings>,
  'default_development' | 'default_staging' | 'default_production' | 'agents_hold_no_credentials' | 'audit_mcp_arguments'
>;

/**
 * Sets the given columns, creating the row on first change; one statement, so concurrent
 * changes of different environments never undo each other. Its trigger bumps policy_version.
 */
export const upsertSettings = (db: Kysely<DB>, workspaceId: string, changes: Changes) =>
  db
    .insertInto('workspace_settings')
    .values({ workspace_id: workspaceId, ...changes })
    .onConflict((oc) => oc.column('workspace_id').doUpdateSet({ ...changes, updated_at: new Date() }))
    .returning(['default_development', 'default_staging', 'default_production', 'agents_hold_no_credentials', 'audit_mcp_arguments'])
    .executeTakeFirstOrThrow();
