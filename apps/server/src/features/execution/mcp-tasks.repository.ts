import { type Kysely, type Selectable, sql } from 'kysely';
import type { DB, McpGatewayTasks } from '../../db/schema.ts';

/**
 * What reaching a task takes: its row once the upstream created it (no column of it NULL but
 * the upstream session, which a 2026-07-28 upstream's task has none of: it is reached by its id).
 */
export type GatewayTaskRow = {
  [K in Exclude<keyof Selectable<McpGatewayTasks>, 'finished_at' | 'created_at' | 'upstream_session_id'>]: NonNullable<
    Selectable<McpGatewayTasks>[K]
  >;
} & { upstream_session_id: string | null };

/**
 * Reserves a task's row for an agent that holds fewer than `cap` live tasks (false otherwise).
 * `trx` is a transaction of its own: its advisory lock serialises one agent's reservations.
 */
export async function reserveTask(
  trx: Kysely<DB>,
  row: { workspace_id: string; id: string; agent_id: string; server_id: string; upstream_url: string; expires_at: Date },
  cap: number,
): Promise<boolean> {
  await sql`SELECT pg_advisory_xact_lock(hashtextextended(${`mcp-task:${row.workspace_id}:${row.agent_id}`}, 0))`.execute(trx);
  const live = await trx
    .selectFrom('mcp_gateway_tasks')
    .select('id')
    .where('workspace_id', '=', row.workspace_id)
    .where('agent_id', '=', row.agent_id)
    .where('expires_at', '>', new Date())
    .limit(cap)
    .execute();
  if (live.length >= cap) return false;
  await trx.insertInto('mcp_gateway_tasks').values(row).execute();
  return true;
}

/** Fills in a reserved row once the upstream created its task. */
export const completeTask = async (
  db: Kysely<DB>,
  workspaceId: string,
  id: string,
  upstream: {
    upstream_session_id: string | null;
    protocol_version: string;
    upstream_task_id: string;
    outcome_basis: string;
    expires_at: Date;
  },
) =>
  (
    await db
      .updateTable('mcp_gateway_tasks')
      .set(upstream)
      .where('workspace_id', '=', workspaceId)
      .where('id', '=', id)
      .returning('id')
      .execute()
  ).length === 1;

/**
 * Adds how input requests of the task were decided, a key decided before keeping its first
 * decision (`||` lets the right side win): every decision stored, as one statement left it.
 */
export const addInputDecisions = async (db: Kysely<DB>, workspaceId: string, id: string, decisions: Record<string, unknown>) =>
  (
    await db
      .updateTable('mcp_gateway_tasks')
      .set({ input_decisions: sql`${JSON.stringify(decisions)}::jsonb || input_decisions` })
      .where('workspace_id', '=', workspaceId)
      .where('id', '=', id)
      .returning('input_decisions')
      .executeTakeFirst()
  )?.input_decisions;

/**
 * Notes on a reservation the upstream task its call created, before the call is recorded: a
 * row that is never completed still names what the sweep must cancel. Not reachable until
 * completed (findTask wants the outcome's basis).
 */
export const noteUpstreamTask = (db: Kysely<DB>, workspaceId: string, id: string, upstreamTaskId: string, protocolVersion: string) =>
  db
    .updateTable('mcp_gateway_tasks')
    .set({ upstream_task_id: upstreamTaskId, protocol_version: protocolVersion })
    .where('workspace_id', '=', workspaceId)
    .where('id', '=', id)
    .execute();

/** Drops a reservation whose call did not create a task. */
export const releaseTask = (db: Kysely<DB>, workspaceId: string, id: string) =>
  db.deleteFrom('mcp_gateway_tasks').where('workspace_id', '=', workspaceId).where('id', '=', id).execute();

/** The agent's unexpired, created task with this id (another agent's is nobody's). */
export const findTask = async (db: Kysely<DB>, workspaceId: string, agentId: string, id: string) =>
  (await db
    .selectFrom('mcp_gateway_tasks')
    .selectAll()
    .where('workspace_id', '=', workspaceId)
    .where('agent_id', '=', agentId)
    .where('id', '=', id)
    .where('expires_at', '>', new Date())
    .where('upstream_task_id', 'is not', null)
    .where('outcome_basis', 'is not', null)
    .executeTakeFirst()) as GatewayTaskRow | undefined;

/**
 * Marks the task's end recorded, and keeps the task reachable `keepMs` more at most (a finished
 * task's session and its place under the cap are not held for the rest of its TTL); true for
 * the one caller that marked it.
 */
export const markTaskFinished = async (db: Kysely<DB>, workspaceId: string, id: string, keepMs: number) =>
  (
    await db
      .updateTable('mcp_gateway_tasks')
      .set({ finished_at: new Date(), expires_at: sql`least(expires_at, now() + ${`${keepMs} milliseconds`}::interval)` })
      .where('workspace_id', '=', workspaceId)
      .where('id', '=', id)
      .where('finished_at', 'is', null)
      .returning('id')
      .execute()
  ).length === 1;

/** Removes up to `limit` expired tasks and answers them (each to one caller: whoever deletes it ends it). */
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
    .returning([
      'workspace_id',
      'id',
      'agent_id',
      'upstream_task_id',
      'server_id',
      'upstream_url',
      'upstream_session_id',
      'protocol_version',
      'outcome_basis',
      'finished_at',
    ])
    .execute();
