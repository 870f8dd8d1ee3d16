/** Policies: stored with their rules; every change bumps `version` and fires `policy.updated`. */
import { randomUUID } from 'node:crypto';
import type { Policy, PolicyBundleApply, PolicyCreate, PolicyRule, PolicySimulationRequest, PolicyUpdate } from '@warden/contract';
import type { Kysely } from 'kysely';
import { isUniqueViolation, type PageRequest, paginate } from '../../db/paginate.ts';
import type { DB } from '../../db/schema.ts';
import { inTransaction } from '../../db/transaction.ts';
import type { Actor } from '../../shared/context.ts';
import { ApiError, notFound } from '../../shared/errors.ts';
import { recordChange } from '../audit/audit.service.ts';
import { recordEvent } from '../events/outbox.repository.ts';
import { checkPolicyCount, checkWorkspaceLimits, type RuleTotals, ruleTotals } from './limits.ts';
import * as repo from './policies.repository.ts';
import { applyPolicyBundle } from './policy-bundles.ts';
import { toPolicy } from './policy-forms.ts';
import { checkLimits, checkRules } from './rule-checks.ts';
import type { Simulations } from './simulate-runner.ts';

const nameTaken = (name: string) => new ApiError('conflict', `a policy named '${name}' already exists`);

/** The workspace limits (policies; rules, globs, glob characters of all its policies, enabled or not), under repo.lockWorkspace. */
async function checkWorkspaceTotals(trx: Kysely<DB>, workspaceId: string, rules: readonly PolicyRule[], exceptPolicy?: string) {
  const totals: RuleTotals = { rules: 0, globs: 0, globCharacters: 0 };
  const others = await repo.policyRules(trx, workspaceId, exceptPolicy);
  const tooMany = checkPolicyCount(others.length + 1);
  if (tooMany) throw new ApiError('invalid_policy', tooMany);
  for (const row of others) {
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

/**
 * Every change writes its `configuration` audit event (audit.service.ts recordChange) in the
 * change's transaction, once the workspace is locked and before the change itself: a change
 * that then fails (a name taken: 409) takes its event with it.
 */
export async function createPolicy(db: Kysely<DB>, workspaceId: string, input: PolicyCreate, actor: Actor): Promise<Policy> {
  const rules = input.rules ?? [];
  checkLimits(rules);
  checkRules(rules);
  const id = randomUUID();
  try {
    return await inTransaction(db, async (trx) => {
      await repo.lockWorkspace(trx, workspaceId);
      await checkWorkspaceTotals(trx, workspaceId, rules);
      await recordChange(trx, workspaceId, actor, {
        action: 'policy.created',
        resource: id,
        context: { name: input.name, rules: rules.length, fields: Object.keys(input) },
      });
      const row = await repo.insertPolicy(trx, {
        workspace_id: workspaceId,
        id,
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
  actor: Actor,
): Promise<Policy> {
  if (input.rules) {
    checkLimits(input.rules);
    checkRules(input.rules);
  }
  const existing = await repo.findPolicy(db, workspaceId, idOrName);
  if (!existing) throw notFound('policy', idOrName);
  const { rules, ...fields } = input;
  try {
    return await inTransaction(db, async (trx) => {
      await repo.lockWorkspace(trx, workspaceId);
      if (rules) await checkWorkspaceTotals(trx, workspaceId, rules, existing.id);
      await recordChange(trx, workspaceId, actor, {
        action: 'policy.updated',
        resource: existing.id,
        context: { name: input.name ?? existing.name, fields: Object.keys(input) },
      });
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

/**
 * The delete's trigger bumps the workspace's policy version in the same transaction, so every
 * process stops deciding with the policy at its next request, as after a PATCH.
 */
export async function deletePolicy(
  db: Kysely<DB>,
  workspaceId: string,
  idOrName: string,
  actor: Actor,
): Promise<{ id: string; deleted: true }> {
  const existing = await repo.findPolicy(db, workspaceId, idOrName);
  if (!existing) throw notFound('policy', idOrName);
  await inTransaction(db, async (trx) => {
    await repo.lockWorkspace(trx, workspaceId);
    await recordChange(trx, workspaceId, actor, {
      action: 'policy.deleted',
      resource: existing.id,
      severity: 'medium',
      context: { name: existing.name, rules: (existing.rules as PolicyRule[]).length },
    });
    const row = await repo.deletePolicy(trx, workspaceId, existing.id);
    if (!row) throw notFound('policy', idOrName);
    await recordEvent(trx, workspaceId, 'policy.updated', { policy: toPolicy(row), change: 'deleted' });
  });
  return { id: existing.id, deleted: true };
}

/** `simulations`: where what-if replays run (simulate-runner.ts; built by the composition root). */
export function policiesService(db: Kysely<DB>, simulations: Simulations) {
  return {
    list: (workspaceId: string, query: PageRequest & { enabled?: boolean }) => listPolicies(db, workspaceId, query),
    get: (workspaceId: string, idOrName: string) => getPolicy(db, workspaceId, idOrName),
    create: (workspaceId: string, input: PolicyCreate, actor: Actor) => createPolicy(db, workspaceId, input, actor),
    update: (workspaceId: string, idOrName: string, input: PolicyUpdate, actor: Actor) =>
      updatePolicy(db, workspaceId, idOrName, input, actor),
    remove: (workspaceId: string, idOrName: string, actor: Actor) => deletePolicy(db, workspaceId, idOrName, actor),
    simulate: (workspaceId: string, request: PolicySimulationRequest) => simulations.simulate(workspaceId, request),
    applyBundle: (workspaceId: string, input: PolicyBundleApply, actor: Actor) => applyPolicyBundle(db, workspaceId, input, actor),
  };
}

export type PoliciesService = ReturnType<typeof policiesService>;
