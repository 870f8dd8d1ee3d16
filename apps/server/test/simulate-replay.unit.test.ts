/**
 * The what-if replay's tally (features/policies/simulate.ts, Replay) answers exactly what
 * deciding every recorded decision on its own answers — the replay as first built, kept here as
 * the reference — while deciding each distinct act once: counts, failures, approximations,
 * groups, their order and the decisions they list, whatever the page boundaries.
 */
import type { PolicyCreate, PolicySimulation, PolicySimulationRequest } from '@warden/contract';
import { describe, expect, it } from 'vitest';
import { iso } from '../src/db/paginate.ts';
import { actViews, MCP_METHOD_ACTIONS } from '../src/features/acts/act.ts';
import { type AgentFacts, ConditionError, type DecisionInput, decideStrictest, type PolicySet } from '../src/features/policies/engine.ts';
import type { RecordedDecision } from '../src/features/policies/simulate.repository.ts';
import { compileDraft, Replay, type Replayed } from '../src/features/policies/simulate.ts';

type Result = RecordedDecision['recorded'];
type Group = PolicySimulation['groups'][number];

interface Decided {
  now: Result;
  policy: string | null;
  rule: string | null;
  failed: boolean;
}

/** The replay as first built: one decision decided on its own, its input rebuilt from the whole audited context. */
function naiveDecide(set: PolicySet, bySlug: ReadonlyMap<string, AgentFacts>, row: RecordedDecision): Decided {
  const context: Record<string, unknown> = {};
  if (row.input !== null) context.input = JSON.parse(row.input);
  if (row.execution !== null) context.execution = JSON.parse(row.execution);
  const execution = (context.execution ?? null) as Record<string, unknown> | null;
  const environment = row.environment ?? undefined;
  const agent: AgentFacts = bySlug.get(row.agent ?? '') ?? {
    id: '',
    slug: row.agent ?? '',
    name: row.agent ?? '',
    status: 'active',
    environment: environment ?? 'production',
    risk_level: null,
    allowed_tools: [],
    allowed_resources: [],
  };
  const declared: DecisionInput = {
    action: row.action,
    ...(row.resource !== null ? { resource: row.resource } : {}),
    ...(row.tool !== null ? { tool: row.tool } : {}),
    ...(environment !== undefined ? { environment } : {}),
    ...(context.input !== undefined ? { context: context.input as Record<string, unknown> } : {}),
    execution: execution as DecisionInput['execution'],
  };
  // the server's views: the URL or tool address executed, the MCP method's fixed action
  const fixed = execution?.mode === 'mcp_proxy' ? MCP_METHOD_ACTIONS[String(execution.method)] : undefined;
  const views = actViews(declared, fixed);
  try {
    const decision = decideStrictest(set, views, agent);
    const now = decision.allowed && decision.requireProxy && row.source === 'evaluation' ? 'blocked' : decision.result;
    return { now, policy: decision.policy, rule: decision.ruleId, failed: false };
  } catch (error) {
    if (!(error instanceof ConditionError)) throw error;
    return { now: 'blocked', policy: error.policy, rule: error.ruleId, failed: true };
  }
}

/** Each row's earlier result against its later decision: counts, and the changed ones grouped by the later rule. */
function compare(rows: readonly RecordedDecision[], before: readonly Result[], after: readonly Decided[]) {
  const from = { allowed: 0, blocked: 0, approval_required: 0 };
  const to = { allowed: 0, blocked: 0, approval_required: 0 };
  const groups = new Map<string, Group>();
  let changed = 0;
  let failed = 0;
  rows.forEach((row, i) => {
    const was = before[i] as Result;
    const { now, policy, rule, failed: broke } = after[i] as Decided;
    from[was]++;
    to[now]++;
    if (broke) failed++;
    if (now === was) return;
    changed++;
    const key = JSON.stringify([policy, rule, was, now]);
    let group = groups.get(key);
    if (!group) {
      group = { policy, rule, from: was, to: now, count: 0, decisions: [] };
      groups.set(key, group);
    }
    group.count++;
    if (group.decisions.length < 100) {
      group.decisions.push({
        event_id: row.id,
        event_timestamp: iso(row.at),
        agent: row.agent,
        action: row.action,
        resource: row.resource,
        from: was,
        to: now,
      });
    }
  });
  return { changed, failed, from, to, groups: [...groups.values()].sort((a, b) => b.count - a.count).slice(0, 1000) };
}

