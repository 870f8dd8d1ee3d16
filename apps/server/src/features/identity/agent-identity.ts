/**
 * Who is acting: `input.agent` (slug or name) and/or the key in X-Warden-Agent-Key.
 * A key is required when the named agent has a caller-chosen one registered (a key Warden
 * generated identifies its agent when sent, and is not demanded: the reference's flows name
 * agents registered without a key; docs/decisions/0019-agent-keys.md). Keys are compared by
 * their SHA-256 in an indexed lookup, so timing reveals nothing about a key.
 */
import type { Kysely } from 'kysely';
import type { DB } from '../../db/schema.ts';
import { hashSecret } from '../../shared/crypto.ts';
import { ApiError } from '../../shared/errors.ts';
import { type AgentRow, findAgentCandidates } from '../agents/agents.repository.ts';

const MAX_WORKSPACES = 10_000;
const MAX_LOOKUPS = 1_000;

/**
 * Agent lookups, cached per workspace by its agents version (bumped by a trigger with every
 * change to its agents, read with the caller's key). As with policies: the lookup runs after
 * the version was read, so a cached answer is never older than the version it is filed under.
 */
export class AgentDirectory {
  private readonly workspaces = new Map<string, { version: number; lookups: Map<string, Promise<AgentRow[]>> }>();

  constructor(private readonly db: Kysely<DB>) {}

  candidates(workspaceId: string, version: number, keyHash: string | undefined, named: string | undefined): Promise<AgentRow[]> {
    let workspace = this.workspaces.get(workspaceId);
    if (!workspace || workspace.version !== version) {
      if (this.workspaces.size >= MAX_WORKSPACES) this.workspaces.clear();
      workspace = { version, lookups: new Map() };
      this.workspaces.set(workspaceId, workspace);
    }
    const key = `${keyHash ?? ''}\u0000${named ?? ''}`;
    let lookup = workspace.lookups.get(key);
    if (!lookup) {
      if (workspace.lookups.size >= MAX_LOOKUPS) workspace.lookups.clear();
      const lookups = workspace.lookups;
      lookup = findAgentCandidates(this.db, workspaceId, keyHash, named);
      lookup.catch(() => lookups.delete(key));
      lookups.set(key, lookup);
    }
    return lookup;
  }
}

export async function resolveAgent(
  directory: AgentDirectory,
  auth: { workspaceId: string; agentsVersion: number; agent?: string },
  named: string | undefined,
  agentKey: string | undefined,
): Promise<AgentRow> {
  // An OAuth token acts as the agent it was granted for: consent stands in for the agent's key.
  if (auth.agent !== undefined) return grantedAgent(directory, { ...auth, agent: auth.agent }, named);
  if (named === undefined && agentKey === undefined) {
    throw new ApiError('agent_context_required', 'Name the acting agent in input.agent or send its key in X-Warden-Agent-Key');
  }
  const keyHash = agentKey === undefined ? undefined : hashSecret(agentKey);
  const candidates = await directory.candidates(auth.workspaceId, auth.agentsVersion, keyHash, named);
  let byKey: AgentRow | undefined;
  if (keyHash !== undefined) {
    byKey = candidates.find((agent) => agent.api_key_hash === keyHash);
    if (!byKey) throw new ApiError('invalid_agent_key', 'The agent key matches no agent of this workspace');
  }
  if (named === undefined) return byKey as AgentRow;
  // A slug names one agent; a name may be shared: the slug match wins, then the key's agent.
  const byName =
    candidates.find((agent) => agent.slug === named) ??
    (byKey?.name === named ? byKey : undefined) ??
    candidates.find((agent) => agent.name === named);
  if (!byName) throw new ApiError('agent_not_found', `agent '${named}' was not found in this workspace`);
  if (byKey && byKey.id !== byName.id)
    throw new ApiError('agent_identity_mismatch', `the agent key belongs to another agent than '${named}'`);
  if (!byKey && byName.api_key_hash !== null && byName.api_key_public_id === null) {
    throw new ApiError('agent_key_required', `agent '${byName.slug}' has a key registered: send it in X-Warden-Agent-Key`);
  }
  return byName;
}

async function grantedAgent(
  directory: AgentDirectory,
  auth: { workspaceId: string; agentsVersion: number; agent: string },
  named: string | undefined,
): Promise<AgentRow> {
  if (named !== undefined && named !== auth.agent)
    throw new ApiError('agent_identity_mismatch', `the access token acts as agent '${auth.agent}', not '${named}'`);
  const agent = (await directory.candidates(auth.workspaceId, auth.agentsVersion, undefined, auth.agent)).find(
    (a) => a.slug === auth.agent,
  );
  if (!agent) throw new ApiError('agent_not_found', `agent '${auth.agent}' was not found in this workspace`);
  return agent;
}

export function assertActive(agent: AgentRow): void {
  if (agent.status !== 'active') throw new ApiError('agent_inactive', `agent '${agent.slug}' is ${agent.status}`);
}
