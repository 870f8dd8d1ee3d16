/** The MCP server registry: the only place an upstream MCP URL may come from. */
import { randomUUID } from 'node:crypto';
import type { McpServer, McpServerCreate, McpServerUpdate } from '@warden/contract';
import type { Kysely } from 'kysely';
import { iso, isUniqueViolation, type PageRequest, paginate } from '../../db/paginate.ts';
import type { DB } from '../../db/schema.ts';
import { ApiError, notFound } from '../../http/errors.ts';
import { slugify } from '../slug.ts';
import * as repo from './mcp-servers.repository.ts';

export function toMcpServer(row: repo.McpServerRow): McpServer {
  return {
    id: row.id,
    name: row.name,
    slug: row.slug,
    transport_url: row.transport_url,
    transport: row.transport as McpServer['transport'],
    description: row.description,
    enabled: row.enabled,
    created_at: iso(row.created_at),
    updated_at: iso(row.updated_at),
  };
}

/** The schema checks the scheme; this also refuses what `new URL` cannot parse. */
function checkTransportUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.protocol === 'http:' || parsed.protocol === 'https:') return parsed.toString();
  } catch {
    // fall through
  }
  throw new ApiError('invalid_request', 'body/transport_url must be an absolute http(s) URL');
}

const slugTaken = (slug: string) => new ApiError('conflict', `an MCP server with slug '${slug}' already exists`);

export const listMcpServers = (db: Kysely<DB>, workspaceId: string, query: PageRequest) =>
  paginate(repo.mcpServersQuery(db, workspaceId), 'created_at', query, toMcpServer);

export async function getMcpServer(db: Kysely<DB>, workspaceId: string, idOrSlug: string): Promise<McpServer> {
  const row = await repo.findMcpServer(db, workspaceId, idOrSlug);
  if (!row) throw notFound('MCP server', idOrSlug);
  return toMcpServer(row);
}

export async function createMcpServer(db: Kysely<DB>, workspaceId: string, input: McpServerCreate): Promise<McpServer> {
  const slug = input.slug ?? slugify(input.name);
  try {
    const row = await repo.insertMcpServer(db, {
      workspace_id: workspaceId,
      id: randomUUID(),
      slug,
      name: input.name,
      transport_url: checkTransportUrl(input.transport_url),
      transport: input.transport ?? 'auto',
      description: input.description ?? null,
      enabled: input.enabled ?? true,
    });
    return toMcpServer(row);
  } catch (error) {
    if (isUniqueViolation(error)) throw slugTaken(slug);
    throw error;
  }
}

export async function updateMcpServer(db: Kysely<DB>, workspaceId: string, idOrSlug: string, input: McpServerUpdate): Promise<McpServer> {
  const existing = await repo.findMcpServer(db, workspaceId, idOrSlug);
  if (!existing) throw notFound('MCP server', idOrSlug);
  const changes = { ...input, ...(input.transport_url ? { transport_url: checkTransportUrl(input.transport_url) } : {}) };
  try {
    const row = await repo.updateMcpServer(db, workspaceId, existing.id, changes);
    if (!row) throw notFound('MCP server', idOrSlug);
    return toMcpServer(row);
  } catch (error) {
    if (isUniqueViolation(error)) throw slugTaken(input.slug ?? existing.slug);
    throw error;
  }
}

export async function deleteMcpServer(db: Kysely<DB>, workspaceId: string, idOrSlug: string) {
  const existing = await repo.findMcpServer(db, workspaceId, idOrSlug);
  const deleted = existing && (await repo.deleteMcpServer(db, workspaceId, existing.id));
  if (!deleted) throw notFound('MCP server', idOrSlug);
  return { id: deleted.id, deleted: true as const };
}
