import { readFileSync } from 'node:fs';
import type { AgentCreateWritable, EvaluationInput, PolicyCreate } from '@warden/contract';
import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { keyFor, useTestServer } from '../support/server.ts';

const server = useTestServer();

const spec = JSON.parse(readFileSync(new URL('../../spec/dist/openapi.json', import.meta.url), 'utf8'));
const PERMISSIONS: string[] = spec.components.schemas.Permission.enum;
const ALL = PERMISSIONS.join(',');
const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
const CONTROL_IDS = [
  'agent-risk-assessed',
  'production-enforced',
  'high-risk-approval',
  'agent-keys',
  'audit-chain',
  'production-default-block',
  'agents-hold-no-credentials',
];

interface Control {
  id: string;
  status: 'pass' | 'fail' | 'not_applicable';
  score: number;
  weight: number;
  frameworks: string[];
}

let workspaces = 0;
const freshWorkspace = () => keyFor(server, ALL, `compliance-${++workspaces}`);

const createAgent = async (key: string, body: Omit<AgentCreateWritable, 'provider'>) => {
  const res = await server.api('POST', '/agents', { key, body: { provider: 'local', ...body } });
  expect(res.status).toBe(201);
  return res.body.data;
};

/** An agent without a key: registered (Warden generates it one), then its key removed. */
const createKeylessAgent = async (key: string, body: Omit<AgentCreateWritable, 'provider'>) => {
  const agent = await createAgent(key, body);
  const res = await server.api('PATCH', `/agents/${agent.id}`, { key, body: { api_key: null } });
  expect(res.body.data.has_api_key).toBe(false);
  return res.body.data;
};

const createPolicy = async (key: string, body: PolicyCreate) => {
  const res = await server.api('POST', '/policies', { key, body });
  expect(res.status).toBe(201);
  return res.body.data;
};

async function status(key: string) {
  const res = await server.api('GET', '/compliance/status', { key });
  expect(res.status).toBe(200);
  const data = res.body.data;
  expectDocumentedNumbers(data);
  return data;
}

const control = (data: { controls: Control[] }, id: string): Control => {
  const found = data.controls.find((c) => c.id === id);
  expect(found, id).toBeDefined();
  return found as Control;
};

/**
 * The numbers of ComplianceStatus as its description defines them:
 * score = weighted mean of the applicable controls' scores; control_coverage = share of
 * controls that are applicable; a control passes when all its subjects satisfy it.
 */
function expectDocumentedNumbers(data: { score: number; control_coverage: number; controls: Control[] }) {
  const applicable = data.controls.filter((c) => c.status !== 'not_applicable');
  const weight = applicable.reduce((sum, c) => sum + c.weight, 0);
  const score = weight === 0 ? 0 : applicable.reduce((sum, c) => sum + c.weight * c.score, 0) / weight;
  expect(Math.abs(data.score - score)).toBeLessThanOrEqual(0.1);
  expect(Math.abs(data.control_coverage - (100 * applicable.length) / data.controls.length)).toBeLessThanOrEqual(0.1);
  for (const c of applicable) expect(c.status, c.id).toBe(c.score === 100 ? 'pass' : 'fail');
}

/** framework_score when every control is applicable: share of requirements whose controls all pass. */
function expectedFrameworkScore(controls: Control[]) {
  const requirements = new Map<string, boolean>();
  for (const c of controls) for (const f of c.frameworks) requirements.set(f, (requirements.get(f) ?? true) && c.status === 'pass');
  return (100 * [...requirements.values()].filter(Boolean).length) / requirements.size;
}

