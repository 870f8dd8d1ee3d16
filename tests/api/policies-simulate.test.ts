/**
 * POST /policies/simulate (simulatePolicies): the workspace's recent recorded decisions decided
 * again by a draft policy set — counts, changes grouped by rule and from → to — with nothing
 * saved; draft checks as on create; `audit:read` needed; workspaces never mix; the answer is
 * what deciding each recorded act live answers; one replay per workspace at a time (429).
 */
import type { PolicyCreate } from '@warden/contract';
import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { createWarden } from '../../packages/sdk/src/index.ts';
import { keyFor, useTestServer } from '../support/server.ts';

const server = useTestServer();

let workspaces = 0;
async function freshWorkspace() {
  const slug = `simulate-${++workspaces}`;
  const workspace = await server.admin('workspaces.create', { slug });
  const created = await server.admin('keys.create', { workspace: slug, permissions: '*' });
  const key = created.key as string;
  const agent = await server.api('POST', '/agents', { key, body: { name: 'Payer', provider: 'local', environment: 'production' } });
  expect(agent.status).toBe(201);
  const evaluate = async (action: string, context?: Record<string, unknown>) => {
    const res = await server.api('POST', '/policy/evaluate', {
      key,
      body: { input: { action, agent: agent.body.data.slug, ...(context ? { context } : {}) } },
    });
    expect(res.status).toBe(200);
    return res.body.data;
  };
  return { slug, id: workspace.id as string, key, agent: agent.body.data, evaluate };
}

const refundsNeedApproval: PolicyCreate = {
  name: 'Refunds',
  rules: [{ id: 'big-refunds', match: { action: ['refund.*'] }, condition: 'context.amount > 100', effect: 'require_approval' }],
};
const blockDeletes: PolicyCreate = { name: 'No deletes', rules: [{ id: 'no-delete', match: { action: ['db.delete'] }, effect: 'block' }] };