/** Every decision decided on its own by both sets: the draft's effect (current → draft) and drift (recorded → current). */
function naiveReplay(current: PolicySet, draft: PolicySet, agents: readonly AgentFacts[], rows: readonly RecordedDecision[]): Replayed {
  const bySlug = new Map(agents.map((agent) => [agent.slug, agent]));
  const now = rows.map((row) => naiveDecide(current, bySlug, row));
  const next = rows.map((row) => naiveDecide(draft, bySlug, row));
  const approximate = rows.filter((row) => {
    const execution = row.execution === null ? null : (JSON.parse(row.execution) as Record<string, unknown> | null);
    return Boolean(execution && (execution.body_sha256 || execution.arguments_sha256));
  }).length;
  return {
    replayed: rows.length,
    approximate,
    ...compare(
      rows,
      now.map((d) => d.now),
      next,
    ),
    drift: compare(
      rows,
      rows.map((row) => row.recorded),
      now,
    ),
  };
}

/** mulberry32: the same rows on every run. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const agent = (slug: string, extra: Partial<AgentFacts> = {}): AgentFacts => ({
  id: `00000000-0000-4000-8000-${String(slug.length).padStart(12, '0')}`,
  slug,
  name: slug === 'billing' ? 'Billing Bot' : slug,
  status: 'active',
  environment: 'production',
  risk_level: 'low',
  provider: 'local',
  tags: ['t'],
  allowed_tools: [],
  allowed_resources: [],
  ...extra,
});
const AGENTS = [
  agent('billing'),
  agent('ops-runner', { environment: 'staging' }),
  agent('narrow', { allowed_tools: ['reader', 'stripe'], allowed_resources: ['docs/*', 'accounts/*', 'https://api.example.com/*'] }),
];
const BIG_LIST = JSON.stringify({ l: Array.from({ length: 300 }, (_, i) => i) });

/** A draft that exercises every way the engine reads a decision. */
const DRAFT: PolicyCreate[] = [
  {
    name: 'payments',
    priority: 200,
    rules: [
      { id: 'big', match: { action: ['payments.*'] }, condition: 'context.amount > 500', effect: 'require_approval' },
      { id: 'eu', match: { action: ['payments.*'], resource: ['accounts/eu/*'] }, effect: 'block' },
    ],
  },
  {
    name: 'proxy-only',
    priority: 190,
    rules: [{ id: 'http', match: { action: ['http.*'] }, effect: 'allow', require_execution_proxy: true }],
  },
  {
    name: 'egress',
    priority: 180,
    rules: [
      { id: 'no-delete', match: { method: ['DELETE'], host: ['api.example.com'] }, effect: 'block' },
      { id: 'internal', match: { url: ['https://internal.*'] }, effect: 'require_approval' },
    ],
  },
  {
    name: 'mcp',
    priority: 170,
    rules: [
      { id: 'gh', match: { server: ['github'] }, effect: 'require_approval' },
      // decided on the method's action and the tool's address, whatever the caller declared
      { id: 'merges', match: { action: ['mcp.call'], tool: ['merge_*'] }, effect: 'block' },
      { id: 'slack-issues', match: { resource: ['mcp://slack/tools/create_*'] }, effect: 'block' },
    ],
  },
  {
    name: 'ops',
    priority: 160,
    rules: [
      {
        id: 'deploy',
        match: { agent: ['ops-*', 'Billing Bot'], action: ['deploy.*'] },
        condition: '"admin" in context.roles',
        effect: 'allow',
      },
      { id: 'staging-writes', match: { environment: ['staging'], action: ['*.write'] }, effect: 'require_approval' },
      { id: 'shell', match: { tool: ['shell', 'exec*'] }, effect: 'block' },
    ],
  },
  // A condition that fails at run time (no such key) and one that spends the decision's budget.
  {
    name: 'strict',
    priority: 150,
    rules: [{ id: 'missing', match: { action: ['files.delete'] }, condition: 'context.owner == "me"', effect: 'block' }],
  },
  {
    name: 'heavy',
    priority: 140,
    rules: [{ id: 'nested', match: { action: ['heavy.*'] }, condition: 'context.l.all(a, context.l.all(b, a + b >= 0))', effect: 'allow' }],
  },
  {
    name: 'watch',
    mode: 'monitor',
    priority: 130,
    rules: [{ id: 'big-mail', match: { action: ['email.*'] }, condition: 'context.amount > 10', effect: 'block' }],
  },
  { name: 'reads', priority: 100, rules: [{ id: 'docs', match: { action: ['files.read'], resource: ['docs/*'] }, effect: 'allow' }] },
];

