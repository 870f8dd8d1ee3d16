/**
 * The dashboard API's policies (/policies: list, create, change, delete through the v1
 * service, with its validation: CEL errors name the rule and the position), the what-if replay
 * (/policies/simulate) and the charts'
 * figures (/insights, aggregated in SQL); what a session may not do (without the permission,
 * or on another workspace's objects). Shared helpers: ./support/dashboard.ts.
 */
import type { PolicyRule } from '@warden/contract';
import { describe, expect, it } from 'vitest';
import { useTestServer } from '../support/server.ts';
import { dashboardHelpers, UUID } from './support/dashboard.ts';

const server = useTestServer();
const { login, freshWorkspace, newKey } = dashboardHelpers(server);

async function configurationEvents(key: string, action: string, resource: string) {
  const page = await server.api('GET', '/audit-logs', { key, query: { action, limit: 100 } });
  expect(page.status).toBe(200);
  return page.body.data.filter((e) => e.resource === resource && e.source === 'configuration');
}

const RULE: PolicyRule = {
  id: 'big-refunds',
  match: { action: ['payments.refund'] },
  condition: 'context.amount > 1000',
  effect: 'require_approval',
};

describe('policies (/policies)', () => {
  it('creates, lists, changes and deletes a policy; the change decides the next evaluation; each is audited', async () => {
    const ws = await freshWorkspace('*');
    const session = await login(ws.key);
    const created = await session.api('POST', '/policies', { body: { name: 'Refunds', mode: 'enforce', priority: 50, rules: [RULE] } });
    expect(created.status).toBe(201);
    const policy = created.body.data;
    expect(policy).toMatchObject({ name: 'Refunds', enabled: true, mode: 'enforce', priority: 50, version: 1, rules: [RULE] });
    expect(policy.id).toMatch(UUID);
    expect((await session.api('GET', '/policies')).body.data).toEqual([policy]);

    expect((await server.api('POST', '/agents', { key: ws.key, body: { name: 'Payer', slug: 'payer', provider: 'local' } })).status).toBe(
      201,
    );
    const ask = () =>
      server.api('POST', '/policy/evaluate', {
        key: ws.key,
        body: { input: { action: 'payments.refund', agent: 'payer', context: { amount: 5000 } } },
      });
    expect((await ask()).body.data.result).toBe('approval_required');

    const changed = await session.api('PATCH', `/policies/${policy.id}`, {
      body: { rules: [{ ...RULE, effect: 'block' }], description: 'no' },
    });
    expect(changed.status).toBe(200);
    expect(changed.body.data).toMatchObject({ version: 2, description: 'no', rules: [{ effect: 'block' }] });
    expect((await ask()).body.data.result).toBe('blocked');

    const deleted = await session.api('DELETE', `/policies/${policy.id}`);
    expect(deleted.status).toBe(200);
    expect(deleted.body).toEqual({ data: { id: policy.id, deleted: true } });
    expect((await session.api('GET', '/policies')).body.data).toEqual([]);
    expect((await ask()).body.data.result).not.toBe('blocked');

    for (const action of ['policy.created', 'policy.updated', 'policy.deleted']) {
      const [event] = await configurationEvents(ws.key, action, policy.id);
      expect(event, action).toMatchObject({ user: expect.stringMatching(/^dashboard:[0-9a-f-]{36}$/) });
    }
  });

  it('answers 400 invalid_policy naming the rule and the position of a CEL error; nothing is saved', async () => {
    const ws = await freshWorkspace('*');
    const session = await login(ws.key);
    const res = await session.api('POST', '/policies', {
      body: { name: 'Broken', rules: [RULE, { effect: 'block', condition: 'context.amount >' }] },
    });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('invalid_policy');
    expect(res.body.error.message).toMatch(/^rules\[1\]\.condition: .+ at position \d+$/);
    const typed = await session.api('POST', '/policies', { body: { name: 'Typed', rules: [{ effect: 'block', condition: '"a" + 1' }] } });
    expect(typed.status).toBe(400);
    expect(typed.body.error.message).toMatch(/^rules\[0\]\.condition: /);
    expect((await session.api('GET', '/policies')).body.data).toEqual([]);

    const ok = (await session.api('POST', '/policies', { body: { name: 'Fine', rules: [RULE] } })).body.data;
    const broken = await session.api('PATCH', `/policies/${ok.id}`, {
      body: { rules: [{ effect: 'block', condition: 'matches(input.action, "x")' }] },
    });
    expect(broken.status).toBe(400);
    expect(broken.body.error.code).toBe('invalid_policy');
    expect((await session.api('GET', '/policies')).body.data[0]?.version).toBe(1);
    const taken = await session.api('POST', '/policies', { body: { name: 'Fine' } });
    expect(taken.status).toBe(409);
    expect(taken.body.error.code).toBe('conflict');
  });

  it('needs policies:read to list and policies:write to change; another workspace’s policy is 404', async () => {
    const ws = await freshWorkspace('*');
    const owner = await login(ws.key);
    const policy = (await owner.api('POST', '/policies', { body: { name: 'Mine' } })).body.data;

    expect((await (await login((await newKey(ws.slug, 'admin')).key)).api('GET', '/policies')).status).toBe(403);
    const reader = await login((await newKey(ws.slug, 'admin,policies:read')).key);
    expect((await reader.api('GET', '/policies')).body.data).toEqual([policy]);
    for (const res of [
      await reader.api('POST', '/policies', { body: { name: 'Other' } }),
      await reader.api('PATCH', `/policies/${policy.id}`, { body: { enabled: false } }),
      await reader.api('DELETE', `/policies/${policy.id}`),
    ]) {
      expect(res.status).toBe(403);
      expect(res.body.error.code).toBe('insufficient_permission');
    }

    const outsider = await login((await freshWorkspace('*')).key);
    expect((await outsider.api('GET', '/policies')).body.data).toEqual([]);
    expect((await outsider.api('PATCH', `/policies/${policy.id}`, { body: { enabled: false } })).status).toBe(404);
    expect((await outsider.api('DELETE', `/policies/${policy.id}`)).status).toBe(404);
    expect((await owner.api('GET', '/policies')).body.data).toEqual([policy]);
  });
});

