import type { Kysely } from 'kysely';
import type { DB } from '../../db/schema.ts';

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