function recordedDecisions(count: number, seed: number): RecordedDecision[] {
  const random = prng(seed);
  const pick = <T>(list: readonly T[]): T => list[Math.floor(random() * list.length)] as T;
  const rows: RecordedDecision[] = [];
  const start = Date.UTC(2026, 10, 25, 12, 0, 0);
  for (let i = 0; i < count; i++) {
    const action = pick([
      'payments.refund',
      'payments.charge',
      'files.read',
      'files.write',
      'files.delete',
      'deploy.api',
      'email.send',
      'http.get',
      'http.delete',
      'mcp.call',
      'repo.merge',
      'heavy.compute',
      'db.users.drop',
    ]);
    const source = action.startsWith('http.')
      ? 'execution'
      : action === 'mcp.call' || action === 'repo.merge'
        ? 'mcp'
        : pick(['evaluation', 'evaluation', 'execution']);
    const url = pick(['https://api.example.com/v1/items/1', 'https://internal.example.com/x', 'https://api.example.com/v1/items/2']);
    const execution = action.startsWith('http.')
      ? JSON.stringify({
          mode: 'http_proxy',
          method: action === 'http.delete' ? 'DELETE' : 'GET',
          url,
          host: new URL(url).host,
          path: new URL(url).pathname,
          body_sha256: pick([null, 'ab12']),
        })
      : action === 'mcp.call' || action === 'repo.merge'
        ? JSON.stringify({
            mode: 'mcp_proxy',
            server: pick(['github', 'slack']),
            // a tool call declared as the caller's own action is decided on mcp.call too
            method: action === 'repo.merge' ? 'tools/call' : pick(['tools/call', 'resources/read']),
            tool: pick(['create_issue', 'merge_pr']),
            arguments_sha256: pick(['cd34', null]),
          })
        : pick([null, null, null, 'null', JSON.stringify({ method: 'GET', url: 'https://api.example.com/v1/items/1' })]);
    rows.push({
      id: `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`,
      at: new Date(start - i * 1234).toISOString().replace('T', ' ').replace('Z', '+00'),
      source,
      agent: pick(['billing', 'billing', 'ops-runner', 'narrow', 'deleted-agent', null]),
      action,
      resource: pick([null, 'docs/report.pdf', 'accounts/eu/1', 'accounts/us/2', url, 'secrets/x']),
      tool: pick([null, null, 'reader', 'shell', 'stripe']),
      environment: pick(['production', 'production', 'staging', null]),
      recorded: pick(['allowed', 'allowed', 'blocked', 'approval_required'] as const),
      input:
        action === 'heavy.compute'
          ? pick([BIG_LIST, JSON.stringify({ l: [1, 2] })])
          : pick([null, 'null', '{}', '{"amount": 50}', '{"amount": 900}', '{"roles": ["admin"]}', '{"amount": 900, "owner": "me"}']),
      execution,
    });
  }
  return rows;
}

/** DRAFT changed as an admin tries it: a lower payments threshold, the MCP policy gone. */
const VARIANT: PolicyCreate[] = DRAFT.filter((policy) => policy.name !== 'mcp').map((policy) =>
  policy.name === 'payments'
    ? { ...policy, rules: (policy.rules ?? []).map((rule) => (rule.id === 'big' ? { ...rule, condition: 'context.amount > 40' } : rule)) }
    : policy,
);

const request = (policies: PolicyCreate[]): PolicySimulationRequest => ({ policies, limit: 100_000 });