describe('what-if replay (POST /policies/simulate)', () => {
  it('replays the workspace’s recent decisions with a draft set, groups the changes by rule, saves nothing', async () => {
    const ws = await freshWorkspace('*');
    const other = await freshWorkspace('*');
    for (const key of [ws.key, other.key]) {
      expect((await server.api('POST', '/agents', { key, body: { name: 'Payer', slug: 'payer', provider: 'local' } })).status).toBe(201);
      for (const amount of [5000, 20, 7000]) {
        const res = await server.api('POST', '/policy/evaluate', {
          key,
          body: { input: { action: 'payments.refund', agent: 'payer', context: { amount } } },
        });
        expect(res.body.data.result).toBe('allowed');
      }
    }
    const session = await login(ws.key);
    const res = await session.api('POST', '/policies/simulate', { body: { policies: [{ name: 'Draft', rules: [RULE] }], limit: 100 } });
    expect(res.status).toBe(200);
    expect(res.body.data).toMatchObject({ replayed: 3, changed: 2, from: { allowed: 3 }, to: { allowed: 1, approval_required: 2 } });
    expect(res.body.data.groups).toEqual([
      expect.objectContaining({ policy: 'Draft', rule: 'big-refunds', from: 'allowed', to: 'approval_required', count: 2 }),
    ]);
    expect(res.body.data.groups[0]?.decisions).toHaveLength(2);
    expect((await session.api('GET', '/policies')).body.data).toEqual([]);

    const broken = await session.api('POST', '/policies/simulate', {
      body: { policies: [{ name: 'Draft', rules: [{ effect: 'block', condition: 'context.amount >' }] }] },
    });
    expect(broken.status).toBe(400);
    expect(broken.body.error.code).toBe('invalid_policy');
    expect(broken.body.error.message).toMatch(/^policies\[0\]: rules\[0\]\.condition: .+ at position \d+$/);
  });

  it('needs audit:read (the answer names recorded acts)', async () => {
    const ws = await freshWorkspace('*');
    const session = await login((await newKey(ws.slug, 'admin,policies:read,policies:write')).key);
    const res = await session.api('POST', '/policies/simulate', { body: { policies: [] } });
    expect(res.status).toBe(403);
    expect(res.body.error.code).toBe('insufficient_permission');
  });
});

