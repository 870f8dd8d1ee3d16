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
