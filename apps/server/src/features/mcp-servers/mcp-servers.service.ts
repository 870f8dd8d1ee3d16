/** The MCP server registry: the only place an upstream MCP URL may come from. */
import { randomUUID } from 'node:crypto';
import type {
  McpServer,
  McpServerCreateWritable as McpServerCreate,
  McpServerUpdateWritable as McpServerUpdate,
  UpstreamAuthInputWritable as UpstreamAuthInput,
  UpstreamOAuthInputWritable as UpstreamOAuthInput,
} from '@warden/contract';
import type { Kysely } from 'kysely';
import { iso, isUniqueViolation, type PageRequest, paginate } from '../../db/paginate.ts';
import type { DB } from '../../db/schema.ts';
import { inTransaction } from '../../db/transaction.ts';
import type { Actor } from '../../shared/context.ts';
import { ApiError, notFound } from '../../shared/errors.ts';
import { slugify } from '../../shared/slug.ts';
import { recordChange } from '../audit/audit.service.ts';
import { authView, sealAuth } from '../credentials/upstream-auth.ts';
import { deleteConfig, endConnections } from '../credentials/upstream-oauth.repository.ts';
import type { UpstreamOAuth } from '../credentials/upstream-oauth.ts';
import { configureOAuth, oauthView } from '../credentials/upstream-oauth-config.ts';
import type { SecretBox } from '../webhooks/secrets.ts';
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
    upstream_auth:
      row.auth_type === 'oauth'
        ? oauthView(row, repo.MAX_CONNECTIONS_SHOWN)
        : row.auth_type && row.auth_header && row.auth_hint
          ? authView(row.auth_type, row.auth_header, row.auth_hint)
          : null,
    created_at: iso(row.created_at),
    updated_at: iso(row.updated_at),
  };
}

/** Whether a new transport URL leads to another origin (scheme, host or port) than the old. */
const movesOrigin = (from: string, to: string) => new URL(from).origin !== new URL(to).origin;

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

type AuthInput = UpstreamAuthInput | UpstreamOAuthInput;
const isOAuth = (input: AuthInput | null): input is UpstreamOAuthInput => input?.type === 'oauth';

/** The columns of a server's upstream auth: a sealed secret, an OAuth connection (its own table), or all null to send none. */
function authColumns(box: SecretBox, input: AuthInput | null) {
  if (isOAuth(input)) return { auth_type: 'oauth', auth_header: 'authorization', auth_secret_encrypted: null, auth_hint: null };
  const sealed = input ? sealAuth(box, input, 'body/upstream_auth') : null;
  return {
    auth_type: sealed?.auth_type ?? null,
    auth_header: sealed?.auth_header ?? null,
    auth_secret_encrypted: sealed?.secret_encrypted ?? null,
    auth_hint: sealed?.hint ?? null,
  };
}

/** Keeps a server's OAuth connection in step with its upstream auth: configured anew, or gone. */
async function syncOAuth(trx: Kysely<DB>, box: SecretBox, workspaceId: string, serverId: string, input: AuthInput | null) {
  if (isOAuth(input)) await configureOAuth(trx, box, workspaceId, serverId, input);
  else await deleteConfig(trx, workspaceId, serverId);
}

/** The server as answers show it, read in the change's transaction. */
async function reread(trx: Kysely<DB>, workspaceId: string, id: string): Promise<McpServer> {
  const row = await repo.findMcpServer(trx, workspaceId, id);
  if (!row) throw notFound('MCP server', id);
  return toMcpServer(row);
}

const slugTaken = (slug: string) => new ApiError('conflict', `an MCP server with slug '${slug}' already exists`);

export const listMcpServers = (db: Kysely<DB>, workspaceId: string, query: PageRequest) =>
  paginate(repo.mcpServersQuery(db, workspaceId), 'created_at', query, toMcpServer);

export async function getMcpServer(db: Kysely<DB>, workspaceId: string, idOrSlug: string): Promise<McpServer> {
  const row = await repo.findMcpServer(db, workspaceId, idOrSlug);
  if (!row) throw notFound('MCP server', idOrSlug);
  return toMcpServer(row);
}

/**
 * Every change writes its `configuration` audit event (audit.service.ts recordChange) first, in
 * the change's transaction: a change that then fails (a slug taken: 409) takes its event with
 * it. The event names the server, never its URL (which may carry credentials).
 */
export async function createMcpServer(
  db: Kysely<DB>,
  box: SecretBox,
  workspaceId: string,
  input: McpServerCreate,
  actor: Actor,
): Promise<McpServer> {
  const slug = input.slug ?? slugify(input.name);
  const transportUrl = checkTransportUrl(input.transport_url);
  const auth = authColumns(box, input.upstream_auth ?? null);
  const id = randomUUID();
  try {
    return await inTransaction(db, async (trx) => {
      await recordChange(trx, workspaceId, actor, {
        action: 'mcp_server.created',
        resource: id,
        context: { slug, name: input.name, fields: Object.keys(input), ...(auth.auth_header ? { upstream_auth: auth.auth_header } : {}) },
      });
      await repo.insertMcpServer(trx, {
        workspace_id: workspaceId,
        id,
        slug,
        name: input.name,
        transport_url: transportUrl,
        transport: input.transport ?? 'auto',
        description: input.description ?? null,
        enabled: input.enabled ?? true,
        ...auth,
      });
      if (input.upstream_auth) await syncOAuth(trx, box, workspaceId, id, input.upstream_auth);
      return reread(trx, workspaceId, id);
    });
  } catch (error) {
    if (isUniqueViolation(error)) throw slugTaken(slug);
    throw error;
  }
}

