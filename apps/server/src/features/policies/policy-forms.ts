/**
 * The forms of a policy: as the API answers it (`toPolicy`), as a bundle would state a stored
 * one (`storedPolicy`), and canonical, every default the API applies stated, so that a policy
 * file and the stored policy it saved as compare equal; and a bundle's digest over its policies
 * in that form, by name (keys sorted: shared/canonical-json.ts), the same wherever the files
 * come from, its default decisions included when it states them.
 */
import { createHash } from 'node:crypto';
import type { DefaultDecisionsChange, Policy, PolicyCreate, PolicyRule } from '@warden/contract';
import { iso } from '../../db/paginate.ts';
import { stableJson } from '../../shared/canonical-json.ts';
import type { PolicyRow } from './policies.repository.ts';

export function toPolicy(row: PolicyRow): Policy {
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

/** A stored policy (a row, or the API's `Policy`) as the bundle would state it. */
export const storedPolicy = (row: Pick<PolicyRow, 'name' | 'description' | 'enabled' | 'mode' | 'priority' | 'rules'>): PolicyCreate => ({
  name: row.name,
  description: row.description ?? undefined,
  enabled: row.enabled,
  mode: row.mode as PolicyCreate['mode'],
  priority: row.priority,
  rules: row.rules as PolicyRule[],
});

export const canonicalPolicy = (policy: PolicyCreate) => ({
  name: policy.name,
  description: policy.description ?? null,
  enabled: policy.enabled ?? true,
  mode: policy.mode ?? 'enforce',
  priority: policy.priority ?? 100,
  rules: policy.rules ?? [],
});

export type CanonicalPolicy = ReturnType<typeof canonicalPolicy>;

/** The fields in which two canonical policies differ (stableJson compares rules whatever their keys' order). */
export const changedFields = (a: CanonicalPolicy, b: CanonicalPolicy) =>
  (Object.keys(a) as (keyof CanonicalPolicy)[]).filter((key) => stableJson(a[key]) !== stableJson(b[key]));

/** A bundle without default decisions keeps the digest of its policies alone (the form before bundles carried them). */
export function bundleDigest(policies: readonly PolicyCreate[], defaults?: DefaultDecisionsChange): string {
  const canonical = policies.map(canonicalPolicy).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const form = defaults ? { default_decision: defaults, policies: canonical } : canonical;
  return createHash('sha256').update(stableJson(form)).digest('hex');
}
