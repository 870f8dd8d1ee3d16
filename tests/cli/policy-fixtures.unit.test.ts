/**
 * Fixtures cut from audit events (policy-fixtures.ts), decided as `policies test` decides them
 * (policy-tests.ts), on events as the audit log records them: an MCP call with its arguments
 * redacted, an act an approval let through, a deleted agent, a repeat, an outcome event, an
 * execution refused before Warden knew what would run; and a directory's defaults.yaml.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Agent, AuditEvent } from '@warden/contract';
import { afterAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { compilePolicySet } from '../../apps/server/src/features/policies/engine.ts';
import { BundleError, readPolicyBundle } from '../../apps/server/src/features/policies/policy-bundle.ts';
import { fixtureFile } from '../../apps/server/src/features/policies/policy-fixtures.ts';
import { policyCases, runPolicyCases } from '../../apps/server/src/features/policies/policy-tests.ts';
import type { RecordedDecision } from '../../apps/server/src/features/policies/simulate.repository.ts';
import { Replay } from '../../apps/server/src/features/policies/simulate.ts';

let n = 0;
function event(fields: Partial<AuditEvent>): AuditEvent {
  n++;
  return {
    id: `01a2${String(n).padStart(4, '0')}-0000-7000-8000-000000000000`,
    sequence: n,
    event_timestamp: `2026-12-01T10:00:${String(60 - n).padStart(2, '0')}.000Z`,
    source: 'evaluation',
    agent: 'ops-bot',
    action: 'files.read',
    resource: null,
    tool: null,
    environment: 'production',
    user: null,
    policy: null,
    result: 'allowed',
    severity: 'info',
    message: null,
    approval_id: null,
    request_id: null,
    context: {},
    hash: null,
    ...fields,
  };
}

const AGENT: Agent = {
  id: '11111111-1111-4111-8111-111111111111',
  name: 'Ops bot',
  slug: 'ops-bot',
  provider: 'local',
  environment: 'production',
  risk_level: 'high',
  tags: ['ops'],
  allowed_tools: [],
  allowed_resources: [],
  status: 'active',
} as unknown as Agent;

const POLICIES = [
  {
    name: 'MCP care',
    rules: [
      { id: 'no-repo-deletes', match: { tool: ['delete_*'], server: ['github'] }, effect: 'block' },
      { id: 'prs-need-review', match: { action: ['mcp.call'], tool: ['merge_*'] }, effect: 'require_approval' },
      { id: 'risky-prod', match: { action: ['deploy.*'] }, condition: "agent.risk_level == 'high'", effect: 'require_approval' },
      { id: 'via-proxy', match: { action: ['files.read'] }, effect: 'allow', require_execution_proxy: true },
    ],
  },
];

const mcp = (tool: string, args: Record<string, unknown>) => ({
  mode: 'mcp_proxy',
  server: 'github',
  method: 'tools/call',
  tool,
  arguments: args,
  arguments_sha256: 'a'.repeat(64),
});

describe('fixtures from the audit log', () => {
  const dir = mkdtempSync(join(tmpdir(), 'warden-fixtures-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, 'mcp-care.yaml'), stringify(POLICIES[0]));

  const events = [
    event({
      source: 'mcp',
      action: 'mcp.call',
      tool: 'delete_repo',
      resource: 'mcp://github/tools/delete_repo',
      policy: 'MCP care',
      result: 'blocked',
      context: { rule: 'no-repo-deletes', execution: mcp('delete_repo', { repo: 'x', token: '[REDACTED]' }) },
    }),
    // its outcome: not a decision
    event({ source: 'mcp', action: 'mcp.call', result: 'allowed', context: { decision_event_id: 'x', outcome: 'ok' } }),
    // let through by an approval: it required one
    event({
      source: 'mcp',
      action: 'mcp.call',
      tool: 'merge_pr',
      resource: 'mcp://github/tools/merge_pr',
      policy: 'MCP care',
      result: 'allowed',
      approval_id: '22222222-2222-4222-8222-222222222222',
      context: { rule: 'prs-need-review', execution: mcp('merge_pr', { pr: 7 }) },
    }),
    event({
      action: 'deploy.api',
      policy: 'MCP care',
      result: 'approval_required',
      context: { rule: 'risky-prod', input: { api_key: 'sk-live-123' } },
    }),
    // the same act again: one case
    event({
      action: 'deploy.api',
      policy: 'MCP care',
      result: 'approval_required',
      context: { rule: 'risky-prod', input: { api_key: 'sk-live-123' } },
    }),
    // a bare evaluation of a proxy-only allow: blocked, naming the rule that allows through the proxy
    event({ action: 'files.read', policy: 'MCP care', result: 'blocked', context: { rule: 'via-proxy' } }),
    // a tool call declared as the caller's own action: decided on mcp.call too (the method's action)
    event({
      source: 'execution',
      action: 'github.merge',
      tool: 'merge_pr',
      resource: 'repos/x/pulls/7',
      policy: 'MCP care',
      result: 'approval_required',
      context: { rule: 'prs-need-review', execution: mcp('merge_pr', { pr: 8 }) },
    }),
    // a deleted agent, in staging
    event({ agent: 'gone-bot', environment: 'staging', action: 'reports.read', result: 'allowed' }),
    // an execution refused before Warden knew what it would run
    event({ source: 'execution', action: 'http.get', result: 'blocked' }),
  ];

  it('cuts one case per distinct decision that passes against the policies that made them', () => {
    const file = fixtureFile(events, [AGENT], 100);
    expect(file.cases.map((c) => [c.agent, c.input.action, c.expect.effect, c.expect.rule])).toEqual([
      ['ops-bot', 'mcp.call', 'block', 'no-repo-deletes'],
      ['ops-bot', 'mcp.call', 'require_approval', 'prs-need-review'],
      ['ops-bot', 'deploy.api', 'require_approval', 'risky-prod'],
      ['ops-bot', 'files.read', 'block', 'via-proxy'],
      ['ops-bot', 'github.merge', 'require_approval', 'prs-need-review'],
      ['gone-bot@staging', 'reports.read', 'allow', null],
    ]);
    expect(file.agents['ops-bot']).toMatchObject({ risk_level: 'high', tags: ['ops'], environment: 'production' });
    expect(file.agents['gone-bot@staging']).toEqual({ slug: 'gone-bot', environment: 'staging' });
    // secrets stay redacted: the audit's redaction, and the context's secret-looking names again
    expect(JSON.stringify(file)).not.toContain('sk-live-123');

    writeFileSync(join(dir, 'recorded.test.yaml'), stringify(file));
    const bundle = readPolicyBundle(dir);
    const results = runPolicyCases(bundle, policyCases(bundle));
    expect(results.map((r) => r.failure)).toEqual([null, null, null, null, null, null]);
  });

  it("the what-if replay decides an audited MCP act on its method's action too", () => {
    const merge = events.find((e) => e.action === 'github.merge') as AuditEvent;
    const row: RecordedDecision = {
      id: merge.id,
      at: merge.event_timestamp,
      source: merge.source,
      agent: merge.agent,
      action: merge.action,
      resource: merge.resource,
      tool: merge.tool,
      environment: merge.environment,
      recorded: 'approval_required',
      input: null,
      execution: JSON.stringify(merge.context.execution),
    };
    const compile = (policies: typeof POLICIES) =>
      compilePolicySet(
        policies.map((p) => ({ name: p.name, mode: 'enforce', priority: 100, rules: p.rules as never })),
        {},
      );
    const withoutReview = [{ ...POLICIES[0], rules: POLICIES[0]?.rules.filter((r) => r.id !== 'prs-need-review') }] as typeof POLICIES;
    const replay = new Replay(compile(POLICIES), compile(withoutReview), new Map([['ops-bot', { ...AGENT, risk_level: 'high' } as never]]));
    replay.add([row, { ...row, id: `${row.id.slice(0, -1)}1` }]);
    const result = replay.result();
    expect(result.drift.changed).toBe(0);
    expect(result).toMatchObject({ replayed: 2, changed: 2, from: { approval_required: 2 }, to: { allowed: 2 } });
  });

  it('stops at the limit', () => {
    expect(fixtureFile(events, [AGENT], 2).cases).toHaveLength(2);
  });

  it('reads defaults.yaml as the bundle’s default decisions, used by its cases, and refuses a wrong one', () => {
    const other = mkdtempSync(join(tmpdir(), 'warden-defaults-'));
    try {
      writeFileSync(join(other, 'defaults.yaml'), stringify({ default_decision: { production: 'block' } }));
      writeFileSync(
        join(other, 'cases.test.yaml'),
        stringify({
          cases: [
            {
              name: 'prod',
              agent: { slug: 'a', environment: 'production' },
              input: { action: 'x.y' },
              expect: { effect: 'block', rule: null },
            },
            { name: 'dev', agent: { slug: 'a', environment: 'development' }, input: { action: 'x.y' }, expect: { effect: 'allow' } },
          ],
        }),
      );
      const bundle = readPolicyBundle(other);
      expect(bundle.defaults).toEqual({ production: 'block' });
      expect(runPolicyCases(bundle, policyCases(bundle)).map((r) => r.failure)).toEqual([null, null]);
      const plain = readPolicyBundle(dir).digest;
      expect(bundle.digest).not.toBe(plain);

      writeFileSync(join(other, 'defaults.yaml'), stringify({ default_decision: { production: 'maybe' } }));
      expect(() => readPolicyBundle(other)).toThrow(BundleError);
      expect(() => readPolicyBundle(other)).toThrow(
        /^defaults\.yaml: not default decisions: \/default_decision\/production must be equal to one of the allowed values/,
      );
      writeFileSync(join(other, 'defaults.yaml'), stringify({ production: 'block' }));
      expect(() => readPolicyBundle(other)).toThrow(
        'defaults.yaml: the defaults file holds one key, default_decision: { production: block }',
      );
    } finally {
      rmSync(other, { recursive: true, force: true });
    }
  });
});