export async function updateMcpServer(
  db: Kysely<DB>,
  box: SecretBox,
  workspaceId: string,
  idOrSlug: string,
  input: McpServerUpdate,
  actor: Actor,
): Promise<McpServer> {
  const existing = await repo.findMcpServer(db, workspaceId, idOrSlug);
  if (!existing) throw notFound('MCP server', idOrSlug);
  const transportUrl = input.transport_url ? checkTransportUrl(input.transport_url) : undefined;
  // A brokered secret is bound to its destination: a new origin without a new upstream_auth drops
  // the old one (header secret, OAuth client and connections), so a change of URL cannot send it elsewhere.
  const dropped =
    input.upstream_auth === undefined &&
    existing.auth_type !== null &&
    transportUrl !== undefined &&
    movesOrigin(existing.transport_url, transportUrl);
  const auth = dropped ? null : input.upstream_auth;
  const { upstream_auth: _given, ...fields } = input;
  // a new secret (or null) replaces the old: the registry's version bump closes upstream sessions opened with it (mcp-connector.ts)
  const changes = {
    ...fields,
    ...(transportUrl ? { transport_url: transportUrl } : {}),
    ...(auth !== undefined ? authColumns(box, auth) : {}),
  };
  try {
    return await inTransaction(db, async (trx) => {
      await recordChange(trx, workspaceId, actor, {
        action: 'mcp_server.updated',
        resource: existing.id,
        ...(dropped ? { severity: 'medium' as const } : {}),
        context: {
          slug: input.slug ?? existing.slug,
          fields: Object.keys(input),
          ...(dropped ? { upstream_auth_dropped: 'origin_changed' } : {}),
        },
      });
      const row = await repo.updateMcpServer(trx, workspaceId, existing.id, changes);
      if (!row) throw notFound('MCP server', idOrSlug);
      if (auth !== undefined) await syncOAuth(trx, box, workspaceId, existing.id, auth);
      // a person's token is for the server they consented to: a new URL needs a new consent
      else if (existing.auth_type === 'oauth' && changes.transport_url && changes.transport_url !== existing.transport_url)
        await endConnections(trx, workspaceId, existing.id);
      return reread(trx, workspaceId, existing.id);
    });
  } catch (error) {
    if (isUniqueViolation(error)) throw slugTaken(input.slug ?? existing.slug);
    throw error;
  }
}

export async function deleteMcpServer(db: Kysely<DB>, workspaceId: string, idOrSlug: string, actor: Actor) {
  const existing = await repo.findMcpServer(db, workspaceId, idOrSlug);
  if (!existing) throw notFound('MCP server', idOrSlug);
  const deleted = await inTransaction(db, async (trx) => {
    await recordChange(trx, workspaceId, actor, {
      action: 'mcp_server.deleted',
      resource: existing.id,
      severity: 'medium',
      context: { slug: existing.slug, name: existing.name },
    });
    const row = await repo.deleteMcpServer(trx, workspaceId, existing.id);
    if (!row) throw notFound('MCP server', idOrSlug);
    return row;
  });
  return { id: deleted.id, deleted: true as const };
}

export function mcpServersService(db: Kysely<DB>, box: SecretBox, oauth: UpstreamOAuth) {
  return {
    list: (workspaceId: string, query: PageRequest) => listMcpServers(db, workspaceId, query),
    get: (workspaceId: string, idOrSlug: string) => getMcpServer(db, workspaceId, idOrSlug),
    create: (workspaceId: string, input: McpServerCreate, actor: Actor) => createMcpServer(db, box, workspaceId, input, actor),
    // a change that ends OAuth connections revokes their refresh tokens at their servers
    update: async (workspaceId: string, idOrSlug: string, input: McpServerUpdate, actor: Actor) =>
      oauth.ending(workspaceId, (await repo.findMcpServer(db, workspaceId, idOrSlug))?.id, () =>
        updateMcpServer(db, box, workspaceId, idOrSlug, input, actor),
      ),
    remove: async (workspaceId: string, idOrSlug: string, actor: Actor) =>
      oauth.ending(workspaceId, (await repo.findMcpServer(db, workspaceId, idOrSlug))?.id, () =>
        deleteMcpServer(db, workspaceId, idOrSlug, actor),
      ),
    connectOAuth: (workspaceId: string, idOrSlug: string, origin: string, actor: Actor, agent?: string) =>
      oauth.connect(workspaceId, idOrSlug, origin, actor, agent),
    async disconnectOAuth(workspaceId: string, idOrSlug: string, actor: Actor, agent?: string): Promise<McpServer> {
      await oauth.disconnect(workspaceId, idOrSlug, actor, agent);
      return getMcpServer(db, workspaceId, idOrSlug);
    },
    /** The authorization server's answer to a connect (http/upstream-oauth-callback.ts). */
    completeOAuth: (query: URLSearchParams) => oauth.complete(query),
    /** A connection awaiting a dashboard session's confirmation, and its confirmation. */
    oauthConfirmation: (workspaceId: string, id: string, actor: Actor) => oauth.confirmation(workspaceId, id, actor),
    async confirmOAuth(workspaceId: string, id: string, actor: Actor): Promise<McpServer> {
      return getMcpServer(db, workspaceId, await oauth.confirm(workspaceId, id, actor));
    },
  };
}

export type McpServersService = ReturnType<typeof mcpServersService>;
