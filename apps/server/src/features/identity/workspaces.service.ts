/**
 * Workspaces and their API keys. Keys are `wk_` + 32 random bytes (base64url): high entropy,
 * readable prefix. Only their SHA-256 is stored; a key is shown once, when created.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import type { Permission } from '@warden/contract';
import type { Kysely } from 'kysely';
import { iso, type PageRequest, paginate } from '../../db/paginate.ts';
import type { DB } from '../../db/schema.ts';
import { inTransaction } from '../../db/transaction.ts';
import type { Actor } from '../../shared/context.ts';
import { hashSecret } from '../../shared/crypto.ts';
import { ApiError, notFound } from '../../shared/errors.ts';
import { recordChange } from '../audit/audit.service.ts';
import { agentBearerIdentity } from './agent-bearer.ts';
import * as repo from './workspaces.repository.ts';

export const ALL_PERMISSIONS: readonly Permission[] = [
  'agents:read',
  'agents:write',
  'policies:read',
  'policies:write',
  'approvals:read',
  'approvals:write',
  'approvals:decide',
  'audit:read',
  'audit:write',
  'compliance:read',
  'mcp_servers:read',
  'mcp_servers:write',
  'runtime:evaluate',
  'runtime:execute',
  'admin',
];

export class AdminError extends Error {}

export const generateApiKey = () => `wk_${randomBytes(32).toString('base64url')}`;

/** What key listings show of a key: `wk_` and 4 characters, a small part of any key (bootstrap keys have 32 or more). */
export const displayPrefix = (key: string) => key.slice(0, 7);

export function parsePermissions(list: string): Permission[] {
  const names = list
    .split(',')
    .map((name) => name.trim())
    .filter(Boolean);
  if (names.length === 1 && names[0] === '*') return [...ALL_PERMISSIONS];
  for (const name of names) {
    if (!ALL_PERMISSIONS.includes(name as Permission)) {
      throw new AdminError(`unknown permission '${name}' (known: ${ALL_PERMISSIONS.join(', ')}, or *)`);
    }
  }
  if (names.length === 0) throw new AdminError('at least one permission is required');
  return [...new Set(names)] as Permission[];
}

