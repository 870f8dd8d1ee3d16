/**
 * The compliance score, computed from the workspace's current state when asked for (the
 * spec's ComplianceStatus says how each number is computed). Each control has subjects
 * (e.g. the active agents) and scores the share of them that satisfy it; a control without
 * subjects is not applicable.
 */
import type { AuditVerification, ComplianceStatus, PolicyRule } from '@warden/contract';
import type { Kysely } from 'kysely';
import type { DB } from '../../db/schema.ts';
import { brokersCredentials } from '../credentials/credentials.repository.ts';
import { conditionNeverHolds } from '../policies/cel.ts';
import { compilePolicySet, type DecisionInput, decide, type PolicySet } from '../policies/engine.ts';
import { loadPolicySettings } from '../settings/settings.service.ts';
import * as repo from './compliance.repository.ts';

type Control = ComplianceStatus['data']['controls'][number];

interface ControlDefinition {
  id: string;
  name: string;
  description: string;
  weight: number;
  frameworks: string[];
}

export const CONTROLS: Record<string, ControlDefinition> = {
  riskAssessed: {
    id: 'agent-risk-assessed',
    name: 'Every agent has a risk level',
    description: 'Share of agents not retired whose risk_level is set.',
    weight: 20,
    frameworks: ['EU-AI-ACT:Art.9', 'NIST-AI-RMF:MAP-4.1', 'ISO-42001:A.5.2'],
  },
  productionEnforced: {
    id: 'production-enforced',
    name: 'Production agents are covered by an enforcing policy',
    description:
      'Per active production agent that acted in the last 7 days, the share of its acts a block or require_approval rule of an enabled enforcing policy can match (replayed on each act; a condition that can hold is taken to hold), averaged over those agents. A rule counts only for the acts it can match: one whose patterns fit nothing the agent does covers nothing (an allow rule permits, it does not enforce; a condition that reads no variable and is not true never takes effect).',
    weight: 25,
    frameworks: ['EU-AI-ACT:Art.14', 'NIST-AI-RMF:MANAGE-2.2', 'ISO-42001:A.9.2'],
  },
  highRiskApproval: {
    id: 'high-risk-approval',
    name: 'High-risk agents need human approval',
    description:
      'Share of active high- or critical-risk agents that acted in the last 7 days for which a require_approval rule of an enabled enforcing policy, whose condition can hold, matches at least one of those acts.',
    weight: 20,
    frameworks: ['EU-AI-ACT:Art.14', 'NIST-AI-RMF:MANAGE-1.3', 'ISO-42001:A.9.3'],
  },
  agentKeys: {
    id: 'agent-keys',
    name: 'Agents carry their own keys',
    description: 'Share of active agents with an agent key registered.',
    weight: 15,
    frameworks: ['EU-AI-ACT:Art.15', 'NIST-AI-RMF:GOVERN-1.6', 'ISO-42001:A.6.2.6'],
  },
  auditChain: {
    id: 'audit-chain',
    name: 'The audit log verifies',
    description:
      '100 when the audit log verifies (GET /audit/verify: every leaf, stored subtree and root, the latest signed checkpoint, no event left out), else 0; not applicable before the first sealed event.',
    weight: 20,
    frameworks: ['EU-AI-ACT:Art.12', 'NIST-AI-RMF:MEASURE-2.8', 'ISO-42001:A.6.2.8'],
  },
  productionDefaultBlock: {
    id: 'production-default-block',
    name: 'Production defaults to block',
    description:
      "Share of active production agents whose unforeseen acts are refused: 100 when the workspace's default decision for production is block, else 0.",
    weight: 15,
    frameworks: ['EU-AI-ACT:Art.15', 'NIST-AI-RMF:MANAGE-2.4', 'ISO-42001:A.9.2'],
  },
  agentsHoldNoCredentials: {
    id: 'agents-hold-no-credentials',
    name: 'Agents hold no upstream credentials',
    description:
      "Share of active agents that cannot send upstream credentials of their own: 100 when the workspace setting agents_hold_no_credentials is on, else 0; not applicable until the workspace brokers a credential (a named credential or an MCP server's upstream_auth).",
    weight: 15,
    frameworks: ['EU-AI-ACT:Art.15', 'NIST-AI-RMF:MANAGE-2.4', 'ISO-42001:A.8.4'],
  },
};

/**
 * The enforcing rules that can take effect (of `effect`, else block and require_approval), as a
 * policy set to replay acts on: not `allow` (it permits), not a condition that can never hold;
 * a condition that can hold is taken to hold (an act's recorded context is redacted, so it is
 * not evaluated again).
 */
function enforcingRules(policies: readonly { name: string; priority: number; rules: unknown }[], effect?: PolicyRule['effect']): PolicySet {
  return compilePolicySet(
    policies.map((policy) => ({
      name: policy.name,
      mode: 'enforce',
      priority: policy.priority,
      rules: (policy.rules as PolicyRule[])
        .filter((rule) => (effect ? rule.effect === effect : rule.effect !== 'allow'))
        .filter((rule) => !(rule.condition && conditionNeverHolds(rule.condition)))
        .map(({ condition: _condition, ...rule }) => rule),
    })),
  );
}

type Act = Awaited<ReturnType<typeof repo.recentActs>>[number];
type AgentRow = Awaited<ReturnType<typeof repo.complianceAgents>>[number];

