/** Policies: stored with their rules; every change bumps `version` and fires `policy.updated`. */
import { randomUUID } from 'node:crypto';
import type { Policy, PolicyCreate, PolicyRule, PolicyUpdate } from '@warden/contract';
import type { Kysely } from 'kysely';
import { iso, isUniqueViolation, type PageRequest, paginate } from '../../db/paginate.ts';
import type { DB } from '../../db/schema.ts';
import { ApiError, notFound } from '../../http/errors.ts';
import { recordEvent } from '../events/outbox.ts';
import { checkConditionLimits } from './cel.ts';
import { checkPolicyLimits, checkWorkspaceLimits, type RuleTotals, ruleTotals } from './limits.ts';
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

/** The limits one policy's rules must keep by themselves (limits.ts): 400 `invalid_policy` naming the rule and the limit. */
function checkLimits(rules: readonly PolicyRule[]): void {
  const broken = checkPolicyLimits(rules);
  if (broken) throw new ApiError('invalid_policy', broken);
  for (const [index, rule] of rules.entries()) {
    if (rule.condition === undefined) continue;
    const failure = checkConditionLimits(rule.condition);
    if (!failure) continue;
    const name = rule.id ? `rules[${index}] ('${rule.id}')` : `rules[${index}]`;
    const at = failure.position === null ? '' : ` at position ${failure.position}`;
    throw new ApiError('invalid_policy', `${name}.condition: ${failure.message}${at}`);
  }
}

/**
 * Locks the workspace's row, first thing in a transaction that writes a policy: the trigger
 * that bumps its policy version takes that lock anyway, and taking it before the policy's row
 * (always in this order) lets the limits below count without two saves both passing.
 */
const lockWorkspace = (trx: Kysely<DB>, workspaceId: string) =>
  trx.selectFrom('workspaces').select('id').where('id', '=', workspaceId).forUpdate().executeTakeFirst();

/** The workspace limits (rules, globs, glob characters of all its policies, enabled or not), under lockWorkspace. */
async function checkWorkspaceTotals(trx: Kysely<DB>, workspaceId: string, rules: readonly PolicyRule[], exceptPolicy?: string) {
  let others = trx.selectFrom('policies').select('rules').where('workspace_id', '=', workspaceId);
  if (exceptPolicy) others = others.where('id', '!=', exceptPolicy);
  const totals: RuleTotals = { rules: 0, globs: 0, globCharacters: 0 };
  for (const row of await others.execute()) {
    const own = ruleTotals(row.rules as PolicyRule[]);
    totals.rules += own.rules;
    totals.globs += own.globs;
    totals.globCharacters += own.globCharacters;
  }
  const broken = checkWorkspaceLimits(ruleTotals(rules), totals);
  if (broken) throw new ApiError('invalid_policy', broken);
}

export const listPolicies = (db: Kysely<DB>, workspaceId: string, query: PageRequest & { enabled?: boolean }) =>
  paginate(repo.policiesQuery(db, workspaceId, query), 'created_at', query, toPolicy);

export async function getPolicy(db: Kysely<DB>, workspaceId: string, idOrName: string): Promise<Policy> {
  const row = await repo.findPolicy(db, workspaceId, idOrName);
  if (!row) throw notFound('policy', idOrName);
  return toPolicy(row);
}

export async function createPolicy(db: Kysely<DB>, workspaceId: string, input: PolicyCreate, checkRules: RuleChecker): Promise<Policy> {
  const rules = input.rules ?? [];
  checkLimits(rules);
  checkRules(rules);
  try {
    return await db.transaction().execute(async (trx) => {
      await lockWorkspace(trx, workspaceId);
      await checkWorkspaceTotals(trx, workspaceId, rules);
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
  if (input.rules) {
    checkLimits(input.rules);
    checkRules(input.rules);
  }
  const existing = await repo.findPolicy(db, workspaceId, idOrName);
  if (!existing) throw notFound('policy', idOrName);
  const { rules, ...fields } = input;
  try {
    return await db.transaction().execute(async (trx) => {
      await lockWorkspace(trx, workspaceId);
      if (rules) await checkWorkspaceTotals(trx, workspaceId, rules, existing.id);
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
