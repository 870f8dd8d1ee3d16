/**
 * Who is acting: `input.agent` (slug or name) and/or the key in X-Warden-Agent-Key.
 * A key is required when the named agent has one registered. Keys are compared by their
 * SHA-256 in an indexed lookup, so timing reveals nothing about a key.
 */
import type { Kysely } from 'kysely';
import type { DB } from '../../db/schema.ts';
import { ApiError } from '../../http/errors.ts';
import { type AgentRow, findAgentByKeyHash, findAgentBySlugOrName } from '../agents/agents.repository.ts';
import { hashSecret } from '../workspaces/workspaces.service.ts';

export async function resolveAgent(db: Kysely<DB>, workspaceId: string, named: string | undefined, agentKey: string | undefined): Promise<AgentRow> {
  let byKey: AgentRow | undefined;
  if (agentKey !== undefined) {
    byKey = await findAgentByKeyHash(db, workspaceId, hashSecret(agentKey));
    if (!byKey) throw new ApiError('invalid_agent_key', 'The agent key matches no agent of this workspace');
  }
  if (named !== undefined) {
    const byName = await findAgentBySlugOrName(db, workspaceId, named);
    if (!byName) throw new ApiError('agent_not_found', `agent '${named}' was not found in this workspace`);
    if (byKey && byKey.id !== byName.id) throw new ApiError('agent_identity_mismatch', `the agent key belongs to another agent than '${named}'`);
    if (!byKey && byName.api_key_hash !== null) {
      throw new ApiError('agent_key_required', `agent '${byName.slug}' has a key registered: send it in X-Warden-Agent-Key`);
    }
    return byName;
  }
  if (byKey) return byKey;
  throw new ApiError('agent_context_required', 'Name the acting agent in input.agent or send its key in X-Warden-Agent-Key');
}

export function assertActive(agent: AgentRow): void {
  if (agent.status !== 'active') throw new ApiError('agent_inactive', `agent '${agent.slug}' is ${agent.status}`);
}