describe('the what-if replay (Replay)', () => {
  it('answers what deciding every recorded decision on its own answers, deciding each distinct act once', () => {
    const rows = recordedDecisions(6_000, 1);
    const defaults = { staging: 'block' as const };
    // today's set is DRAFT; the draft lowers a threshold and drops a policy
    const naive = naiveReplay(compileDraft(request(DRAFT), defaults), compileDraft(request(VARIANT), defaults), AGENTS, rows);
    const replay = new Replay(
      compileDraft(request(DRAFT), defaults),
      compileDraft(request(VARIANT), defaults),
      new Map(AGENTS.map((a) => [a.slug, a])),
    );
    replay.add(rows);
    expect(replay.result()).toEqual(naive);
    // the draft's effect is only what its two changes decide otherwise
    expect(new Set(naive.groups.map((g) => g.policy))).toEqual(new Set(['payments', null]));
    expect(naive.changed).toBeLessThan(naive.drift.changed);
    // every way of deciding was taken, and repeated acts were counted, not decided again
    expect(naive.drift.failed).toBeGreaterThan(0);
    expect(naive.approximate).toBeGreaterThan(0);
    expect(new Set(naive.drift.groups.map((g) => g.policy))).toEqual(
      new Set([null, 'payments', 'proxy-only', 'egress', 'mcp', 'ops', 'strict', 'heavy', 'reads', 'agent:narrow']),
    );
    // budget failures aside, no act is decided twice, and fewer than its distinct full inputs are
    const identities = new Set(
      rows.map((r) => JSON.stringify([r.source, r.agent, r.action, r.resource, r.tool, r.environment, r.input, r.execution])),
    );
    const budgetFailures = rows.filter((r) => r.input === BIG_LIST).length;
    expect(replay.decided).toBeLessThan(identities.size + budgetFailures);
  });

  it('answers the same whatever the page boundaries, for several drafts (no policies, monitor only, default blocks)', () => {
    const rows = recordedDecisions(3_000, 7);
    const drafts: Array<[PolicyCreate[], Record<string, 'allow' | 'block'>]> = [
      [[], {}],
      [[], { production: 'block' }],
      [DRAFT.map((policy) => ({ ...policy, mode: 'monitor' as const })), {}],
      [DRAFT.filter((policy) => policy.name !== 'heavy'), { development: 'block', staging: 'block' }],
    ];
    for (const [policies, defaults] of drafts) {
      const today = () => compileDraft(request(DRAFT), { staging: 'block' });
      const naive = naiveReplay(today(), compileDraft(request(policies), defaults), AGENTS, rows);
      const replay = new Replay(today(), compileDraft(request(policies), defaults), new Map(AGENTS.map((a) => [a.slug, a])));
      for (let start = 0; start < rows.length; start += 777) replay.add(rows.slice(start, start + 777));
      expect(replay.result()).toEqual(naive);
    }
  });

  it('counts a failure that spent the budget once per decision, never from a kept verdict', () => {
    const heavy = recordedDecisions(400, 3).map((row) => ({
      ...row,
      agent: 'billing',
      action: 'heavy.compute',
      tool: null,
      environment: 'production',
      input: BIG_LIST,
      execution: null,
    }));
    // a first decision of the action succeeds, so later ones are looked up
    const light = { ...(heavy[0] as RecordedDecision), id: '00000000-0000-4000-8000-999999999999', input: '{"l": [1, 2]}' };
    const set = () => compileDraft(request(DRAFT), {});
    const naive = naiveReplay(set(), set(), AGENTS, [light, ...heavy]);
    const replay = new Replay(set(), set(), new Map(AGENTS.map((a) => [a.slug, a])));
    replay.add([light, ...heavy]);
    expect(replay.result()).toEqual(naive);
    expect(naive.failed).toBe(heavy.length);
    expect(naive.drift.failed).toBe(heavy.length);
    expect(replay.decided).toBe(1 + heavy.length);
  });

  it('lists at most 100 decisions per group, newest first, with their timestamps in ISO form', () => {
    const rows = recordedDecisions(5_000, 11).map((row) => ({ ...row, recorded: 'allowed' as const, action: 'db.users.drop' }));
    const replay = new Replay(
      compileDraft(request([]), {}),
      compileDraft(request([{ name: 'drop', rules: [{ id: 'r', match: { action: ['db.*.drop'] }, effect: 'block' }] }]), {}),
      new Map(),
    );
    replay.add(rows);
    const { groups, changed } = replay.result();
    expect(changed).toBe(rows.length);
    expect(groups).toHaveLength(1);
    expect(groups[0]?.count).toBe(rows.length);
    expect(groups[0]?.decisions.map((d) => d.event_id)).toEqual(rows.slice(0, 100).map((row) => row.id));
    expect(groups[0]?.decisions[0]?.event_timestamp).toBe('2026-11-25T12:00:00.000Z');
  });
});
