/**
 * Workspace settings: the default decision per agent environment for an act that no rule of an
 * enforcing policy matches, whether agents may hold upstream credentials (the HTTP proxy
 * refuses their credential headers when not: decisions.ts), and what the audit log keeps of an
 * MCP act's arguments (acts/act.ts). Stored in workspace_settings, whose trigger bumps the workspace's
 * policy_version, so the compiled policy sets (which carry the defaults) are rebuilt by every
 * server process at its next request, as after a policy change.
 */
import type {
  AgentEnvironment,
  AuditMcpArguments,
  DefaultDecision,
  DefaultDecisions,
  DefaultDecisionsChange,
  Settings,
  SettingsUpdate,
} from '@warden/contract';
import type { Kysely } from 'kysely';
import type { DB } from '../../db/schema.ts';
import { inTransaction } from '../../db/transaction.ts';
import type { Actor } from '../../shared/context.ts';
import { recordChange } from '../audit/audit.service.ts';
import * as repo from './settings.repository.ts';

/** A workspace that never changed its settings: allowed by default everywhere (the v1 behaviour). */
export const DEFAULT_DECISIONS: Readonly<DefaultDecisions> = Object.freeze({ development: 'allow', staging: 'allow', production: 'allow' });

const COLUMN = {
  development: 'default_development',
  staging: 'default_staging',
  production: 'default_production',
} as const satisfies Record<AgentEnvironment, string>;

const ENVIRONMENTS = Object.keys(COLUMN) as AgentEnvironment[];

/** What the database holds, as the API names it; anything but `block` reads as `allow`. */
function toDefaults(row: repo.SettingsRow | undefined): DefaultDecisions {
  if (!row) return { ...DEFAULT_DECISIONS };
  const of = (value: string): DefaultDecision => (value === 'block' ? 'block' : 'allow');
  return { development: of(row.default_development), staging: of(row.default_staging), production: of(row.default_production) };
}

/** The defaults for the policy set (see PolicyCache). */
export const loadDefaultDecisions = async (db: Kysely<DB>, workspaceId: string): Promise<DefaultDecisions> =>
  toDefaults(await repo.findSettings(db, workspaceId));

/** What the audit keeps of MCP arguments; anything but `digest` reads as `redacted`. */
const auditMcpArguments = (row: repo.SettingsRow | undefined): AuditMcpArguments =>
  row?.audit_mcp_arguments === 'digest' ? 'digest' : 'redacted';

/** The settings the policy set carries (see PolicyCache): the defaults, "agents hold no credentials" and the MCP arguments kept. */
export async function loadPolicySettings(db: Kysely<DB>, workspaceId: string) {
  const row = await repo.findSettings(db, workspaceId);
  return {
    defaults: toDefaults(row),
    agentsHoldNoCredentials: row?.agents_hold_no_credentials ?? false,
    auditMcpArguments: auditMcpArguments(row),
  };
}

const toSettings = (row: repo.SettingsRow | undefined): Settings => ({
  default_decision: toDefaults(row),
  agents_hold_no_credentials: row?.agents_hold_no_credentials ?? false,
  audit_mcp_arguments: auditMcpArguments(row),
  audit_log_public: row?.audit_log_public ?? false,
});

export const getSettings = async (db: Kysely<DB>, workspaceId: string): Promise<Settings> =>
  toSettings(await repo.findSettings(db, workspaceId));

/** The environments whose default `wanted` changes from `current`. */
export const changedDefaults = (current: DefaultDecisions, wanted: DefaultDecisionsChange = {}) =>
  ENVIRONMENTS.filter((environment) => wanted[environment] !== undefined && wanted[environment] !== current[environment]);

/** Sets the given environments' defaults, unaudited: for a caller that records the change in its own event (policy bundles). */
export async function setDefaultDecisions(trx: Kysely<DB>, workspaceId: string, wanted: DefaultDecisionsChange): Promise<void> {
  const changes = Object.fromEntries(
    ENVIRONMENTS.filter((environment) => wanted[environment] !== undefined).map((environment) => [
      COLUMN[environment],
      wanted[environment],
    ]),
  );
  if (Object.keys(changes).length > 0) await repo.upsertSettings(trx, workspaceId, changes);
}

/**
 * The schema refuses unknown environments and values and an empty change (400 invalid_request).
 * A change writes its `settings.updated` audit event (the defaults it sets) in its transaction.
 */
export async function updateSettings(db: Kysely<DB>, workspaceId: string, input: SettingsUpdate, actor: Actor): Promise<Settings> {
  const changes: Partial<
    Record<(typeof COLUMN)[AgentEnvironment], DefaultDecision> & {
      agents_hold_no_credentials: boolean;
      audit_mcp_arguments: AuditMcpArguments;
      audit_log_public: boolean;
    }
  > = {};
  const set: Partial<Record<AgentEnvironment, DefaultDecision>> = {};
  for (const environment of ENVIRONMENTS) {
    const value = input.default_decision?.[environment];
    if (value !== undefined) {
      changes[COLUMN[environment]] = value;
      set[environment] = value;
    }
  }
  const fields = Object.keys(set).map((environment) => `default_decision.${environment}`);
  if (input.agents_hold_no_credentials !== undefined) {
    changes.agents_hold_no_credentials = input.agents_hold_no_credentials;
    fields.push('agents_hold_no_credentials');
  }
  if (input.audit_mcp_arguments !== undefined) {
    changes.audit_mcp_arguments = input.audit_mcp_arguments;
    fields.push('audit_mcp_arguments');
  }
  if (input.audit_log_public !== undefined) {
    changes.audit_log_public = input.audit_log_public;
    fields.push('audit_log_public');
  }
  if (Object.keys(changes).length === 0) return getSettings(db, workspaceId);
  return inTransaction(db, async (trx) => {
    await recordChange(trx, workspaceId, actor, {
      action: 'settings.updated',
      resource: workspaceId,
      context: {
        fields,
        ...(Object.keys(set).length ? { default_decision: set } : {}),
        ...(input.agents_hold_no_credentials !== undefined ? { agents_hold_no_credentials: input.agents_hold_no_credentials } : {}),
        ...(input.audit_mcp_arguments !== undefined ? { audit_mcp_arguments: input.audit_mcp_arguments } : {}),
        ...(input.audit_log_public !== undefined ? { audit_log_public: input.audit_log_public } : {}),
      },
    });
    return toSettings(await repo.upsertSettings(trx, workspaceId, changes));
  });
}

export function settingsService(db: Kysely<DB>) {
  return {
    get: (workspaceId: string) => getSettings(db, workspaceId),
    update: (workspaceId: string, input: SettingsUpdate, actor: Actor) => updateSettings(db, workspaceId, input, actor),
    /** Whether the workspace publishes its audit log (tlog-tiles without a key); false for one that does not exist. */
    isAuditLogPublic: (workspaceId: string) => repo.findAuditLogPublic(db, workspaceId),
  };
}

export type SettingsService = ReturnType<typeof settingsService>;
