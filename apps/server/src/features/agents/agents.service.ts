/** Agents: rows in, API objects out. The agent key is hashed on the way in and never comes out. */
import { randomUUID } from 'node:crypto';
import type { Agent, AgentCreateWritable as AgentCreate, AgentUpdateWritable as AgentUpdate } from '@warden/contract';
import type { Kysely } from 'kysely';
import { iso, isUniqueViolation, type PageRequest, paginate } from '../../db/paginate.ts';
import type { DB } from '../../db/schema.ts';
import { ApiError, notFound } from '../../http/errors.ts';
import { recordEvent } from '../events/outbox.ts';
import { slugify } from '../slug.ts';
import { hashSecret } from '../workspaces/workspaces.service.ts';
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
    created_at: iso(row.created_at),
    updated_at: iso(row.updated_at),
  };
}

const slugTaken = (slug: string) => new ApiError('conflict', `an agent with slug '${slug}' already exists`);

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

export async function createAgent(db: Kysely<DB>, workspaceId: string, input: AgentCreate): Promise<Agent> {
  const slug = input.slug ?? slugify(input.name);
  try {
    return await db.transaction().execute(async (trx) => {
      const row = await repo.insertAgent(trx, {
        workspace_id: workspaceId,
        id: randomUUID(),
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
        api_key_hash: input.api_key ? hashSecret(input.api_key) : null,
      });
      const agent = toAgent(row);
      await recordEvent(trx, workspaceId, 'agent.created', { agent });
      return agent;
    });
  } catch (error) {
    if (isUniqueViolation(error)) throw slugTaken(slug);
    throw error;
  }
}

export async function updateAgent(db: Kysely<DB>, workspaceId: string, idOrSlug: string, input: AgentUpdate): Promise<Agent> {
  const existing = await repo.findAgent(db, workspaceId, idOrSlug);
  if (!existing) throw notFound('agent', idOrSlug);
  const { api_key, ...fields } = input;
  const changes = { ...fields, ...(api_key !== undefined ? { api_key_hash: api_key === null ? null : hashSecret(api_key) } : {}) };
  try {
    const row = await repo.updateAgent(db, workspaceId, existing.id, changes);
    if (!row) throw notFound('agent', idOrSlug);
    return toAgent(row);
  } catch (error) {
    if (isUniqueViolation(error)) throw slugTaken(input.slug ?? existing.slug);
    throw error;
  }
}

export async function deleteAgent(db: Kysely<DB>, workspaceId: string, idOrSlug: string) {
  const existing = await repo.findAgent(db, workspaceId, idOrSlug);
  const deleted = existing && (await repo.deleteAgent(db, workspaceId, existing.id));
  if (!deleted) throw notFound('agent', idOrSlug);
  return { id: deleted.id, deleted: true as const };
}
