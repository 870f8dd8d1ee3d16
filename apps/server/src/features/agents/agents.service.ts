/**
 * Agents: rows in, API objects out. The agent key is hashed on the way in and never comes out,
 * except a key Warden generates, answered once by the create (docs/decisions/0019-agent-keys.md).
 */
import { randomUUID } from 'node:crypto';
import type { Agent, AgentCreateWritable as AgentCreate, AgentUpdateWritable as AgentUpdate } from '@warden/contract';
import type { Kysely } from 'kysely';
import { iso, isUniqueViolation, type PageRequest, paginate, violatedConstraint } from '../../db/paginate.ts';
import type { DB } from '../../db/schema.ts';
import { inTransaction } from '../../db/transaction.ts';
import type { Actor } from '../../shared/context.ts';
import { hashSecret } from '../../shared/crypto.ts';
import { ApiError, notFound } from '../../shared/errors.ts';
import { slugify } from '../../shared/slug.ts';
import { recordChange } from '../audit/audit.service.ts';
import { recordEvent } from '../events/outbox.repository.ts';
import { agentKeyHint, generateAgentKey } from '../identity/agent-keys.ts';
import * as repo from './agents.repository.ts';

export function toAgent(row: repo.AgentRow): Agent {
  return {
    id: row.id,
    slug: row.slug,
    name: row.name,
    provider: row.provider as Agent['provider'],
    status: row.status as Agent['status'],
    environment: row.environment as Agent['environment'],
    risk_level: row.risk_level as Agent['risk_level'],
    description: row.description,
    model: row.model,
    tags: row.tags,
    allowed_tools: row.allowed_tools,
    allowed_resources: row.allowed_resources,
    has_api_key: row.api_key_hash !== null,
    api_key_hint: agentKeyHint(row.api_key_public_id),
    created_at: iso(row.created_at),
    updated_at: iso(row.updated_at),
  };
}

const slugTaken = (slug: string) => new ApiError('conflict', `an agent with slug '${slug}' already exists`);

/** Says nothing of where the key is registered: the agent, its workspace, even whether it is another workspace. */
const keyInUse = () =>
  new ApiError(
    'agent_key_in_use',
    'This agent key is already registered: choose another (POST /agents without api_key has Warden generate one)',
  );

/** A unique violation's answer: the key's index, or else the slug's. */
const conflictOf = (error: unknown, slug: string) => (violatedConstraint(error) === 'agents_key_hash' ? keyInUse() : slugTaken(slug));

export const listAgents = (
  db: Kysely<DB>,
  workspaceId: string,
  query: PageRequest & { status?: string; provider?: string; environment?: string },
) => paginate(repo.agentsQuery(db, workspaceId, query), 'created_at', query, toAgent);

export async function getAgent(db: Kysely<DB>, workspaceId: string, idOrSlug: string): Promise<Agent> {
  const row = await repo.findAgent(db, workspaceId, idOrSlug);
  if (!row) throw notFound('agent', idOrSlug);
  return toAgent(row);
}

/**
 * Every change writes its `configuration` audit event (audit.service.ts recordChange) first, in
 * the change's transaction: a change that then fails (a slug taken: 409) takes its event with it.
 */
export async function createAgent(db: Kysely<DB>, workspaceId: string, input: AgentCreate, actor: Actor): Promise<Agent> {
  const slug = input.slug ?? slugify(input.name);
  const id = randomUUID();
  // A 64-bit public id meets another in about 2^32 agents: that insert is refused (409), a retry draws anew.
  const generated = input.api_key === undefined ? generateAgentKey() : undefined;
  try {
    return await inTransaction(db, async (trx) => {
      await recordChange(trx, workspaceId, actor, {
        action: 'agent.created',
        resource: id,
        context: { slug, name: input.name, fields: Object.keys(input) },
      });
      const row = await repo.insertAgent(trx, {
        workspace_id: workspaceId,
        id,
        slug,
        name: input.name,
        provider: input.provider,
        status: input.status ?? 'active',
        environment: input.environment ?? 'development',
        risk_level: input.risk_level ?? null,
        description: input.description ?? null,
        model: input.model ?? null,
        tags: input.tags ?? [],
        allowed_tools: input.allowed_tools ?? [],
        allowed_resources: input.allowed_resources ?? [],
        api_key_hash: generated?.hash ?? hashSecret(input.api_key as string),
        api_key_public_id: generated?.publicId ?? null,
      });
      const agent = toAgent(row);
      await recordEvent(trx, workspaceId, 'agent.created', { agent });
      return generated ? { ...agent, api_key: generated.key } : agent;
    });
  } catch (error) {
    if (isUniqueViolation(error)) throw conflictOf(error, slug);
    throw error;
  }
}

export async function updateAgent(db: Kysely<DB>, workspaceId: string, idOrSlug: string, input: AgentUpdate, actor: Actor): Promise<Agent> {
  const existing = await repo.findAgent(db, workspaceId, idOrSlug);
  if (!existing) throw notFound('agent', idOrSlug);
  const { api_key, ...fields } = input;
  // A key given here is the caller's: it replaces a generated one, whose public id goes with it.
  const changes = {
    ...fields,
    ...(api_key !== undefined ? { api_key_hash: api_key === null ? null : hashSecret(api_key), api_key_public_id: null } : {}),
  };
  try {
    return await inTransaction(db, async (trx) => {
      await recordChange(trx, workspaceId, actor, {
        action: 'agent.updated',
        resource: existing.id,
        context: { slug: input.slug ?? existing.slug, fields: Object.keys(input) },
      });
      const row = await repo.updateAgent(trx, workspaceId, existing.id, changes);
      if (!row) throw notFound('agent', idOrSlug);
      return toAgent(row);
    });
  } catch (error) {
    if (isUniqueViolation(error)) throw conflictOf(error, input.slug ?? existing.slug);
    throw error;
  }
}

export async function deleteAgent(db: Kysely<DB>, workspaceId: string, idOrSlug: string, actor: Actor) {
  const existing = await repo.findAgent(db, workspaceId, idOrSlug);
  if (!existing) throw notFound('agent', idOrSlug);
  const deleted = await inTransaction(db, async (trx) => {
    await recordChange(trx, workspaceId, actor, {
      action: 'agent.deleted',
      resource: existing.id,
      severity: 'medium',
      context: { slug: existing.slug, name: existing.name },
    });
    const row = await repo.deleteAgent(trx, workspaceId, existing.id);
    if (!row) throw notFound('agent', idOrSlug);
    return row;
  });
  return { id: deleted.id, deleted: true as const };
}

export function agentsService(db: Kysely<DB>) {
  return {
    list: (workspaceId: string, query: Parameters<typeof listAgents>[2]) => listAgents(db, workspaceId, query),
    get: (workspaceId: string, idOrSlug: string) => getAgent(db, workspaceId, idOrSlug),
    create: (workspaceId: string, input: AgentCreate, actor: Actor) => createAgent(db, workspaceId, input, actor),
    update: (workspaceId: string, idOrSlug: string, input: AgentUpdate, actor: Actor) =>
      updateAgent(db, workspaceId, idOrSlug, input, actor),
    remove: (workspaceId: string, idOrSlug: string, actor: Actor) => deleteAgent(db, workspaceId, idOrSlug, actor),
  };
}

export type AgentsService = ReturnType<typeof agentsService>;
