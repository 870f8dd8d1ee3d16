/**
 * Compiled policy sets, cached per workspace by policy version. The version is bumped by a
 * trigger in the same transaction as any policy change (and any change of the workspace's
 * default decisions, which the set carries) and read together with the caller's API key, so
 * every server process sees a change at its next request, with no extra query.
 */
import type { PolicyRule } from '@warden/contract';
import type { Kysely } from 'kysely';
import type { DB } from '../../db/schema.ts';
import { loadPolicySettings } from '../settings/settings.service.ts';
import { compilePolicySet, type PolicySet } from './engine.ts';
import { enabledPolicies } from './policies.repository.ts';

const MAX_WORKSPACES = 10_000;

export class PolicyCache {
  private readonly sets = new Map<string, { version: number; set: Promise<PolicySet> }>();

  constructor(private readonly db: Kysely<DB>) {}

  get(workspaceId: string, version: number): Promise<PolicySet> {
    const cached = this.sets.get(workspaceId);
    if (cached && cached.version === version) return cached.set;
    // Policies and defaults are read after the version was, so they are at least that new:
    // caching them under that version can only cause one extra reload, never a stale decision.
    const set = Promise.all([enabledPolicies(this.db, workspaceId), loadPolicySettings(this.db, workspaceId)]).then(
      ([rows, { defaults, agentsHoldNoCredentials, auditMcpArguments }]) => ({
        ...compilePolicySet(
          rows.map((row) => ({
            name: row.name,
            mode: row.mode,
            priority: row.priority,
            version: row.version,
            rules: row.rules as PolicyRule[],
          })),
          defaults,
        ),
        agentsHoldNoCredentials,
        auditMcpArguments,
      }),
    );
    set.catch(() => this.sets.delete(workspaceId));
    this.sets.delete(workspaceId);
    if (this.sets.size >= MAX_WORKSPACES) this.sets.delete(this.sets.keys().next().value as string);
    this.sets.set(workspaceId, { version, set });
    return set;
  }
}
