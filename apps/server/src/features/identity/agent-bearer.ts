/**
 * An agent key sent as the bearer token (the MCP gateway's desktop clients): the identity it
 * stands for, found without a lookup across workspaces by secret — a generated key by its
 * public id (its hash then compared in constant time), any other by its hash, unique across
 * workspaces (docs/decisions/0019-agent-keys.md).
 */
import type { Permission } from '@warden/contract';
import type { Kysely } from 'kysely';
import type { DB } from '../../db/schema.ts';
import type { AuthContext } from '../../shared/context.ts';
import { findAgentByKey } from './agent-keys.repository.ts';
import { publicIdOf, sameHash } from './agent-keys.ts';

const RUNTIME_EXECUTE: Permission = 'runtime:execute';

/**
 * The agent's workspace, with `runtime:execute` only, rate-limited per agent at the
 * workspace's limit; undefined for a key no agent has.
 */
export async function agentBearerIdentity(
  db: Kysely<DB>,
  bearer: string,
  keyHash: string,
  defaultRateLimit: number,
): Promise<AuthContext | undefined> {
  const publicId = publicIdOf(bearer);
  let row = publicId === undefined ? undefined : await findAgentByKey(db, { publicId });
  if (row && !sameHash(row.api_key_hash ?? '', keyHash)) row = undefined;
  row ??= await findAgentByKey(db, { keyHash });
  if (!row) return undefined;
  return {
    workspaceId: row.workspace_id,
    keyId: `agent:${row.id}`,
    keyName: `agent:${row.slug}`,
    permissions: new Set([RUNTIME_EXECUTE]),
    rateLimitPerMinute: row.rate_limit_per_minute ?? defaultRateLimit,
    policyVersion: row.policy_version,
    agentsVersion: row.agents_version,
    mcpServersVersion: row.mcp_servers_version,
  };
}