/** The act as policy matched it when it was decided: its declared fields and what its execution ran. */
function replayed(act: Act): DecisionInput {
  const execution =
    act.mode === 'http_proxy'
      ? { mode: 'http_proxy', method: act.method ?? '', host: act.host ?? '', path: act.path ?? '', url: act.url ?? '' }
      : act.mode === 'mcp_proxy'
        ? { mode: 'mcp_proxy', server: act.server ?? '' }
        : null;
  return {
    action: act.action,
    ...(act.resource === null ? {} : { resource: act.resource }),
    ...(act.tool === null ? {} : { tool: act.tool }),
    ...(act.environment === null ? {} : { environment: act.environment }),
    execution: execution as DecisionInput['execution'],
  };
}

/** The share (0–1) of an agent's recent acts, by how often each was decided, that a rule of `set` matches. */
function coveredShare(set: PolicySet, agent: AgentRow, acts: readonly Act[]): number {
  const facts = { ...agent, allowed_tools: [], allowed_resources: [] };
  let total = 0;
  let covered = 0;
  for (const act of acts) {
    const count = Number(act.count);
    total += count;
    try {
      if (decide(set, replayed(act), facts).matched) covered += count;
    } catch {
      covered += count; // a rule whose search spends the budget fails the act closed when it is decided: it governs it
    }
  }
  return total === 0 ? 0 : covered / total;
}

const round = (value: number) => Math.round(value * 10) / 10;
const share = (satisfied: number, total: number) => (total === 0 ? 0 : (100 * satisfied) / total);

function control(definition: ControlDefinition, satisfied: number, subjects: number): Control {
  const score = round(share(satisfied, subjects));
  return {
    ...definition,
    frameworks: [...definition.frameworks],
    score,
    status: subjects === 0 ? 'not_applicable' : score === 100 ? 'pass' : 'fail',
  };
}

/** Verifies a workspace's audit log (incrementally: its cost does not grow with the history). */
type VerifyAudit = (workspaceId: string) => Promise<AuditVerification['data']>;

export async function computeCompliance(db: Kysely<DB>, verifyAudit: VerifyAudit, workspaceId: string): Promise<ComplianceStatus['data']> {
  const [agents, policies, acts, decisions, chain, { defaults, agentsHoldNoCredentials }, brokers] = await Promise.all([
    repo.complianceAgents(db, workspaceId),
    repo.enforcingPolicyRules(db, workspaceId),
    repo.recentActs(db, workspaceId),
    repo.recentDecisionCounts(db, workspaceId),
    verifyAudit(workspaceId),
    loadPolicySettings(db, workspaceId),
    brokersCredentials(db, workspaceId),
  ]);
  const enforcing = enforcingRules(policies);
  const asking = enforcingRules(policies, 'require_approval');
  const actsOf = new Map<string, Act[]>();
  for (const act of acts) {
    const own = actsOf.get(act.agent_id as string);
    if (own) own.push(act);
    else actsOf.set(act.agent_id as string, [act]);
  }

  const current = agents.filter((a) => a.status !== 'retired');
  const active = agents.filter((a) => a.status === 'active');
  const production = active.filter((a) => a.environment === 'production');
  // Rule coverage is judged on what an agent did; the default decides for every production agent.
  const productionActing = production.filter((a) => actsOf.has(a.id));
  const highRisk = active.filter((a) => (a.risk_level === 'high' || a.risk_level === 'critical') && actsOf.has(a.id));
  const controls = [
    control(CONTROLS.riskAssessed as ControlDefinition, current.filter((a) => a.risk_level !== null).length, current.length),
    control(
      CONTROLS.productionEnforced as ControlDefinition,
      productionActing.reduce((sum, a) => sum + coveredShare(enforcing, a, actsOf.get(a.id) ?? []), 0),
      productionActing.length,
    ),
    control(
      CONTROLS.highRiskApproval as ControlDefinition,
      highRisk.filter((a) => coveredShare(asking, a, actsOf.get(a.id) ?? []) > 0).length,
      highRisk.length,
    ),
    control(CONTROLS.agentKeys as ControlDefinition, active.filter((a) => a.api_key_hash !== null).length, active.length),
    control(CONTROLS.auditChain as ControlDefinition, chain.tree_size > 0 && chain.valid ? 1 : 0, chain.tree_size > 0 ? 1 : 0),
    control(
      CONTROLS.productionDefaultBlock as ControlDefinition,
      defaults.production === 'block' ? production.length : 0,
      production.length,
    ),
    control(
      CONTROLS.agentsHoldNoCredentials as ControlDefinition,
      agentsHoldNoCredentials ? active.length : 0,
      brokers ? active.length : 0,
    ),
  ];

  const applicable = controls.filter((c) => c.status !== 'not_applicable');
  const weight = applicable.reduce((sum, c) => sum + c.weight, 0);
  const requirements = new Map<string, boolean>();
  for (const c of applicable) for (const f of c.frameworks) requirements.set(f, (requirements.get(f) ?? true) && c.status === 'pass');
  const risky = active.filter((a) => a.risk_level === null || a.risk_level === 'high' || a.risk_level === 'critical').length;
  return {
    score: round(weight === 0 ? 0 : applicable.reduce((sum, c) => sum + c.weight * c.score, 0) / weight),
    framework_score: round(share([...requirements.values()].filter(Boolean).length, requirements.size)),
    control_coverage: round(share(applicable.length, controls.length)),
    risk_score: round(0.6 * share(risky, active.length) + 0.4 * share(Number(decisions.blocked), Number(decisions.total))),
    calculated_at: new Date().toISOString(),
    controls,
  };
}

export function complianceService(db: Kysely<DB>, verifyAudit: VerifyAudit) {
  return { compute: (workspaceId: string) => computeCompliance(db, verifyAudit, workspaceId) };
}

export type ComplianceService = ReturnType<typeof complianceService>;
