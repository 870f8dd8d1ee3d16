import type { Insertable, Kysely, Selectable } from 'kysely';
import type { DB, McpGatewayTasksTable } from '../../db/schema.ts';

/** The agents whose key has this hash (any workspace), with what authentication needs of their workspace. */
export const findAgentsByKeyHash = (db: Kysely<DB>, keyHash: string) =>
  db
    .selectFrom('agents')
    .innerJoin('workspaces', 'workspaces.id', 'agents.workspace_id')
    .select([
      'agents.id',
      'agents.slug',
      'agents.workspace_id',
      'workspaces.rate_limit_per_minute',
      'workspaces.policy_version',
      'workspaces.agents_version',
      'workspaces.mcp_servers_version',
    ])
    .where('agents.api_key_hash', '=', keyHash)
    .limit(2)
    .execute();

/**
 * The approval of this agent for the act with this digest that decides it now: an approved,
 * unused one first, else a pending one, else a rejected one; never an expired or used one.
 */
export const findApprovalForAct = async (db: Kysely<DB>, workspaceId: string, agentId: string, digest: string) =>
  (
    await db
      .selectFrom('approvals')
      .select(['id', 'status', 'created_at'])
      .where('workspace_id', '=', workspaceId)
      .where('input_digest', '=', digest)
      .where('agent_id', '=', agentId)
      .where('consumed_at', 'is', null)
      .where('expires_at', '>', new Date())
      .where('status', 'in', ['approved', 'pending', 'rejected'])
      .orderBy('created_at', 'desc')
      .limit(20)
      .execute()
  ).sort((a, b) => rank(a.status) - rank(b.status))[0]?.id;

const rank = (status: string) => (status === 'approved' ? 0 : status === 'pending' ? 1 : 2);

/** What a held call waits on: an approval's state. */
export const findApprovalState = (db: Kysely<DB>, workspaceId: string, id: string) =>
  db
    .selectFrom('approvals')
    .select(['status', 'expires_at', 'consumed_at'])
    .where('workspace_id', '=', workspaceId)
    .where('id', '=', id)
    .executeTakeFirst();

/** What reaching a task takes (its row, less the bookkeeping). */
export type GatewayTaskRow = Omit<Selectable<McpGatewayTasksTable>, 'finished_at' | 'created_at'>;

export const insertTask = (db: Kysely<DB>, row: Insertable<McpGatewayTasksTable>) =>
  db.insertInto('mcp_gateway_tasks').values(row).execute();

/** The agent's unexpired tasks (up to `limit`: the cap is all that is asked). */
export const countLiveTasks = async (db: Kysely<DB>, workspaceId: string, agentId: string, limit: number) =>
  (
    await db
      .selectFrom('mcp_gateway_tasks')
      .select('id')
      .where('workspace_id', '=', workspaceId)
      .where('agent_id', '=', agentId)
      .where('expires_at', '>', new Date())
      .limit(limit)
      .execute()
  ).length;

/** The agent's unexpired task with this id (another agent's is nobody's). */
export const findTask = (db: Kysely<DB>, workspaceId: string, agentId: string, id: string) =>
  db
    .selectFrom('mcp_gateway_tasks')
    .select([
      'workspace_id',
      'id',
      'agent_id',
      'server_id',
      'upstream_url',
      'upstream_session_id',
      'protocol_version',
      'upstream_task_id',
      'outcome_basis',
      'expires_at',
    ])
    .where('workspace_id', '=', workspaceId)
    .where('agent_id', '=', agentId)
    .where('id', '=', id)
    .where('expires_at', '>', new Date())
    .executeTakeFirst();

/** Marks the task's end recorded; true for the one caller that marked it. */
export const markTaskFinished = async (db: Kysely<DB>, workspaceId: string, id: string) =>
  (
    await db
      .updateTable('mcp_gateway_tasks')
      .set({ finished_at: new Date() })
      .where('workspace_id', '=', workspaceId)
      .where('id', '=', id)
      .where('finished_at', 'is', null)
      .returning('id')
      .execute()
  ).length === 1;

/** Removes up to `limit` expired tasks and answers them (each to one caller: whoever deletes it terminates its session). */
export const claimExpiredTasks = (db: Kysely<DB>, limit: number) =>
  db
    .deleteFrom('mcp_gateway_tasks')
    .where(({ eb, selectFrom, refTuple }) =>
      eb(
        refTuple('workspace_id', 'id'),
        'in',
        selectFrom('mcp_gateway_tasks')
          .select(['workspace_id', 'id'])
          .where('expires_at', '<=', new Date())
          .limit(limit)
          .forUpdate()
          .skipLocked()
          .$asTuple('workspace_id', 'id'),
      ),
    )
    .returning(['workspace_id', 'id', 'server_id', 'upstream_url', 'upstream_session_id', 'protocol_version'])
    .execute();
