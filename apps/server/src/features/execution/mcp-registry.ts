/**
 * The registered MCP servers a workspace's calls may reach, cached per workspace by its MCP
 * servers version (bumped by a trigger with every change to its servers, read with the
 * caller's key: db/migrations/0019_mcp_gateway.sql). As with policies and agents: the servers
 * are read after the version was, so a cached registry is never older than the version it is
 * filed under, and a change is seen at the next request that carries the new version.
 */
import { hash } from 'node:crypto';
import type { Kysely } from 'kysely';
import type { DB } from '../../db/schema.ts';
import { openAuth } from '../credentials/upstream-auth.ts';
import type { UpstreamTokens } from '../credentials/upstream-tokens.ts';
import type { SecretBox } from '../webhooks/secrets.ts';
import type { McpTarget } from './mcp-dialer.ts';
import { listEnabledServers } from './mcp-registry.repository.ts';

const MAX_WORKSPACES = 10_000;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

interface Registry {
  /** Enabled servers, by slug. */
  servers: McpTarget[];
  bySlug: Map<string, McpTarget>;
  byId: Map<string, McpTarget>;
}

export class McpRegistry {
  private readonly workspaces = new Map<string, { version: number; registry: Promise<Registry> }>();

  constructor(
    private readonly db: Kysely<DB>,
    private readonly box: SecretBox,
    private readonly tokens: UpstreamTokens,
  ) {}

  /**
   * A row as a target: its upstream secret, if any, opened only when a request is built (a
   * function: never serialised); an OAuth connection's current access token, likewise.
   */
  private target({
    auth_type,
    auth_header,
    auth_secret_encrypted,
    oauth_generation,
    ...row
  }: Awaited<ReturnType<typeof listEnabledServers>>[number]): McpTarget {
    if (auth_type === 'oauth') {
      const generation = oauth_generation ?? 0;
      const tokens = this.tokens;
      return {
        ...row,
        auth: {
          revision: `oauth:${generation}`,
          renewable: true,
          header: async ({ rejected, agentId } = {}) => {
            const call = { workspaceId: row.workspace_id, serverId: row.id, slug: row.slug, generation, agentId };
            const token = await tokens.accessToken({ ...call, rejected: rejected?.replace(/^Bearer /, '') });
            return ['authorization', `Bearer ${token}`];
          },
        },
      };
    }
    if (!auth_type || !auth_header || !auth_secret_encrypted) return { ...row };
    const box = this.box;
    return {
      ...row,
      auth: {
        // names this secret (a digest of its sealed form, which changes with every rotation), never reveals it
        revision: hash('sha256', auth_secret_encrypted, 'hex').slice(0, 16),
        header: () => openAuth(box, auth_type, auth_header, auth_secret_encrypted),
      },
    };
  }

  private load(workspaceId: string, version: number): Promise<Registry> {
    const cached = this.workspaces.get(workspaceId);
    if (cached && cached.version === version) return cached.registry;
    const registry = listEnabledServers(this.db, workspaceId).then((rows) => {
      const servers = rows.map((row) => this.target(row));
      return { servers, bySlug: new Map(servers.map((s) => [s.slug, s])), byId: new Map(servers.map((s) => [s.id, s])) };
    });
    registry.catch(() => {
      if (this.workspaces.get(workspaceId)?.registry === registry) this.workspaces.delete(workspaceId);
    });
    this.workspaces.delete(workspaceId);
    if (this.workspaces.size >= MAX_WORKSPACES) this.workspaces.delete(this.workspaces.keys().next().value as string);
    this.workspaces.set(workspaceId, { version, registry });
    return registry;
  }

  /** The enabled server with this id (a UUID) or else slug, if any. */
  async find(auth: { workspaceId: string; mcpServersVersion: number }, idOrSlug: string): Promise<McpTarget | undefined> {
    const registry = await this.load(auth.workspaceId, auth.mcpServersVersion);
    return (UUID.test(idOrSlug) ? registry.byId : registry.bySlug).get(idOrSlug);
  }

  /** Every enabled server, by slug. */
  async list(auth: { workspaceId: string; mcpServersVersion: number }): Promise<McpTarget[]> {
    return (await this.load(auth.workspaceId, auth.mcpServersVersion)).servers;
  }
}
