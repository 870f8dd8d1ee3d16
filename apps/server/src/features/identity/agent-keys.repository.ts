import type { Kysely } from 'kysely';
import type { DB } from '../../db/schema.ts';

/**
 * The agent an agent key names (in any workspace), with what authentication needs of its
 * workspace: by the public id of a generated key, or by the hash of any key (unique).
 */
export const findAgentByKey = (db: Kysely<DB>, by: { publicId: string } | { keyHash: string }) =>
  db
    .selectFrom('agents')
    .innerJoin('workspaces', 'workspaces.id', 'agents.workspace_id')
    .select([
      'agents.id',
      'agents.slug',
      'agents.workspace_id',
      'agents.api_key_hash',
      'workspaces.rate_limit_per_minute',
      'workspaces.policy_version',
      'workspaces.agents_version',
      'workspaces.mcp_servers_version',
    ])
    .where((eb) => ('publicId' in by ? eb('agents.api_key_public_id', '=', by.publicId) : eb('agents.api_key_hash', '=', by.keyHash)))
    .executeTakeFirst();
