/**
 * What the benchmark asks: the policy set (N policies × 10 rules), the one request body sent
 * to every target, and the seeding of a Warden through its API.
 *
 * The policy set is built so that the benchmark action walks every rule: no rule matches it
 * but the last rule of the lowest-priority policy (an allow), so the decision is "allowed,
 * matched" only after all 500 rules were looked at, and half of the policies evaluate a CEL
 * condition on the way (`context.amount > 1000+i`, false for the body's amount).
 */

import type { Warden } from './lab.ts';

export const AGENT_SLUG = 'bench-agent';
export const AGENT_KEY = 'bench-agent-secret-0123456789abcdef';

/** The headers of a JSON call to a runtime operation: the workspace key and the agent's own. */
export const jsonHeaders = (key: string) => ({
  authorization: `Bearer ${key}`,
  'content-type': 'application/json',
  'x-warden-agent-key': AGENT_KEY,
});
export const BENCH_ACTION = 'files.read';

export interface BenchRule {
  id: string;
  match?: Partial<Record<'action' | 'resource' | 'agent' | 'environment' | 'tool', string[]>>;
  condition?: string;
  effect: 'allow' | 'require_approval' | 'block';
  severity?: 'info' | 'low' | 'medium' | 'high' | 'critical';
  message?: string;
}

export interface BenchPolicy {
  name: string;
  priority: number;
  rules: BenchRule[];
}

export const policyName = (i: number) => `bench-policy-${String(i).padStart(3, '0')}`;

/** `count` enabled policies of 10 rules each (mixed globs, some CEL), the benchmark action allowed by the very last rule. */
export function benchPolicies(count: number): BenchPolicy[] {
  const policies: BenchPolicy[] = [];
  for (let i = 0; i < count; i++) {
    const id = (j: number) => `p${i}-r${j}`;
    const rules: BenchRule[] = [
      { id: id(0), match: { action: [`svc${i}.delete*`] }, effect: 'block', severity: 'high', message: `svc${i} deletes are blocked` },
      {
        id: id(1),
        match: { action: ['payments.*'], resource: [`accounts/${i}/*`] },
        condition: 'context.amount > 100 && context.user != "alice"',
        effect: 'require_approval',
        severity: 'medium',
      },
      { id: id(2), match: { action: ['db.*.drop', 'db.truncate'] }, effect: 'block', severity: 'critical' },
      { id: id(3), match: { tool: ['shell', 'exec*'] }, effect: 'require_approval', severity: 'high' },
      { id: id(4), match: { action: ['files.read', 'files.list'], resource: [`secrets/${i}/*`] }, effect: 'require_approval' },
      // Half of the policies reach this condition for the benchmark action (files.*), and it is false.
      {
        id: id(5),
        match: { action: [i % 2 === 0 ? 'files.*' : 'files.write*'] },
        condition: `context.amount > ${1000 + i}`,
        effect: 'require_approval',
      },
      { id: id(6), match: { agent: ['ops-*'], action: ['deploy.*'] }, condition: '"admin" in context.roles', effect: 'allow' },
      { id: id(7), match: { environment: ['staging'], action: ['*.write'] }, effect: 'require_approval', severity: 'low' },
      { id: id(8), match: { action: [`report.${i}.?ead`] }, effect: 'allow', severity: 'info' },
      i === count - 1
        ? {
            id: id(9),
            match: { action: [BENCH_ACTION], resource: ['docs/*'] },
            effect: 'allow',
            severity: 'info',
            message: 'Reading docs is fine',
          }
        : { id: id(9), match: { resource: ['*/private/*'] }, effect: 'block', severity: 'critical' },
    ];
    policies.push({ name: policyName(i), priority: 1000 - i, rules });
  }
  return policies;
}

/** The one evaluation body of B0, B1 and S. */
export const EVALUATE_BODY = {
  input: {
    action: BENCH_ACTION,
    resource: 'docs/quarterly-report.pdf',
    agent: AGENT_SLUG,
    environment: 'production',
    tool: 'reader',
    context: { amount: 50, user: 'alice', roles: ['reader'], ticket: 'T-1042' },
  },
};

export const MCP_CALL_BODY = (sessionId: string | undefined) => ({
  server: 'tools',
  tool: 'echo',
  arguments: { text: 'hello from the benchmark' },
  input: { agent: AGENT_SLUG, environment: 'production', context: { amount: 50, user: 'alice', roles: ['reader'] } },
  ...(sessionId ? { session_id: sessionId } : {}),
});

/** Seeds a fresh Warden through its API: policies, 100 agents (one with a key), the MCP server, one MCP session; answers the session. */
export async function seedWarden(warden: Pick<Warden, 'call'>, mcpUrl: string, policyCount = 50): Promise<string> {
  const { call } = warden;
  for (const policy of benchPolicies(policyCount)) await call('POST', '/policies', { ...policy, enabled: true, mode: 'enforce' });
  await call('POST', '/agents', {
    name: 'Bench agent',
    slug: AGENT_SLUG,
    provider: 'local',
    environment: 'production',
    api_key: AGENT_KEY,
  });
  for (let i = 1; i < 100; i++) {
    const n = String(i).padStart(3, '0');
    await call('POST', '/agents', {
      name: `Fleet agent ${n}`,
      slug: `fleet-agent-${n}`,
      provider: i % 2 ? 'anthropic' : 'openai',
      environment: (['development', 'staging', 'production'] as const)[i % 3],
      risk_level: (['low', 'medium', 'high'] as const)[i % 3],
      tags: ['bench', `team-${i % 7}`],
      description: `Agent ${n} of the benchmark fleet`,
    });
  }
  await call('POST', '/mcp-servers', { name: 'Bench tools', slug: 'tools', transport_url: mcpUrl, transport: 'streamable_http' });
  const agentKey = { 'x-warden-agent-key': AGENT_KEY };
  const input = { agent: AGENT_SLUG, environment: 'production' };
  const session = (await call('POST', '/runtime/mcp/session', { server: 'tools', input }, agentKey)).data.session_id as string;
  // one of each request, checked: the benchmark must measure what it claims to
  const decided = (await call('POST', '/policy/evaluate', EVALUATE_BODY, agentKey)).data;
  if (!(decided.allowed === true && decided.matched === true && decided.policy === policyName(policyCount - 1)))
    throw new Error(`seeding: the benchmark decision is not "allowed by the last policy": ${JSON.stringify(decided)}`);
  const called = (await call('POST', '/runtime/mcp/call', MCP_CALL_BODY(session), agentKey)).data;
  if (called.allowed !== true || called.execution?.isError !== false)
    throw new Error(`seeding: the MCP call failed: ${JSON.stringify(called)}`);
  const listed = (await call('GET', '/agents?limit=100')).data;
  if (listed.length !== 100) throw new Error(`seeding: GET /agents?limit=100 listed ${listed.length} agents, not 100`);
  return session;
}