describe('POST /policies/simulate (simulatePolicies)', () => {
  it('replays recorded decisions with the draft set and groups the changes by rule and from → to', async () => {
    const ws = await freshWorkspace();
    // recorded with no policies: everything allowed
    await ws.evaluate('refund.create', { amount: 500 });
    await ws.evaluate('refund.create', { amount: 20 });
    await ws.evaluate('db.delete');
    await ws.evaluate('db.delete');
    await ws.evaluate('db.read');

    const res = await server.api('POST', '/policies/simulate', { key: ws.key, body: { policies: [refundsNeedApproval, blockDeletes] } });
    expect(res.status).toBe(200);
    const sim = res.body.data;
    expect(sim).toMatchObject({
      replayed: 5,
      changed: 3,
      approximate: 0,
      failed: 0,
      from: { allowed: 5, blocked: 0, approval_required: 0 },
      to: { allowed: 2, blocked: 2, approval_required: 1 },
    });
    expect(sim.groups.map(({ decisions, ...group }) => group)).toEqual([
      { policy: 'No deletes', rule: 'no-delete', from: 'allowed', to: 'blocked', count: 2 },
      { policy: 'Refunds', rule: 'big-refunds', from: 'allowed', to: 'approval_required', count: 1 },
    ]);
    expect(sim.groups[1]?.decisions).toEqual([
      expect.objectContaining({ action: 'refund.create', agent: ws.agent.slug, resource: null, from: 'allowed', to: 'approval_required' }),
    ]);
    expect(sim.duration_ms).toBeGreaterThanOrEqual(0);
  });

  it('charges the draft only with what it changes; a policy deleted since and the default decisions are drift, apart', async () => {
    // issue 38: a threshold lowered from 100 to 30 was charged with every change made since the decisions
    const ws = await freshWorkspace();
    const refunds = (threshold: number): PolicyCreate => ({
      name: 'Refunds',
      rules: [
        { id: 'big-refunds', match: { action: ['refund.*'] }, condition: `context.amount > ${threshold}`, effect: 'require_approval' },
      ],
    });
    const legacy: PolicyCreate = { name: 'Legacy exports', rules: [{ id: 'no-export', match: { action: ['export.*'] }, effect: 'block' }] };
    expect((await server.api('POST', '/policies', { key: ws.key, body: refunds(100) })).status).toBe(201);
    expect((await server.api('POST', '/policies', { key: ws.key, body: legacy })).status).toBe(201);
    expect((await ws.evaluate('refund.create', { amount: 50 })).result).toBe('allowed');
    expect((await ws.evaluate('refund.create', { amount: 60 })).result).toBe('allowed');
    expect((await ws.evaluate('refund.create', { amount: 10 })).result).toBe('allowed');
    expect((await ws.evaluate('refund.create', { amount: 500 })).result).toBe('approval_required');
    expect((await ws.evaluate('export.run')).result).toBe('blocked');
    expect((await ws.evaluate('export.run')).result).toBe('blocked');
    const stager = await server.api('POST', '/agents', {
      key: ws.key,
      body: { name: 'Stager', provider: 'local', environment: 'staging' },
    });
    expect(stager.status).toBe(201);
    const deploy = await server.api('POST', '/policy/evaluate', {
      key: ws.key,
      body: { input: { action: 'deploy.run', agent: stager.body.data.slug, environment: 'staging' } },
    });
    expect(deploy.body.data.result).toBe('allowed');
    // since then: the export policy deleted, staging blocked by default
    expect((await server.api('DELETE', '/policies/Legacy exports', { key: ws.key })).status).toBe(200);
    expect((await server.api('PATCH', '/settings', { key: ws.key, body: { default_decision: { staging: 'block' } } })).status).toBe(200);

    const res = await server.api('POST', '/policies/simulate', { key: ws.key, body: { policies: [refunds(30)] } });
    expect(res.status).toBe(200);
    const sim = res.body.data;
    // the draft's effect: current policies → draft, only the two refunds between 30 and 100
    expect(sim).toMatchObject({
      replayed: 7,
      changed: 2,
      failed: 0,
      from: { allowed: 5, blocked: 1, approval_required: 1 },
      to: { allowed: 3, blocked: 1, approval_required: 3 },
    });
    expect(sim.groups.map(({ decisions, ...group }) => group)).toEqual([
      { policy: 'Refunds', rule: 'big-refunds', from: 'allowed', to: 'approval_required', count: 2 },
    ]);
    expect(sim.groups[0]?.decisions.map((d) => [d.action, d.from, d.to])).toEqual([
      ['refund.create', 'allowed', 'approval_required'],
      ['refund.create', 'allowed', 'approval_required'],
    ]);
    // drift: recorded → current policies, grouped by the current deciding rule (here the default decision)
    expect(sim.drift).toMatchObject({
      changed: 3,
      failed: 0,
      from: { allowed: 4, blocked: 2, approval_required: 1 },
      to: { allowed: 5, blocked: 1, approval_required: 1 },
    });
    expect(sim.drift.groups.map(({ decisions, ...group }) => group)).toEqual([
      { policy: null, rule: null, from: 'blocked', to: 'allowed', count: 2 },
      { policy: null, rule: null, from: 'allowed', to: 'blocked', count: 1 },
    ]);
    expect(sim.drift.groups[1]?.decisions.map((d) => [d.agent, d.action])).toEqual([[stager.body.data.slug, 'deploy.run']]);
  });

  it('saves nothing: no policy, no audit event, no approval', async () => {
    const ws = await freshWorkspace();
    await ws.evaluate('db.delete');
    const before = await server.api('GET', '/audit-logs', { key: ws.key, query: { limit: 100 } });
    expect((await server.api('POST', '/policies/simulate', { key: ws.key, body: { policies: [blockDeletes] } })).status).toBe(200);
    expect((await server.api('GET', '/policies', { key: ws.key })).body.data).toEqual([]);
    expect((await server.api('GET', '/approvals', { key: ws.key })).body.data).toEqual([]);
    // compared by id: the sealer may meanwhile have filled in sequence and hash
    const after = await server.api('GET', '/audit-logs', { key: ws.key, query: { limit: 100 } });
    expect(after.body.data.map((e) => e.id)).toEqual(before.body.data.map((e) => e.id));
  });

  it('replays against the current set too: an empty draft un-blocks what a live policy blocked; approvals count as approval_required', async () => {
    const ws = await freshWorkspace();
    expect((await server.api('POST', '/policies', { key: ws.key, body: blockDeletes })).status).toBe(201);
    expect((await server.api('POST', '/policies', { key: ws.key, body: refundsNeedApproval })).status).toBe(201);
    expect((await ws.evaluate('db.delete')).result).toBe('blocked');
    const asked = await ws.evaluate('refund.create', { amount: 900 });
    expect(asked.result).toBe('approval_required');
    expect((await server.api('PATCH', `/approvals/${asked.approval_id}`, { key: ws.key, body: { status: 'approved' } })).status).toBe(200);
    const used = await server.api('POST', '/policy/evaluate', {
      key: ws.key,
      body: {
        input: { action: 'refund.create', agent: ws.agent.slug, context: { amount: 900 } },
        approval_id: asked.approval_id as string,
      },
    });
    expect(used.body.data.result).toBe('allowed');

    const same = await server.api('POST', '/policies/simulate', { key: ws.key, body: { policies: [blockDeletes, refundsNeedApproval] } });
    expect(same.body.data).toMatchObject({ replayed: 3, changed: 0, from: { allowed: 0, blocked: 1, approval_required: 2 } });
    const none = await server.api('POST', '/policies/simulate', { key: ws.key, body: { policies: [] } });
    expect(none.body.data).toMatchObject({ replayed: 3, changed: 3, to: { allowed: 3, blocked: 0, approval_required: 0 } });
  });

  it('replays only the `limit` most recent decisions, and only this workspace’s', async () => {
    const ws = await freshWorkspace();
    const other = await freshWorkspace();
    for (const action of ['db.delete', 'db.delete', 'db.read']) await ws.evaluate(action);
    await other.evaluate('db.delete');
    const res = await server.api('POST', '/policies/simulate', { key: ws.key, body: { policies: [blockDeletes], limit: 1 } });
    expect(res.body.data).toMatchObject({ replayed: 1, changed: 0 });
    const all = await server.api('POST', '/policies/simulate', { key: other.key, body: { policies: [blockDeletes] } });
    expect(all.body.data).toMatchObject({ replayed: 1, changed: 1 });
  });

  it('answers 400 for a draft that would not save (CEL error with position, duplicate name) and for a limit over 100,000', async () => {
    const ws = await freshWorkspace();
    const cel = await server.api('POST', '/policies/simulate', {
      key: ws.key,
      body: { policies: [{ name: 'Broken', rules: [{ condition: 'context.amount >', effect: 'block' }] }] },
    });
    expect(cel.status).toBe(400);
    expect(cel.body.error.code).toBe('invalid_policy');
    expect(cel.body.error.message).toMatch(/^policies\[0\]: rules\[0\]\.condition: .* at position \d+/);
    const twice = await server.api('POST', '/policies/simulate', { key: ws.key, body: { policies: [blockDeletes, blockDeletes] } });
    expect(twice.status).toBe(400);
    expect(twice.body.error.code).toBe('invalid_request');
    const tooMany = await server.api('POST', '/policies/simulate', { key: ws.key, body: { policies: [], limit: 100_001 } });
    expect(tooMany.status).toBe(400);
    expect(tooMany.body.error.code).toBe('invalid_request');
  });

  it('answers 403 to a key without audit:read', async () => {
    const ws = await freshWorkspace();
    const writer = await keyFor(server, 'policies:read,policies:write', ws.slug);
    const res = await server.api('POST', '/policies/simulate', { key: writer, body: { policies: [] } });
    expect(res.status).toBe(403);
    expect(res.body.error.code).toBe('insufficient_permission');
  });

  it('answers for a set of decisions what deciding each of them live answers, repeated acts included', async () => {
    const ws = await freshWorkspace();
    const other = await server.api('POST', '/agents', {
      key: ws.key,
      body: { name: 'Ops runner', provider: 'local', environment: 'production' },
    });
    expect(other.status).toBe(201);
    // 8 distinct acts, 3 of each: every act repeats
    const inputs = [
      { action: 'refund.create', agent: ws.agent.slug, context: { amount: 500 } },
      { action: 'refund.create', agent: ws.agent.slug, context: { amount: 20 } },
      { action: 'refund.create', agent: other.body.data.slug, context: { amount: 500 } },
      { action: 'db.delete', agent: ws.agent.slug, resource: 'orders/1' },
      { action: 'db.delete', agent: other.body.data.slug, resource: 'orders/2' },
      { action: 'files.read', agent: ws.agent.slug, resource: 'docs/a', tool: 'reader' },
      { action: 'files.read', agent: ws.agent.slug, resource: 'secrets/a', tool: 'reader' },
      { action: 'deploy.api', agent: other.body.data.slug, context: { roles: ['admin'] } },
    ];
    const evaluate = async (input: (typeof inputs)[number]) => {
      const res = await server.api('POST', '/policy/evaluate', { key: ws.key, body: { input } });
      expect(res.status).toBe(200);
      return res.body.data;
    };
    for (let round = 0; round < 3; round++) for (const input of inputs) expect((await evaluate(input)).result).toBe('allowed');
    const draft: PolicyCreate[] = [
      refundsNeedApproval,
      blockDeletes,
      { name: 'Secrets', priority: 200, rules: [{ id: 'secrets', match: { resource: ['secrets/*'] }, effect: 'block' }] },
      {
        name: 'Deploys',
        rules: [{ id: 'admins', match: { action: ['deploy.*'] }, condition: '"admin" in context.roles', effect: 'require_approval' }],
      },
    ];
    const replayed = await server.api('POST', '/policies/simulate', { key: ws.key, body: { policies: draft } });
    expect(replayed.status).toBe(200);

    // the draft made live, each act decided once more, one by one
    for (const policy of draft) expect((await server.api('POST', '/policies', { key: ws.key, body: policy })).status).toBe(201);
    const to = { allowed: 0, blocked: 0, approval_required: 0 };
    const byPolicy = new Map<string, number>();
    for (let round = 0; round < 3; round++) {
      for (const input of inputs) {
        const decision = await evaluate(input);
        to[decision.result as keyof typeof to]++;
        if (decision.result !== 'allowed')
          byPolicy.set(`${decision.policy} ${decision.result}`, (byPolicy.get(`${decision.policy} ${decision.result}`) ?? 0) + 1);
      }
    }
    const sim = replayed.body.data;
    expect(sim).toMatchObject({ replayed: 24, from: { allowed: 24, blocked: 0, approval_required: 0 }, to, changed: 24 - to.allowed });
    expect(new Map(sim.groups.map((g) => [`${g.policy} ${g.to}`, g.count]))).toEqual(byPolicy);
    expect(to).toEqual({ allowed: 6, blocked: 9, approval_required: 9 });
  });

  it('answers 429 rate_limited to a second replay of a workspace while its first runs; another workspace waits its turn instead', async () => {
    const busy = await freshWorkspace();
    const other = await freshWorkspace();
    await other.evaluate('db.delete');
    // enough recorded decisions that the first replay is still running when the others arrive
    await sql`insert into audit_events (workspace_id, id, event_timestamp, source, agent, action, resource, environment, result, severity, message, context)
      select ${busy.id}::uuid, gen_random_uuid(), now() - make_interval(secs => g), 'evaluation', ${busy.agent.slug},
        'refund.create', 'orders/' || g, 'production', 'allowed', 'info', 'allowed', jsonb_build_object('input', jsonb_build_object('amount', g))
      from generate_series(1, 20000) g`.execute(server.database.db);
    const replay = (key: string) =>
      server.api('POST', '/policies/simulate', { key, body: { policies: [refundsNeedApproval, blockDeletes], limit: 20_000 } });
    const [first, second, third, elsewhere] = await Promise.all([replay(busy.key), replay(busy.key), replay(busy.key), replay(other.key)]);
    const answers = [first, second, third];
    expect(answers.filter((res) => res.status === 200)).toHaveLength(1);
    for (const refused of answers.filter((res) => res.status !== 200)) {
      expect(refused.status).toBe(429);
      expect(refused.body.error.code).toBe('rate_limited');
      expect(refused.headers.get('retry-after')).toBe('1');
    }
    expect(answers.find((res) => res.status === 200)?.body.data.replayed).toBe(20_000);
    expect(elsewhere.status).toBe(200);
    expect(elsewhere.body.data).toMatchObject({ replayed: 1, changed: 1 });
    // once it answered, the workspace replays again
    expect((await replay(busy.key)).status).toBe(200);
  });

  it('is in the SDK (policies.simulate), and replays 10,000 recorded decisions', { timeout: 120_000 }, async () => {
    const ws = await freshWorkspace();
    // 10,000 recorded decisions, written straight to the audit table (the API would take minutes)
    await sql`insert into audit_events (workspace_id, id, event_timestamp, source, agent, action, resource, environment, result, severity, message, context)
      select ${ws.id}::uuid, gen_random_uuid(), now() - make_interval(secs => g), 'evaluation', ${ws.agent.slug},
        case when g % 3 = 0 then 'db.delete' else 'refund.create' end, 'orders/' || g, 'production', 'allowed', 'info', 'allowed',
        jsonb_build_object('input', jsonb_build_object('amount', g % 200))
      from generate_series(1, 10000) g`.execute(server.database.db);
    const warden = createWarden({ apiKey: ws.key, baseUrl: server.url });
    const started = performance.now();
    const sim = await warden.policies.simulate({ policies: [refundsNeedApproval, blockDeletes], limit: 10_000 });
    const ms = Math.round(performance.now() - started);
    expect(sim.replayed).toBe(10_000);
    expect(sim.from.allowed).toBe(10_000);
    expect(sim.to.blocked).toBe(3333);
    expect(sim.changed).toBe(sim.to.blocked + sim.to.approval_required);
    for (const group of sim.groups) expect(group.decisions.length).toBe(Math.min(group.count, 100));
    console.log(`simulate 10,000 decisions: ${ms} ms round trip, ${sim.duration_ms} ms on the server`);
  });
});
