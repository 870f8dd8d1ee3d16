import type { Kysely, Updateable } from 'kysely';
import { isUuid } from '../../db/paginate.ts';
import type { DB, WorkspaceSettings } from '../../db/schema.ts';

export type SettingsRow = Awaited<ReturnType<typeof findSettings>> & {};

const COLUMNS = [
  'default_development',
  'default_staging',
  'default_production',
  'agents_hold_no_credentials',
  'audit_mcp_arguments',
  'audit_log_public',
] as const;

/** The workspace's settings row; none until they are first changed. */
export const findSettings = (db: Kysely<DB>, workspaceId: string) =>
  db.selectFrom('workspace_settings').select(COLUMNS).where('workspace_id', '=', workspaceId).executeTakeFirst();

type Changes = Pick<Updateable<WorkspaceSettings>, (typeof COLUMNS)[number]>;

/**
 * Sets the given columns, creating the row on first change; one statement, so concurrent
 * changes of different environments never undo each other. Its trigger bumps policy_version.
 */
export const upsertSettings = (db: Kysely<DB>, workspaceId: string, changes: Changes) =>
  db
    .insertInto('workspace_settings')
    .values({ workspace_id: workspaceId, ...changes })
    .onConflict((oc) => oc.column('workspace_id').doUpdateSet({ ...changes, updated_at: new Date() }))
    .returning(COLUMNS)
    .executeTakeFirstOrThrow();

/** Whether the workspace publishes its audit log; false for an id that names no workspace (or is no UUID). */
export const findAuditLogPublic = async (db: Kysely<DB>, workspaceId: string): Promise<boolean> =>
  isUuid(workspaceId) &&
  ((await db.selectFrom('workspace_settings').select('audit_log_public').where('workspace_id', '=', workspaceId).executeTakeFirst())
    ?.audit_log_public ??
    false);