/** Polls GET /audit/verify until every event is sealed (bounded: 10 s). */
async function waitSealed(key: string) {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const res = await server.api('GET', '/audit/verify', { key });
    if ((res.body.data.unsealed === 0 && res.body.data.checked > 0) || Date.now() > deadline) return res.body.data;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/**
 * A fresh workspace and its compliance status taken while its tree was still empty. Creating
 * its key is an audited configuration event that the sealer may seal at any moment, so the
 * status counts as "before" only if a verification after it still finds no sealed event (the
 * tree never shrinks); otherwise another workspace is tried.
 */
async function workspaceBeforeItsFirstSeal() {
  for (let attempt = 1; attempt <= 5; attempt++) {
    const key = await freshWorkspace();
    const before = await status(key);
    const verified = await server.api('GET', '/audit/verify', { key });
    if (verified.body.data.tree_size === 0) return { key, before };
  }
  throw new Error('five fresh workspaces in a row had a sealed event before their first status');
}

const evaluate = (key: string, input: EvaluationInput) => server.api('POST', '/policy/evaluate', { key, body: { input } });

describe('GET /compliance/status (getComplianceStatus)', () => {
  it('returns score, framework_score, control_coverage, risk_score, calculated_at and the controls', async () => {
    const before = Date.now();
    const data = await status(server.key);
    expect(Object.keys(data).sort()).toEqual(['calculated_at', 'control_coverage', 'controls', 'framework_score', 'risk_score', 'score']);
    for (const field of ['score', 'framework_score', 'control_coverage', 'risk_score'] as const) {
      expect(typeof data[field]).toBe('number');
      expect(data[field]).toBeGreaterThanOrEqual(0);
      expect(data[field]).toBeLessThanOrEqual(100);
    }
    expect(data.calculated_at).toMatch(ISO);
    expect(Math.abs(Date.parse(data.calculated_at) - before)).toBeLessThan(10_000);
    expect(data.controls.map((c: Control) => c.id).sort()).toEqual([...CONTROL_IDS].sort());
    for (const c of data.controls) {
      expect(Object.keys(c).sort()).toEqual(['description', 'frameworks', 'id', 'name', 'score', 'status', 'weight']);
      expect(['pass', 'fail', 'not_applicable']).toContain(c.status);
      expect(c.frameworks.length).toBeGreaterThan(0);
    }
  });

  it('starts a fresh workspace with nothing applicable but its audit log, and no risk', async () => {
    // Its key's creation is its first audit event (a configuration change): once sealed, the
    // audit-log control applies and passes; nothing else applies.
    const data = await status(await freshWorkspace());
    expect(data.controls.filter((c: Control) => c.id !== 'audit-chain').every((c: Control) => c.status === 'not_applicable')).toBe(true);
    expect(['not_applicable', 'pass']).toContain(data.controls.find((c: Control) => c.id === 'audit-chain')!.status);
    expect(data.risk_score).toBe(0);
  });

  it('fails agent-risk-assessed and raises risk_score for an agent without risk_level, and passes once it is set', async () => {
    const key = await freshWorkspace();
    const empty = await status(key);
    expect(control(empty, 'agent-risk-assessed').status).toBe('not_applicable');

    const agent = await createAgent(key, { name: 'Unrated', slug: 'unrated' });
    const unrated = await status(key);
    expect(control(unrated, 'agent-risk-assessed')).toMatchObject({ status: 'fail', score: 0 });
    expect(unrated.risk_score).toBeGreaterThan(empty.risk_score);
    expect(unrated.control_coverage).toBeGreaterThan(empty.control_coverage);

    expect((await server.api('PATCH', `/agents/${agent.id}`, { key, body: { risk_level: 'low' } })).status).toBe(200);
    const rated = await status(key);
    expect(control(rated, 'agent-risk-assessed')).toMatchObject({ status: 'pass', score: 100 });
    expect(rated.risk_score).toBeLessThan(unrated.risk_score);
    expect(rated.risk_score).toBe(0);
    expect(rated.score).toBeGreaterThan(unrated.score);

    await createAgent(key, { name: 'Second', slug: 'second' });
    const half = await status(key);
    expect(control(half, 'agent-risk-assessed')).toMatchObject({ status: 'fail', score: 50 });
    expect(half.risk_score).toBeGreaterThan(rated.risk_score);
  });

  it('counts high- and critical-risk agents as risky in risk_score', async () => {
    const key = await freshWorkspace();
    const agent = await createAgent(key, { name: 'Risky', slug: 'risky', risk_level: 'low' });
    expect((await status(key)).risk_score).toBe(0);
    await server.api('PATCH', `/agents/${agent.id}`, { key, body: { risk_level: 'critical' } });
    const critical = await status(key);
    expect(critical.risk_score).toBeGreaterThan(0);
    await server.api('PATCH', `/agents/${agent.id}`, { key, body: { risk_level: 'medium' } });
    expect((await status(key)).risk_score).toBe(0);
    // Only active agents count: a suspended, unrated one adds no risk.
    await createAgent(key, { name: 'Benched', slug: 'benched', status: 'suspended' });
    expect((await status(key)).risk_score).toBe(0);
  });

  it('judges production-enforced on what production agents did: the share of their acts an enforcing rule can match', async () => {
    const key = await freshWorkspace();
    await createAgent(key, { name: 'Dev bot', slug: 'dev-bot', risk_level: 'low' });
    await createAgent(key, { name: 'Prod bot', slug: 'prod-bot', environment: 'production', risk_level: 'low' });
    // a production agent that has not acted gives nothing to judge
    expect(control(await status(key), 'production-enforced').status).toBe('not_applicable');

    for (const action of ['db.read', 'db.read', 'db.drop_table', 'mail.send'])
      expect((await evaluate(key, { action, agent: 'prod-bot' })).status).toBe(200);
    await evaluate(key, { action: 'db.drop_table', agent: 'dev-bot' });
    const uncovered = await status(key);
    expect(control(uncovered, 'production-enforced')).toMatchObject({ status: 'fail', score: 0 });

    // Neither a monitor policy, a disabled one, one for another agent, nor one for acts it never does covers it.
    await createPolicy(key, { name: 'Only watching', mode: 'monitor', rules: [{ match: { agent: ['prod-bot'] }, effect: 'block' }] });
    await createPolicy(key, { name: 'Switched off', enabled: false, rules: [{ match: { agent: ['prod-bot'] }, effect: 'block' }] });
    await createPolicy(key, { name: 'Someone else', rules: [{ match: { agent: ['dev-bot'] }, effect: 'block' }] });
    await createPolicy(key, { name: 'Never', rules: [{ match: { action: ['zz.never.happens'] }, effect: 'block' }] });
    expect(control(await status(key), 'production-enforced')).toMatchObject({ status: 'fail', score: 0 });

    // a rule that matches one act in four: a quarter covered
    await createPolicy(key, {
      name: 'Prod guard',
      rules: [{ match: { agent: ['prod-*'], environment: ['production'], action: ['db.drop*'] }, effect: 'block' }],
    });
    const partly = await status(key);
    expect(control(partly, 'production-enforced')).toMatchObject({ status: 'fail', score: 25 });
    expect(partly.score).toBeGreaterThan(uncovered.score);

    await createPolicy(key, {
      name: 'Ask for the rest',
      rules: [{ match: { action: ['db.read', 'mail.*'] }, effect: 'require_approval' }],
    });
    const covered = await status(key);
    expect(control(covered, 'production-enforced')).toMatchObject({ status: 'pass', score: 100 });
    expect(covered.framework_score).toBeGreaterThanOrEqual(uncovered.framework_score);
  });

  it('fails high-risk-approval until a require_approval rule can match something a high-risk agent did', async () => {
    const key = await freshWorkspace();
    await createAgent(key, { name: 'Calm', slug: 'calm', risk_level: 'low' });
    await createAgent(key, { name: 'Wild', slug: 'wild', risk_level: 'high' });
    expect(control(await status(key), 'high-risk-approval').status).toBe('not_applicable');
    await evaluate(key, { action: 'payments.send', agent: 'wild', context: { amount: 5 } });
    const open = await status(key);
    expect(control(open, 'high-risk-approval')).toMatchObject({ status: 'fail', score: 0 });

    await createPolicy(key, { name: 'Block wild', rules: [{ match: { agent: ['wild'] }, effect: 'block' }] });
    await createPolicy(key, {
      name: 'Ask elsewhere',
      rules: [{ match: { agent: ['wild'], action: ['refunds.*'] }, effect: 'require_approval' }],
    });
    expect(control(await status(key), 'high-risk-approval')).toMatchObject({ status: 'fail', score: 0 });

    await createPolicy(key, {
      name: 'Ask for wild',
      rules: [{ match: { agent: ['wild'], action: ['payments.*'] }, effect: 'require_approval' }],
    });
    const approved = await status(key);
    expect(control(approved, 'high-risk-approval')).toMatchObject({ status: 'pass', score: 100 });
    expect(approved.score).toBeGreaterThan(open.score);
  });

  it('counts only rules that can take effect on what was done: allow, a condition that never holds, an act never done', async () => {
    const key = await freshWorkspace();
    await createAgent(key, { name: 'Prod wild', slug: 'prod-wild', environment: 'production', risk_level: 'high' });
    await evaluate(key, { action: 'payments.send', agent: 'prod-wild', context: { amount: 500 } });
    await waitSealed(key); // so that audit-chain is applicable in both statuses compared
    const before = await status(key);
    // issue 36: these two raised a workspace's score from 32.6 to 71.7, both controls passing
    await createPolicy(key, { name: 'Allow all', rules: [{ match: { agent: ['prod-*'] }, effect: 'allow' }] });
    for (const condition of ['false', '1 == 2', '!true', '[1, 2].all(x, x > 5)'])
      await createPolicy(key, {
        name: `Never (${condition})`,
        rules: [{ match: { agent: ['prod-*'] }, effect: 'require_approval', condition }],
      });
    // issue 46, row 5: a rule for an act no agent does took a workspace from 47.8 to 87
    await createPolicy(key, {
      name: 'Never happens',
      rules: [
        { match: { action: ['zz.never.happens'] }, effect: 'block' },
        { match: { action: ['zz.never.happens'] }, effect: 'require_approval' },
      ],
    });
    const inflated = await status(key);
    for (const id of ['production-enforced', 'high-risk-approval'])
      expect(control(inflated, id)).toMatchObject({ status: 'fail', score: 0 });
    expect(inflated.score).toBe(before.score);

    // a condition that reads what is decided on can hold, and counts
    await createPolicy(key, {
      name: 'Large payments',
      rules: [{ match: { agent: ['prod-*'] }, effect: 'require_approval', condition: 'context.amount > 100' }],
    });
    const real = await status(key);
    for (const id of ['production-enforced', 'high-risk-approval']) expect(control(real, id)).toMatchObject({ status: 'pass', score: 100 });
  });

  it('scores agent-keys by the share of agents carrying a key', async () => {
    const key = await freshWorkspace();
    const bare = await createKeylessAgent(key, { name: 'Bare', slug: 'bare', risk_level: 'low' });
    const none = await status(key);
    expect(control(none, 'agent-keys')).toMatchObject({ status: 'fail', score: 0 });

    await createAgent(key, { name: 'Keyed', slug: 'keyed', risk_level: 'low', api_key: 'keyed-agent-secret-0123456789' });
    const half = await status(key);
    expect(control(half, 'agent-keys')).toMatchObject({ status: 'fail', score: 50 });
    expect(half.score).toBeGreaterThan(none.score);

    expect((await server.api('PATCH', `/agents/${bare.id}`, { key, body: { api_key: 'bare-agent-secret-0123456789' } })).status).toBe(200);
    const all = await status(key);
    expect(control(all, 'agent-keys')).toMatchObject({ status: 'pass', score: 100 });
    expect(all.score).toBeGreaterThan(half.score);
  });

  it('makes audit-chain applicable after the first sealed event, passing while the chain verifies', async () => {
    const { key, before } = await workspaceBeforeItsFirstSeal();
    expect(control(before, 'audit-chain').status).toBe('not_applicable');

    const res = await server.api('POST', '/audit', { key, body: { action: 'first.event', result: 'blocked' } });
    expect(res.status).toBe(201);
    expect(await waitSealed(key)).toMatchObject({ valid: true, unsealed: 0 });
    const sealedStatus = await status(key);
    expect(control(sealedStatus, 'audit-chain')).toMatchObject({ status: 'pass', score: 100 });
    expect(sealedStatus.control_coverage).toBeGreaterThan(before.control_coverage);

    await server.database.db.transaction().execute(async (trx) => {
      await sql`SET LOCAL session_replication_role = replica`.execute(trx);
      await sql`UPDATE audit_events SET action = 'rewritten' WHERE id = ${res.body.data.id}`.execute(trx);
    });
    const broken = await status(key);
    expect(control(broken, 'audit-chain')).toMatchObject({ status: 'fail', score: 0 });
    expect(broken.score).toBeLessThan(sealedStatus.score);
  });

  it('computes framework_score from the requirements whose controls all pass', async () => {
    const key = await freshWorkspace();
    // Every control applicable: a production, high-risk agent with a key, a sealed event, and a brokered credential.
    const agent = await createKeylessAgent(key, { name: 'Full', slug: 'full', environment: 'production', risk_level: 'high' });
    const credential = { name: 'api', hosts: ['api.example.com'], auth: { type: 'bearer' as const, secret: 'compliance-secret-0123' } };
    expect((await server.api('POST', '/credentials', { key, body: credential })).status).toBe(201);
    await server.api('POST', '/audit', { key, body: { action: 'seed', result: 'blocked' } });
    // what the agent did, so that the controls judged on its acts apply
    expect((await evaluate(key, { action: 'orders.ship', agent: 'full', environment: 'production' })).status).toBe(200);
    await waitSealed(key);
    const failing = await status(key);
    expect(failing.control_coverage).toBe(100);
    expect(
      failing.controls
        .filter((c: Control) => c.status === 'fail')
        .map((c: Control) => c.id)
        .sort(),
    ).toEqual(['agent-keys', 'high-risk-approval', 'production-enforced', 'production-default-block', 'agents-hold-no-credentials'].sort());
    expect(Math.abs(failing.framework_score - expectedFrameworkScore(failing.controls))).toBeLessThanOrEqual(0.1);

    await server.api('PATCH', `/agents/${agent.id}`, { key, body: { api_key: 'full-agent-secret-0123456789' } });
    await createPolicy(key, {
      name: 'Ask',
      rules: [{ match: { agent: ['full'], environment: ['production'] }, effect: 'require_approval' }],
    });
    // The production agent also makes production-default-block applicable: it passes once production defaults to block.
    expect((await server.api('PATCH', '/settings', { key, body: { default_decision: { production: 'block' } } })).status).toBe(200);
    // and agents-hold-no-credentials once agents may no longer send credentials of their own
    expect((await server.api('PATCH', '/settings', { key, body: { agents_hold_no_credentials: true } })).status).toBe(200);
    const passing = await status(key);
    expect(passing.controls.every((c: Control) => c.status === 'pass')).toBe(true);
    expect(passing.score).toBe(100);
    expect(passing.framework_score).toBe(100);
    expect(passing.framework_score).toBeGreaterThan(failing.framework_score);
  });

  it('raises risk_score with blocked decisions of the last 24 hours', async () => {
    const key = await freshWorkspace();
    await createAgent(key, { name: 'Calm', slug: 'calm', risk_level: 'low' });
    await createPolicy(key, { name: 'No bad', rules: [{ match: { action: ['x.bad'] }, effect: 'block' }] });
    expect((await evaluate(key, { action: 'x.good', agent: 'calm' })).body.data.allowed).toBe(true);
    const calm = await status(key);
    expect(calm.risk_score).toBe(0);

    expect((await evaluate(key, { action: 'x.bad', agent: 'calm' })).body.data.result).toBe('blocked');
    const once = await status(key);
    expect(once.risk_score).toBeGreaterThan(calm.risk_score);

    expect((await evaluate(key, { action: 'x.bad', agent: 'calm' })).body.data.result).toBe('blocked');
    const twice = await status(key);
    expect(twice.risk_score).toBeGreaterThan(once.risk_score);
  });

  it('reaches risk_score 100 when every active agent is risky and every decision is blocked', async () => {
    const key = await freshWorkspace();
    await createAgent(key, { name: 'Danger', slug: 'danger', risk_level: 'critical' });
    await createPolicy(key, { name: 'Block all', rules: [{ match: { action: ['*'] }, effect: 'block' }] });
    expect((await evaluate(key, { action: 'anything', agent: 'danger' })).body.data.result).toBe('blocked');
    expect((await status(key)).risk_score).toBe(100);
  });

  it('answers 403 insufficient_permission for a key without compliance:read, 401 without a key', async () => {
    const key = await keyFor(server, PERMISSIONS.filter((p) => p !== 'compliance:read').join(','));
    const res = await server.api('GET', '/compliance/status', { key });
    expect(res.status).toBe(403);
    expect(res.body.error.code).toBe('insufficient_permission');
    const anonymous = await server.api('GET', '/compliance/status', { key: null });
    expect(anonymous.status).toBe(401);
    expect(anonymous.body.error.code).toBe('unauthorized');
  });

  it("is computed from the key's workspace only", async () => {
    const busy = await freshWorkspace();
    await createAgent(busy, { name: 'Unrated elsewhere', slug: 'unrated-elsewhere' });
    const quiet = await freshWorkspace();
    const data = await status(quiet);
    expect(control(data, 'agent-risk-assessed').status).toBe('not_applicable');
    expect(data.risk_score).toBe(0);
  });
});
