/** Policies: stored with their rules; every change bumps `version` and fires `policy.updated`. */
import { randomUUID } from 'node:crypto';
import type { Policy, PolicyCreate, PolicyRule, PolicyUpdate } from '@warden/contract';
import type { Kysely } from 'kysely';
import { iso, isUniqueViolation, type PageRequest, paginate } from '../../db/paginate.ts';
import type { DB } from '../../db/schema.ts';
import { ApiError, notFound } from '../../http/errors.ts';
import { recordEvent } from '../events/outbox.ts';
import * as repo from './policies.repository.ts';

export function toPolicy(row: repo.PolicyRow): Policy {
  return {
    id: row.id,
    name: row.name,
    description: row.description,
    enabled: row.enabled,
    mode: row.mode as Policy['mode'],
    priority: row.priority,
    rules: row.rules as PolicyRule[],
    version: row.version,
    created_at: iso(row.created_at),
    updated_at: iso(row.updated_at),
  };
}

/** Hook for checks the schema cannot express (CEL conditions); throws ApiError('invalid_policy'). */
export type RuleChecker = (rules: PolicyRule[]) => void;

const nameTaken = (name: string) => new ApiError('conflict', `a policy named '${name}' already exists`);

export const listPolicies = (db: Kysely<DB>, workspaceId: string, query: PageRequest & { enabled?: boolean }) =>
  paginate(repo.policiesQuery(db, workspaceId, query), 'created_at', query, toPolicy);

export async function getPolicy(db: Kysely<DB>, workspaceId: string, idOrName: string): Promise<Policy> {
  const row = await repo.findPolicy(db, workspaceId, idOrName);
  if (!row) throw notFound('policy', idOrName);
  return toPolicy(row);
}

export async function createPolicy(db: Kysely<DB>, workspaceId: string, input: PolicyCreate, checkRules: RuleChecker): Promise<Policy> {
  const rules = input.rules ?? [];
  checkRules(rules);
  try {
    return await db.transaction().execute(async (trx) => {
      const row = await repo.insertPolicy(trx, {
        workspace_id: workspaceId,
        id: randomUUID(),
        name: input.name,
        description: input.description ?? null,
        enabled: input.enabled ?? true,
        mode: input.mode ?? 'enforce',
        priority: input.priority ?? 100,
        rules: JSON.stringify(rules),
      });
      const policy = toPolicy(row);
      await recordEvent(trx, workspaceId, 'policy.updated', { policy, change: 'created' });
      return policy;
    });
  } catch (error) {
    if (isUniqueViolation(error)) throw nameTaken(input.name);
    throw error;
  }
}

export async function updatePolicy(
  db: Kysely<DB>,
  workspaceId: string,
  idOrName: string,
  input: PolicyUpdate,
  checkRules: RuleChecker,
): Promise<Policy> {
  if (input.rules) checkRules(input.rules);
  const existing = await repo.findPolicy(db, workspaceId, idOrName);
  if (!existing) throw notFound('policy', idOrName);
  const { rules, ...fields } = input;
  try {
    return await db.transaction().execute(async (trx) => {
      const row = await repo.updatePolicy(trx, workspaceId, existing.id, { ...fields, ...(rules ? { rules: JSON.stringify(rules) } : {}) });
      if (!row) throw notFound('policy', idOrName);
      const policy = toPolicy(row);
      await recordEvent(trx, workspaceId, 'policy.updated', { policy, change: 'updated' });
      return policy;
    });
  } catch (error) {
    if (isUniqueViolation(error)) throw nameTaken(input.name ?? existing.name);
    throw error;
  }
}