const SLUG = /^[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?$/;

export async function createWorkspace(db: Kysely<DB>, slug: string, name?: string) {
  if (!SLUG.test(slug)) throw new AdminError(`invalid workspace slug '${slug}': lower-case letters, digits and inner hyphens`);
  if (await repo.findWorkspaceBySlug(db, slug)) throw new AdminError(`workspace '${slug}' already exists`);
  const row = await repo.insertWorkspace(db, { id: randomUUID(), slug, name: name ?? slug });
  return { id: row.id, slug: row.slug, name: row.name };
}

async function requireWorkspace(db: Kysely<DB>, slug: string) {
  const workspace = await repo.findWorkspaceBySlug(db, slug);
  if (!workspace) throw new AdminError(`workspace '${slug}' does not exist`);
  return workspace;
}

/**
 * Creates a key and, in the same transaction, its `api_key.created` audit event (its name and
 * permissions, never the key). `actor` null records no event: only for the bootstrap key,
 * provisioned from the server's own environment (WARDEN_BOOTSTRAP_KEY) at start.
 */
export async function createApiKey(
  db: Kysely<DB>,
  input: { workspace: string; permissions: Permission[]; name?: string; key?: string },
  actor: Actor | null,
) {
  const workspace = await requireWorkspace(db, input.workspace);
  const key = input.key ?? generateApiKey();
  const id = randomUUID();
  const name = input.name ?? 'api key';
  const row = await inTransaction(db, async (trx) => {
    if (actor) {
      await recordChange(trx, workspace.id, actor, {
        action: 'api_key.created',
        resource: id,
        context: { name, permissions: input.permissions },
      });
    }
    return repo.insertApiKey(trx, {
      workspace_id: workspace.id,
      id,
      name,
      prefix: displayPrefix(key),
      key_hash: hashSecret(key),
      permissions: input.permissions,
    });
  });
  return { key, id: row.id, workspace: workspace.slug, name: row.name, permissions: row.permissions };
}

/** Revokes a key and, in the same transaction, writes its `api_key.revoked` audit event (severity medium). */
export async function revokeApiKey(db: Kysely<DB>, id: string, actor: Actor) {
  if (!/^[0-9a-f-]{36}$/i.test(id)) throw new AdminError(`no active key with id '${id}'`);
  const revoked = await revokeKeyRow(db, id, actor);
  if (!revoked) throw new AdminError(`no active key with id '${id}'`);
  return { id, revoked: true };
}

/** Revokes the active key `id` (of `workspaceId` when given) with its audit event; undefined when there is none. */
async function revokeKeyRow(db: Kysely<DB>, id: string, actor: Actor, workspaceId?: string) {
  return inTransaction(db, async (trx) => {
    const row = await repo.revokeApiKey(trx, id, workspaceId);
    if (row) {
      await recordChange(trx, row.workspace_id, actor, {
        action: 'api_key.revoked',
        resource: row.id,
        severity: 'medium',
        context: { name: row.name },
      });
    }
    return row;
  });
}

export async function listApiKeys(db: Kysely<DB>, workspace: string) {
  const ws = await requireWorkspace(db, workspace);
  return (await repo.listApiKeys(db, ws.id)).map((row) => ({
    id: row.id,
    name: row.name,
    prefix: row.prefix,
    permissions: row.permissions,
    created_at: new Date(row.created_at).toISOString(),
    revoked_at: row.revoked_at ? new Date(row.revoked_at).toISOString() : null,
  }));
}

/**
 * WARDEN_BOOTSTRAP_KEY: make sure workspace `default` and a key of exactly this value with
 * every permission exist. Idempotent, so every start may run it; a revoked bootstrap key is
 * not brought back.
 */
export async function ensureBootstrapKey(db: Kysely<DB>, key: string) {
  const workspace = (await repo.findWorkspaceBySlug(db, 'default')) ?? (await createWorkspace(db, 'default', 'Default workspace'));
  const hash = hashSecret(key);
  // A key revoked by an admin stays revoked, even if the environment still names it.
  if (await repo.findKeyByHash(db, hash)) return;
  await createApiKey(db, { workspace: workspace.slug, permissions: [...ALL_PERMISSIONS], name: 'bootstrap', key }, null);
}

type ApiKeyRow = NonNullable<Awaited<ReturnType<typeof repo.findApiKey>>>;

const toApiKey = (row: ApiKeyRow) => ({
  id: row.id,
  name: row.name,
  prefix: row.prefix,
  permissions: row.permissions as Permission[],
  created_at: iso(row.created_at),
  revoked_at: row.revoked_at ? iso(row.revoked_at) : null,
});

/*
 * The dashboard's keys: scoped to the session's workspace by id, errors as ApiError. Issuing
 * follows the CLI's rules (parsePermissions) and grants only what the granting key holds, so
 * no permission (approvals:decide above all) is reached through a key that lacks it.
 */

export const listWorkspaceKeys = (db: Kysely<DB>, workspaceId: string, page: PageRequest) =>
  paginate(repo.apiKeysQuery(db, workspaceId), 'created_at', page, toApiKey);

export async function issueWorkspaceKey(
  db: Kysely<DB>,
  workspaceId: string,
  input: { name: string; permissions: readonly string[] },
  granter: ReadonlySet<Permission>,
  actor: Actor,
) {
  let permissions: Permission[];
  try {
    permissions = parsePermissions(input.permissions.join(','));
  } catch (error) {
    if (error instanceof AdminError) throw new ApiError('invalid_request', `permissions: ${error.message}`);
    throw error;
  }
  const lacking = permissions.filter((p) => !granter.has(p));
  if (lacking.length > 0) {
    throw new ApiError('insufficient_permission', `This key lacks ${lacking.join(', ')}, so it cannot grant it to another key`);
  }
  const workspace = await repo.findWorkspaceById(db, workspaceId);
  if (!workspace) throw notFound('workspace', workspaceId);
  const created = await createApiKey(db, { workspace: workspace.slug, permissions, name: input.name }, actor);
  const row = await repo.findApiKey(db, workspaceId, created.id);
  if (!row) throw notFound('API key', created.id);
  return { key: toApiKey(row), secret: created.key };
}

export async function revokeWorkspaceKey(db: Kysely<DB>, workspaceId: string, id: string, actor: Actor, ownKeyId: string) {
  if (id === ownKeyId) {
    throw new ApiError(
      'conflict',
      'this session signed in with this key: sign in with another key to revoke it, or run warden keys revoke',
    );
  }
  if (!(await revokeKeyRow(db, id, actor, workspaceId))) throw notFound('active API key', id);
  const row = await repo.findApiKey(db, workspaceId, id);
  if (!row) throw notFound('API key', id);
  return toApiKey(row);
}

/** Workspaces and keys as the composition root hands them out (to the HTTP layer and the admin commands). */
export function workspacesService(db: Kysely<DB>) {
  return {
    /** The active key with this hash, with what authentication needs of its workspace. */
    findActiveKey: (keyHash: string) => repo.findActiveKeyByHash(db, keyHash),
    /** The identity an agent key sent as the bearer token stands for (agent-bearer.ts). */
    findAgentBearer: (bearer: string, keyHash: string, defaultRateLimit: number) =>
      agentBearerIdentity(db, bearer, keyHash, defaultRateLimit),
    /** The id of the workspace with this slug; AdminError if there is none. */
    workspaceIdOf: async (slug: string) => (await requireWorkspace(db, slug)).id,
    createWorkspace: (slug: string, name?: string) => createWorkspace(db, slug, name),
    createApiKey: (input: Parameters<typeof createApiKey>[1], actor: Actor) => createApiKey(db, input, actor),
    revokeApiKey: (id: string, actor: Actor) => revokeApiKey(db, id, actor),
    listApiKeys: (workspace: string) => listApiKeys(db, workspace),
    ensureBootstrapKey: (key: string) => ensureBootstrapKey(db, key),
    listKeys: (workspaceId: string, page: PageRequest) => listWorkspaceKeys(db, workspaceId, page),
    issueKey: (workspaceId: string, input: Parameters<typeof issueWorkspaceKey>[2], granter: ReadonlySet<Permission>, actor: Actor) =>
      issueWorkspaceKey(db, workspaceId, input, granter, actor),
    revokeKey: (workspaceId: string, id: string, actor: Actor, ownKeyId: string) =>
      revokeWorkspaceKey(db, workspaceId, id, actor, ownKeyId),
  };
}

export type WorkspacesService = ReturnType<typeof workspacesService>;
