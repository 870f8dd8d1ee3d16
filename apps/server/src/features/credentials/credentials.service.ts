/**
 * Named upstream credentials of the HTTP proxy (docs/decisions/0020-upstream-credentials.md):
 * secrets Warden adds to an execution that names them (`execution.credential`), only for
 * their hosts. Write-only: answers show the header and a hint, never the secret; the audit
 * events of changes name the credential and the fields changed, never the secret.
 */
import { randomUUID } from 'node:crypto';
import type {
  Credential,
  CredentialCreateWritable as CredentialCreate,
  CredentialUpdateWritable as CredentialUpdate,
} from '@warden/contract';
import type { Kysely } from 'kysely';
import { iso, isUniqueViolation, type PageRequest, paginate } from '../../db/paginate.ts';
import type { DB } from '../../db/schema.ts';
import { inTransaction } from '../../db/transaction.ts';
import type { Actor } from '../../shared/context.ts';
import { ApiError, notFound } from '../../shared/errors.ts';
import { recordChange } from '../audit/audit.service.ts';
import type { SecretBox } from '../webhooks/secrets.ts';
import * as repo from './credentials.repository.ts';
import { authView, openAuth, sealAuth } from './upstream-auth.ts';

export function toCredential(row: repo.CredentialRow): Credential {
  return {
    id: row.id,
    name: row.name,
    description: row.description,
    hosts: row.hosts,
    auth: authView(row.auth_type, row.auth_header, row.hint),
    created_at: iso(row.created_at),
    updated_at: iso(row.updated_at),
  };
}

const normaliseHosts = (hosts: string[]) => [...new Set(hosts.map((h) => h.toLowerCase().replace(/\.$/, '')))];
const nameTaken = (name: string) => new ApiError('conflict', `a credential named '${name}' already exists`);

/** A credential as the HTTP proxy uses it: its hosts and its header, opened. */
export interface ResolvedCredential {
  name: string;
  hosts: string[];
  header: string;
  /** Opens the secret: called only once the request is allowed and about to be sent. */
  value: () => string;
}

export function credentialsService(db: Kysely<DB>, box: SecretBox) {
  const find = async (workspaceId: string, idOrName: string) => {
    const row = await repo.findCredential(db, workspaceId, idOrName);
    if (!row) throw notFound('credential', idOrName);
    return row;
  };
  return {
    list: (workspaceId: string, query: PageRequest) => paginate(repo.credentialsQuery(db, workspaceId), 'created_at', query, toCredential),
    get: async (workspaceId: string, idOrName: string) => toCredential(await find(workspaceId, idOrName)),

    async create(workspaceId: string, input: CredentialCreate, actor: Actor): Promise<Credential> {
      const sealed = sealAuth(box, input.auth, 'body/auth');
      const hosts = normaliseHosts(input.hosts);
      const id = randomUUID();
      try {
        return await inTransaction(db, async (trx) => {
          await recordChange(trx, workspaceId, actor, {
            action: 'credential.created',
            resource: id,
            context: { name: input.name, hosts, header: sealed.auth_header },
          });
          const row = await repo.insertCredential(trx, {
            workspace_id: workspaceId,
            id,
            name: input.name,
            description: input.description ?? null,
            hosts,
            ...sealed,
          });
          return toCredential(row);
        });
      } catch (error) {
        if (isUniqueViolation(error)) throw nameTaken(input.name);
        throw error;
      }
    },

    async update(workspaceId: string, idOrName: string, input: CredentialUpdate, actor: Actor): Promise<Credential> {
      const existing = await find(workspaceId, idOrName);
      // A brokered secret is bound to its destinations: sending it to a host it was not given for needs it given again.
      const added = input.hosts ? normaliseHosts(input.hosts).filter((host) => !existing.hosts.includes(host)) : [];
      if (added.length > 0 && !input.auth)
        throw new ApiError(
          'invalid_request',
          `body/auth: adding hosts (${added.join(', ')}) sends the secret to new destinations; give the secret again (auth) in the same request`,
        );
      const changes = {
        ...(input.description !== undefined ? { description: input.description } : {}),
        ...(input.hosts ? { hosts: normaliseHosts(input.hosts) } : {}),
        ...(input.auth ? sealAuth(box, input.auth, 'body/auth') : {}),
      };
      return inTransaction(db, async (trx) => {
        await recordChange(trx, workspaceId, actor, {
          action: 'credential.updated',
          resource: existing.id,
          context: { name: existing.name, fields: Object.keys(input), ...(changes.hosts ? { hosts: changes.hosts } : {}) },
        });
        const row = await repo.updateCredential(trx, workspaceId, existing.id, changes);
        if (!row) throw notFound('credential', idOrName);
        return toCredential(row);
      });
    },

    async remove(workspaceId: string, idOrName: string, actor: Actor) {
      const existing = await find(workspaceId, idOrName);
      const deleted = await inTransaction(db, async (trx) => {
        await recordChange(trx, workspaceId, actor, {
          action: 'credential.deleted',
          resource: existing.id,
          severity: 'medium',
          context: { name: existing.name },
        });
        const row = await repo.deleteCredential(trx, workspaceId, existing.id);
        if (!row) throw notFound('credential', idOrName);
        return row;
      });
      return { id: deleted.id, deleted: true as const };
    },

    /** The credential an execution names, read at each use (a rotation is seen at the next request); 404 credential_not_found. */
    async resolve(workspaceId: string, name: string): Promise<ResolvedCredential> {
      const row = await repo.findCredential(db, workspaceId, name);
      if (!row || row.name !== name) throw new ApiError('credential_not_found', `no credential named '${name}' in this workspace`);
      return {
        name: row.name,
        hosts: row.hosts,
        header: row.auth_header,
        value: () => openAuth(box, row.auth_type, row.auth_header, row.secret_encrypted)[1],
      };
    },
  };
}

export type CredentialsService = ReturnType<typeof credentialsService>;