describe('charts (GET /insights)', () => {
  it('counts decisions per bucket and result, the top blocked actions and agents, and the approvals waiting', async () => {
    const ws = await freshWorkspace('*');
    const other = await freshWorkspace('*');
    const record = (key: string, action: string, result: 'blocked' | 'approval_required', agent?: string) =>
      server.api('POST', '/audit', { key, body: { action, result, ...(agent ? { agent } : {}) } });
    for (let i = 0; i < 5; i++) expect((await record(ws.key, 'db.drop', 'blocked', 'cleaner')).status).toBe(201);
    for (let i = 0; i < 2; i++) await record(ws.key, 'files.delete', 'blocked', 'janitor');
    await record(ws.key, 'payments.refund', 'approval_required', 'payer');
    for (let i = 0; i < 3; i++) await record(other.key, 'other.workspace', 'blocked', 'stranger');
    expect(
      (await server.api('POST', '/agents', { key: ws.key, body: { name: 'Reporter', slug: 'reporter', provider: 'local' } })).status,
    ).toBe(201);
    const allowed = await server.api('POST', '/policy/evaluate', {
      key: ws.key,
      body: { input: { action: 'report.read', agent: 'reporter' } },
    });
    expect(allowed.body.data.result).toBe('allowed');
    expect((await server.api('POST', '/approvals', { key: ws.key, body: { title: 'Waiting' } })).status).toBe(201);
    // A configuration change is not a decision.
    expect((await server.api('POST', '/policies', { key: ws.key, body: { name: 'Not a decision' } })).status).toBe(201);

    const session = await login(ws.key);
    const week = await session.api('GET', '/insights');
    expect(week.status).toBe(200);
    const data = week.body.data;
    expect(data.bucket).toBe('day');
    expect(data.decisions.length).toBeGreaterThanOrEqual(7);
    expect(data.decisions.length).toBeLessThanOrEqual(8);
    const sum = (key: 'allowed' | 'blocked' | 'approval_required') => data.decisions.reduce((n, b) => n + b[key], 0);
    expect({ allowed: sum('allowed'), blocked: sum('blocked'), approval_required: sum('approval_required') }).toEqual({
      allowed: 1,
      blocked: 7,
      approval_required: 1,
    });
    expect(data.decisions.at(-1)).toMatchObject({ blocked: 7 });
    expect(data.top_blocked_actions).toEqual([
      { name: 'db.drop', count: 5 },
      { name: 'files.delete', count: 2 },
    ]);
    expect(data.top_blocked_agents).toEqual([
      { name: 'cleaner', count: 5 },
      { name: 'janitor', count: 2 },
    ]);
    expect(data.approvals_waiting).toMatchObject({
      count: 1,
      under_1h: 1,
      from_1h_to_24h: 0,
      over_24h: 0,
      oldest_created_at: expect.any(String),
    });

    const day = (await session.api('GET', '/insights', { query: { days: 1 } })).body.data;
    expect(day.bucket).toBe('hour');
    expect(day.decisions.length).toBeGreaterThanOrEqual(24);
    expect(day.decisions.length).toBeLessThanOrEqual(25);
    expect(new Date(day.decisions[1]!.start).getTime() - new Date(day.decisions[0]!.start).getTime()).toBe(3_600_000);
  });

  it('answers 400 for a window outside 1–31 days and 403 without audit:read', async () => {
    const ws = await freshWorkspace('*');
    const session = await login(ws.key);
    for (const days of [0, 32, -1]) {
      const res = await session.api('GET', '/insights', { query: { days } });
      expect(res.status, String(days)).toBe(400);
      expect(res.body.error.code).toBe('invalid_request');
    }
    const adminOnly = await login((await newKey(ws.slug, 'admin')).key);
    const refused = await adminOnly.api('GET', '/insights');
    expect(refused.status).toBe(403);
    expect(refused.body.error.code).toBe('insufficient_permission');
  });
});
