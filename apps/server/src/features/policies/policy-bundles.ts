/**
 * `POST /policies/bundle`: the workspace's policies made those of a bundle (policies as code,
 * `warden policies apply`), as one change: one transaction, one `policies.bundle_applied`
 * audit event naming the bundle's digest and source; `policy.updated` for each policy changed.
 * A bundle that states default decisions sets them in the same change.
 * The same bundle applied again changes and records nothing.
 */
import { randomUUID } from 'node:crypto';
import type { PolicyBundleApply, PolicyBundleResult, PolicyRule } from '@warden/contract';
import type { Kysely } from 'kysely';
import type { DB } from '../../db/schema.ts';
import { inTransaction } from '../../db/transaction.ts';
import type { Actor } from '../../shared/context.ts';
import { ApiError } from '../../shared/errors.ts';
import { recordChange } from '../audit/audit.service.ts';
import { recordEvent } from '../events/outbox.repository.ts';
import { changedDefaults, loadDefaultDecisions, setDefaultDecisions } from '../settings/settings.service.ts';
import { checkPolicyCount, checkWorkspaceLimits, ruleTotals } from './limits.ts';
import * as repo from './policies.repository.ts';
import { bundleDigest, canonicalPolicy, changedFields, storedPolicy, toPolicy } from './policy-forms.ts';
import { checkLimits, checkRules } from './rule-checks.ts';

/** Each policy checked as createPolicy checks it, its name in the message. */
function checkBundle(input: PolicyBundleApply): void {
  const names = new Set<string>();
  for (const policy of input.policies) {
    if (names.has(policy.name)) throw new ApiError('invalid_request', `the bundle has two policies named '${policy.name}'`);
    names.add(policy.name);
    try {
      checkLimits(policy.rules ?? []);
      checkRules(policy.rules ?? []);
    } catch (error) {
      if (error instanceof ApiError) throw new ApiError(error.code, `policy '${policy.name}': ${error.message}`);
      throw error;
    }
  }
}

export async function applyPolicyBundle(
  db: Kysely<DB>,
  workspaceId: string,
  input: PolicyBundleApply,
  actor: Actor,
): Promise<PolicyBundleResult> {
  checkBundle(input);
  const digest = bundleDigest(input.policies, input.default_decision);
  const dryRun = input.dry_run === true;
  return inTransaction(db, async (trx) => {
    await repo.lockWorkspace(trx, workspaceId);
    const existing = new Map((await repo.policiesQuery(trx, workspaceId, {}).execute()).map((row) => [row.name, row]));
    const defaultsChanged = changedDefaults(await loadDefaultDecisions(trx, workspaceId), input.default_decision);
    const wanted = input.policies.map(canonicalPolicy);
    const created = wanted.filter((policy) => !existing.has(policy.name));
    const updated = wanted.filter((policy) => {
      const row = existing.get(policy.name);
      return row !== undefined && changedFields(canonicalPolicy(storedPolicy(row)), policy).length > 0;
    });
    const named = new Set(wanted.map((policy) => policy.name));
    const deleted = input.prune ? [...existing.values()].filter((row) => !named.has(row.name)) : [];
    const result: PolicyBundleResult = {
      digest,
      dry_run: dryRun,
      created: created.map((p) => p.name),
      updated: updated.map((p) => p.name),
      deleted: deleted.map((row) => row.name),
      unchanged: wanted.filter((p) => existing.has(p.name) && !updated.includes(p)).map((p) => p.name),
      default_decision_changed: defaultsChanged,
      audit_event_id: null,
    };
    // the workspace as it would be: the bundle's policies and, without prune, the others kept
    const kept = [...existing.values()].filter((row) => !named.has(row.name) && !input.prune);
    const broken = checkWorkspaceLimits(
      ruleTotals([...wanted.flatMap((p) => p.rules), ...kept.flatMap((row) => row.rules as PolicyRule[])]),
      {
        rules: 0,
        globs: 0,
        globCharacters: 0,
      },
    );
    if (broken) throw new ApiError('invalid_policy', broken.replace("with this policy's", "with this bundle's"));
    const tooMany = checkPolicyCount(wanted.length + kept.length);
    if (tooMany) throw new ApiError('invalid_policy', tooMany);
    if (dryRun || created.length + updated.length + deleted.length + defaultsChanged.length === 0) return result;

    const event = await recordChange(trx, workspaceId, actor, {
      action: 'policies.bundle_applied',
      resource: digest,
      // a deletion, or a default decision loosened to allow, is a change to look at
      severity:
        deleted.length > 0 || defaultsChanged.some((environment) => input.default_decision?.[environment] === 'allow') ? 'medium' : 'info',
      context: {
        digest,
        source: input.source ?? {},
        created: result.created,
        updated: result.updated,
        deleted: result.deleted,
        ...(defaultsChanged.length
          ? {
              default_decision: Object.fromEntries(
                defaultsChanged.map((environment) => [environment, input.default_decision?.[environment]]),
              ),
            }
          : {}),
      },
    });
    if (defaultsChanged.length > 0) await setDefaultDecisions(trx, workspaceId, input.default_decision ?? {});
    for (const policy of created) {
      const row = await repo.insertPolicy(trx, {
        workspace_id: workspaceId,
        id: randomUUID(),
        ...policy,
        rules: JSON.stringify(policy.rules),
      });
      await recordEvent(trx, workspaceId, 'policy.updated', { policy: toPolicy(row), change: 'created' });
    }
    for (const policy of updated) {
      const id = existing.get(policy.name)?.id as string;
      const row = await repo.updatePolicy(trx, workspaceId, id, { ...policy, rules: JSON.stringify(policy.rules) });
      if (row) await recordEvent(trx, workspaceId, 'policy.updated', { policy: toPolicy(row), change: 'updated' });
    }
    for (const old of deleted) {
      const row = await repo.deletePolicy(trx, workspaceId, old.id);
      if (row) await recordEvent(trx, workspaceId, 'policy.updated', { policy: toPolicy(row), change: 'deleted' });
    }
    return { ...result, audit_event_id: event.id };
  });
}
