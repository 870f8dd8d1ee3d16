import { readFileSync } from 'node:fs';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ApiResponse, keyFor, startTestServer, type TestServer } from '../support/server.ts';

/** An item of a response body, as parsed from JSON. */
type Item = ApiResponse['body'];

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer();
});
afterAll(async () => {
  await server?.close();
});

const spec = JSON.parse(readFileSync(new URL('../../spec/dist/openapi.json', import.meta.url), 'utf8'));
const PERMISSIONS: string[] = spec.components.schemas.Permission.enum;
const ALL = PERMISSIONS.join(',');
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
const APPROVAL_FIELDS = [
  'environment',
  'tool',
  'execution',
  'input_digest',
  'rule',
  'policy_version',
  'id',
  'title',
  'description',
  'priority',
  'type',
  'status',
  'agent',
  'policy',
  'action',
  'resource',
  'context',
  'decision_note',
  'decided_by',
  'decided_at',
  'expires_at',
  'consumed_at',
  'created_at',
  'updated_at',
];

let workspaces = 0;
const freshWorkspace = async (name = `approvals-${++workspaces}`) => {
  const key = await keyFor(server, ALL, name);
  return { key, name };
};

const createAgent = async (key: string, body: Record<string, unknown>) => {
  const res = await server.api('POST', '/agents', { key, body: { provider: 'local', ...body } });
  expect(res.status).toBe(201);
  return res.body.data;
};

const createPolicy = async (key: string, body: Record<string, unknown>) => {
  const res = await server.api('POST', '/policies', { key, body });
  expect(res.status).toBe(201);
  return res.body.data;
};

const createApproval = async (key: string, body: Record<string, unknown>, path = '/approvals') => {
  const res = await server.api('POST', path, { key, body });
  expect(res.status).toBe(201);
  return res.body.data;
};

const decide = (key: string, id: string, body: Record<string, unknown>) => server.api('PATCH', `/approvals/${id}`, { key, body });

const evaluate = (key: string, body: unknown) => server.api('POST', '/policy/evaluate', { key, body });

/** A workspace whose policy asks for approval before `refund.create` by any agent. */
async function approvalWorkspace() {
  const ws = await freshWorkspace();
  await createAgent(ws.key, { name: 'Billing bot', slug: 'billing-bot' });
  await createAgent(ws.key, { name: 'Other bot', slug: 'other-bot' });
  await createPolicy(ws.key, {
    name: 'Refunds need approval',
    rules: [{ match: { action: ['refund.*'] }, effect: 'require_approval', severity: 'high', message: 'A human approves refunds' }],
  });
  return ws;
}

const refund = { action: 'refund.create', resource: 'orders/1234', agent: 'billing-bot' };

async function listAll(key: string, path: string): Promise<Item[]> {
  const items: Item[] = [];
  let cursor: string | null = null;
  for (let page = 0; page < 50; page++) {
    const sep = path.includes('?') ? '&' : '?';
    const res = await server.api('GET', `${path}${sep}limit=100${cursor ? `&cursor=${cursor}` : ''}`, { key });
    expect(res.status).toBe(200);
    items.push(...res.body.data);
    cursor = res.body.next_cursor;
    if (!cursor) break;
  }
  return items;
}

describe('POST /policy/evaluate (evaluatePolicy) with approvals', () => {
  it('creates a pending approval for a require_approval decision and returns its id', async () => {
    const { key } = await approvalWorkspace();
    const res = await evaluate(key, { input: refund });
    expect(res.status).toBe(200);
    expect(res.body.data).toMatchObject({
      allowed: false,
      action: 'require_approval',
      matched: true,
      policy: 'Refunds need approval',
      result: 'approval_required',
      severity: 'high',
    });
    expect(res.body.data.approval_id).toMatch(UUID);

    const approval = await server.api('GET', `/approvals/${res.body.data.approval_id}`, { key });
    expect(approval.status).toBe(200);
    expect(approval.body.data).toMatchObject({
      id: res.body.data.approval_id,
      status: 'pending',
      type: 'policy',
      agent: 'billing-bot',
      policy: 'Refunds need approval',
      action: 'refund.create',
      resource: 'orders/1234',
      decided_by: null,
      decided_at: null,
      consumed_at: null,
    });
  });

  it('answers the same pending approval while it is pending, without creating another', async () => {
    const { key } = await approvalWorkspace();
    const id = (await evaluate(key, { input: refund })).body.data.approval_id;
    const again = await evaluate(key, { input: refund, approval_id: id });
    expect(again.status).toBe(200);
    expect(again.body.data).toMatchObject({ allowed: false, result: 'approval_required', approval_id: id });
    const all = await listAll(key, '/approvals');
    expect(all.map((a) => a.id)).toEqual([id]);
  });

  it('allows once after approval, then refuses a second use with 400 approval_invalid', async () => {
    const { key } = await approvalWorkspace();
    const id = (await evaluate(key, { input: refund })).body.data.approval_id;
    expect((await decide(key, id, { status: 'approved' })).status).toBe(200);

    const first = await evaluate(key, { input: refund, approval_id: id });
    expect(first.status).toBe(200);
    expect(first.body.data).toMatchObject({ allowed: true, result: 'allowed', approval_id: id });
    const used = (await server.api('GET', `/approvals/${id}`, { key })).body.data;
    expect(used.consumed_at).toMatch(ISO);

    const second = await evaluate(key, { input: refund, approval_id: id });
    expect(second.status).toBe(400);
    expect(second.body.error.code).toBe('approval_invalid');
    // Without the approval the action still needs one: a new approval is asked for.
    const fresh = await evaluate(key, { input: refund });
    expect(fresh.body.data.result).toBe('approval_required');
    expect(fresh.body.data.approval_id).not.toBe(id);
  });

  it('refuses an approval used for another action, resource or agent with 400 approval_invalid', async () => {
    const { key } = await approvalWorkspace();
    const id = (await evaluate(key, { input: refund })).body.data.approval_id;
    expect((await decide(key, id, { status: 'approved' })).status).toBe(200);
    for (const input of [
      { ...refund, action: 'refund.cancel' },
      { ...refund, resource: 'orders/9999' },
      { action: refund.action, agent: refund.agent },
      { ...refund, agent: 'other-bot' },
    ]) {
      const res = await evaluate(key, { input, approval_id: id });
      expect(res.status, JSON.stringify(input)).toBe(400);
      expect(res.body.error.code).toBe('approval_invalid');
    }
    // The refused attempts did not use it up.
    const right = await evaluate(key, { input: refund, approval_id: id });
    expect(right.body.data).toMatchObject({ allowed: true, result: 'allowed' });
  });

  it('blocks an evaluation carrying a rejected approval', async () => {
    const { key } = await approvalWorkspace();
    const id = (await evaluate(key, { input: refund })).body.data.approval_id;
    expect((await decide(key, id, { status: 'rejected', decision_note: 'Too much' })).status).toBe(200);
    const res = await evaluate(key, { input: refund, approval_id: id });
    expect(res.status).toBe(200);
    expect(res.body.data).toMatchObject({ allowed: false, result: 'blocked' });
  });

  it('still blocks by a blocking rule whatever the approval', async () => {
    const { key } = await approvalWorkspace();
    const id = (await evaluate(key, { input: refund })).body.data.approval_id;
    expect((await decide(key, id, { status: 'approved' })).status).toBe(200);
    await createPolicy(key, { name: 'Refund freeze', rules: [{ match: { action: ['refund.create'] }, effect: 'block' }] });
    const res = await evaluate(key, { input: refund, approval_id: id });
    expect(res.status).toBe(200);
    expect(res.body.data).toMatchObject({ allowed: false, result: 'blocked', policy: 'Refund freeze' });
  });

  it('allows exactly one of several concurrent evaluations carrying the same approved approval', async () => {
    const { key } = await approvalWorkspace();
    const id = (await evaluate(key, { input: refund })).body.data.approval_id;
    expect((await decide(key, id, { status: 'approved' })).status).toBe(200);
    const results = await Promise.all(Array.from({ length: 6 }, () => evaluate(key, { input: refund, approval_id: id })));
    const allowed = results.filter((r) => r.status === 200 && r.body.data.allowed === true);
    expect(allowed).toHaveLength(1);
    for (const r of results.filter((x) => !allowed.includes(x))) {
      expect(r.status).toBe(400);
      expect(r.body.error.code).toBe('approval_invalid');
    }
  });

  it('allows with an approved approval created through POST /approvals that pins the same input', async () => {
    const { key } = await approvalWorkspace();
    const manual = await createApproval(key, { title: 'Pre-approved refund', input: refund });
    expect(manual).toMatchObject({ agent: 'billing-bot', action: refund.action, resource: refund.resource });
    expect(manual.input_digest).toMatch(/^[0-9a-f]{64}$/);
    expect((await decide(key, manual.id, { status: 'approved' })).status).toBe(200);
    const res = await evaluate(key, { input: refund, approval_id: manual.id });
    expect(res.status).toBe(200);
    expect(res.body.data).toMatchObject({ allowed: true, result: 'allowed', approval_id: manual.id });
  });

  it('refuses an approved POST /approvals approval that pins no input with 400 approval_invalid (it authorises no runtime decision)', async () => {
    const { key } = await approvalWorkspace();
    const manual = await createApproval(key, { title: 'Harmless', agent: 'billing-bot', action: refund.action, resource: refund.resource });
    expect(manual.input_digest).toBeNull();
    expect((await decide(key, manual.id, { status: 'approved' })).status).toBe(200);
    const res = await evaluate(key, { input: refund, approval_id: manual.id });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('approval_invalid');
  });

  it('refuses an approved approval once it has expired with 400 approval_invalid', async () => {
    const { key } = await approvalWorkspace();
    const id = (await evaluate(key, { input: refund })).body.data.approval_id;
    expect((await decide(key, id, { status: 'approved' })).status).toBe(200);
    await sql`UPDATE approvals SET expires_at = now() - interval '1 second' WHERE id = ${id}`.execute(server.database.db);
    const res = await evaluate(key, { input: refund, approval_id: id });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('approval_invalid');
  });

  it("answers 400 approval_invalid for an unknown approval or another workspace's", async () => {
    const { key } = await approvalWorkspace();
    const unknown = await evaluate(key, { input: refund, approval_id: '00000000-0000-4000-8000-000000000000' });
    expect(unknown.status).toBe(400);
    expect(unknown.body.error.code).toBe('approval_invalid');

    const other = await approvalWorkspace();
    const foreign = (await evaluate(other.key, { input: refund })).body.data.approval_id;
    expect((await decide(other.key, foreign, { status: 'approved' })).status).toBe(200);
    const res = await evaluate(key, { input: refund, approval_id: foreign });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('approval_invalid');
    expect((await server.api('GET', `/approvals/${foreign}`, { key: other.key })).body.data.consumed_at).toBeNull();
  });
});

describe('POST /approvals (createApproval)', () => {
  it('creates a pending approval with the documented defaults', async () => {
    const { key } = await freshWorkspace();
    await createAgent(key, { name: 'Billing bot', slug: 'billing-bot' });
    const before = Date.now();
    const res = await server.api('POST', '/approvals', {
      key,
      body: { title: 'Refund 250 EUR', agent: 'Billing bot', context: { order: '1234', amount_eur: 250 } },
    });
    expect(res.status).toBe(201);
    const data = res.body.data;
    expect(Object.keys(data).sort()).toEqual([...APPROVAL_FIELDS].sort());
    expect(data).toMatchObject({
      title: 'Refund 250 EUR',
      description: null,
      priority: 'normal',
      type: 'manual',
      status: 'pending',
      agent: 'billing-bot',
      policy: null,
      context: { order: '1234', amount_eur: 250 },
      decision_note: null,
      decided_by: null,
      decided_at: null,
      consumed_at: null,
    });
    expect(data.id).toMatch(UUID);
    expect(data.created_at).toMatch(ISO);
    const ttl = Date.parse(data.expires_at) - before;
    expect(ttl).toBeGreaterThan(86_400_000 - 10_000);
    expect(ttl).toBeLessThan(86_400_000 + 10_000);
  });

  it('accepts every field of the reference and a policy by name', async () => {
    const { key } = await freshWorkspace();
    await createAgent(key, { name: 'Deployer', slug: 'deployer' });
    await createPolicy(key, { name: 'Deploys', rules: [] });
    const data = await createApproval(key, {
      title: 'Deploy v2',
      description: 'Friday deploy',
      priority: 'urgent',
      type: 'deployment',
      agent: 'deployer',
      policy: 'Deploys',
      action: 'deploy.run',
      resource: 'services/api',
      context: { version: '2.0.0' },
    });
    expect(data).toMatchObject({
      title: 'Deploy v2',
      description: 'Friday deploy',
      priority: 'urgent',
      type: 'deployment',
      agent: 'deployer',
      policy: 'Deploys',
      action: 'deploy.run',
      resource: 'services/api',
      context: { version: '2.0.0' },
      status: 'pending',
    });
  });

  it('sets expires_at expires_in_seconds ahead', async () => {
    const { key } = await freshWorkspace();
    const before = Date.now();
    const data = await createApproval(key, { title: 'Quick', expires_in_seconds: 60 });
    const ttl = Date.parse(data.expires_at) - before;
    expect(ttl).toBeGreaterThan(55_000);
    expect(ttl).toBeLessThan(65_000);
  });

  it('reports a pending approval past its expiry as expired, which can no longer be decided', async () => {
    const { key } = await freshWorkspace();
    const created = await createApproval(key, { title: 'Slow', expires_in_seconds: 60 });
    // Stands in for waiting a minute: move the expiry into the past.
    await sql`UPDATE approvals SET expires_at = now() - interval '1 second' WHERE id = ${created.id}`.execute(server.database.db);
    expect((await server.api('GET', `/approvals/${created.id}`, { key })).body.data.status).toBe('expired');
    expect((await listAll(key, '/approvals?status=expired')).map((a) => a.id)).toEqual([created.id]);
    expect(await listAll(key, '/approvals?status=pending')).toEqual([]);
    const res = await decide(key, created.id, { status: 'approved' });
    expect(res.status).toBe(409);
    expect(res.body.error.code).toBe('approval_already_decided');
  });

  it('answers 403 agent_not_found for an agent the workspace does not have', async () => {
    const { key } = await freshWorkspace();
    const res = await server.api('POST', '/approvals', { key, body: { title: 'x', agent: 'ghost' } });
    expect(res.status).toBe(403);
    expect(res.body.error.code).toBe('agent_not_found');
  });

  it('answers 404 not_found for a policy the workspace does not have', async () => {
    const { key } = await freshWorkspace();
    const res = await server.api('POST', '/approvals', { key, body: { title: 'x', policy: 'No such policy' } });
    expect(res.status).toBe(404);
    expect(res.body.error.code).toBe('not_found');
  });

  it.each([
    ['missing title', { description: 'x' }],
    ['empty title', { title: '' }],
    ['unknown field', { title: 'x', colour: 'red' }],
    ['unknown priority', { title: 'x', priority: 'whenever' }],
    ['unknown type', { title: 'x', type: 'coffee' }],
    ['expiry under 60 seconds', { title: 'x', expires_in_seconds: 59 }],
    ['expiry over 30 days', { title: 'x', expires_in_seconds: 2_592_001 }],
    ['status given', { title: 'x', status: 'approved' }],
  ])('answers 400 invalid_request for %s', async (_label, body) => {
    const res = await server.api('POST', '/approvals', { body });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('invalid_request');
  });

  it('answers 403 insufficient_permission for a key without approvals:write', async () => {
    const key = await keyFor(server, 'approvals:read,approvals:decide');
    const res = await server.api('POST', '/approvals', { key, body: { title: 'x' } });
    expect(res.status).toBe(403);
    expect(res.body.error.code).toBe('insufficient_permission');
  });

  it('answers 401 unauthorized without a key', async () => {
    const res = await server.api('POST', '/approvals', { key: null, body: { title: 'x' } });
    expect(res.status).toBe(401);
    expect(res.body.error.code).toBe('unauthorized');
  });
});

describe('POST /approval/request (createApprovalRequest)', () => {
  it('creates an approval like POST /approvals', async () => {
    const { key } = await freshWorkspace();
    await createAgent(key, { name: 'Alias bot', slug: 'alias-bot' });
    const data = await createApproval(
      key,
      { title: 'Via alias', agent: 'alias-bot', priority: 'high', type: 'payment' },
      '/approval/request',
    );
    expect(data).toMatchObject({ title: 'Via alias', agent: 'alias-bot', priority: 'high', type: 'payment', status: 'pending' });
    const got = await server.api('GET', `/approvals/${data.id}`, { key });
    expect(got.body.data).toEqual(data);
  });

  it('answers 403 agent_not_found, 404 not_found and 400 invalid_request like POST /approvals', async () => {
    const { key } = await freshWorkspace();
    const agent = await server.api('POST', '/approval/request', { key, body: { title: 'x', agent: 'ghost' } });
    expect(agent.status).toBe(403);
    expect(agent.body.error.code).toBe('agent_not_found');
    const policy = await server.api('POST', '/approval/request', { key, body: { title: 'x', policy: 'ghost' } });
    expect(policy.status).toBe(404);
    expect(policy.body.error.code).toBe('not_found');
    const invalid = await server.api('POST', '/approval/request', { key, body: { colour: 'red' } });
    expect(invalid.status).toBe(400);
    expect(invalid.body.error.code).toBe('invalid_request');
  });

  it('answers 403 insufficient_permission for a key without approvals:write', async () => {
    const key = await keyFor(server, 'approvals:read');
    const res = await server.api('POST', '/approval/request', { key, body: { title: 'x' } });
    expect(res.status).toBe(403);
    expect(res.body.error.code).toBe('insufficient_permission');
  });
});

describe('GET /approvals (listApprovals)', () => {
  it('filters by status and agent and pages with a cursor, newest first, without repeats', async () => {
    const { key } = await freshWorkspace();
    await createAgent(key, { name: 'Ann', slug: 'ann' });
    await createAgent(key, { name: 'Bob', slug: 'bob' });
    const made: Item[] = [];
    for (let i = 0; i < 5; i++) made.push(await createApproval(key, { title: `A${i}`, agent: i % 2 === 0 ? 'ann' : 'bob' }));
    expect((await decide(key, made[0].id, { status: 'approved' })).status).toBe(200);
    expect((await decide(key, made[1].id, { status: 'rejected', decision_note: 'no' })).status).toBe(200);

    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const res = await server.api('GET', `/approvals?limit=2${cursor ? `&cursor=${cursor}` : ''}`, { key });
      expect(res.status).toBe(200);
      expect(res.body.data.length).toBeLessThanOrEqual(2);
      seen.push(...res.body.data.map((a: { title: string }) => a.title));
      cursor = res.body.next_cursor;
      expect(res.body.has_more).toBe(cursor !== null);
      pages++;
    } while (cursor && pages < 10);
    expect(seen).toEqual(['A4', 'A3', 'A2', 'A1', 'A0']);
    expect(pages).toBe(3);

    const titles = async (query: string) => (await listAll(key, `/approvals?${query}`)).map((a) => a.title);
    expect(await titles('status=pending')).toEqual(['A4', 'A3', 'A2']);
    expect(await titles('status=approved')).toEqual(['A0']);
    expect(await titles('status=rejected')).toEqual(['A1']);
    expect(await titles('status=expired')).toEqual([]);
    expect(await titles('agent=ann')).toEqual(['A4', 'A2', 'A0']);
    expect(await titles('agent=bob&status=pending')).toEqual(['A3']);

    const page = await server.api('GET', '/approvals?agent=ann&limit=1', { key });
    expect(page.body.data.map((a: { title: string }) => a.title)).toEqual(['A4']);
    const next = await server.api('GET', `/approvals?agent=ann&limit=1&cursor=${page.body.next_cursor}`, { key });
    expect(next.body.data.map((a: { title: string }) => a.title)).toEqual(['A2']);
  });

  it('pages without skipping or repeating approvals created at the same moment', async () => {
    const { key } = await freshWorkspace();
    const created = await Promise.all(Array.from({ length: 50 }, (_, i) => createApproval(key, { title: `Burst ${i}` })));
    const seen: string[] = [];
    let cursor: string | null = null;
    for (let page = 0; page < 60; page++) {
      const res = await server.api('GET', `/approvals?limit=1${cursor ? `&cursor=${cursor}` : ''}`, { key });
      seen.push(...res.body.data.map((a: { id: string }) => a.id));
      cursor = res.body.next_cursor;
      if (!cursor) break;
    }
    expect(new Set(seen).size).toBe(seen.length);
    expect([...seen].sort()).toEqual(created.map((a) => a.id).sort());
  });

  it.each([
    ['unknown status', 'status=maybe'],
    ['limit over 100', 'limit=101'],
    ['limit overflowing to infinity, with a filter', 'status=expired&limit=1e999'],
    ['forged cursor', 'cursor=bm90LWEtY3Vyc29y'],
    ['unknown parameter', 'colour=red'],
  ])('answers 400 invalid_request for %s', async (_label, query) => {
    const res = await server.api('GET', `/approvals?${query}`);
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('invalid_request');
  });

  it('answers 403 insufficient_permission for a key without approvals:read', async () => {
    const key = await keyFor(server, PERMISSIONS.filter((p) => p !== 'approvals:read').join(','));
    const res = await server.api('GET', '/approvals', { key });
    expect(res.status).toBe(403);
    expect(res.body.error.code).toBe('insufficient_permission');
  });
});

describe('GET /approval/request (listApprovalRequests)', () => {
  it('lists and filters exactly like GET /approvals', async () => {
    const { key } = await freshWorkspace();
    await createAgent(key, { name: 'Cat', slug: 'cat' });
    const a = await createApproval(key, { title: 'One', agent: 'cat' });
    await createApproval(key, { title: 'Two' });
    expect((await decide(key, a.id, { status: 'approved' })).status).toBe(200);
    for (const query of ['', '?status=approved', '?agent=cat', '?limit=1']) {
      const alias = await server.api('GET', `/approval/request${query}`, { key });
      const main = await server.api('GET', `/approvals${query}`, { key });
      expect(alias.status).toBe(200);
      expect(alias.body).toEqual(main.body);
    }
    expect((await server.api('GET', '/approval/request?status=approved', { key })).body.data.map((x: { id: string }) => x.id)).toEqual([
      a.id,
    ]);
  });
});

describe('GET /approvals/{id} (getApproval)', () => {
  it('gets an approval by id', async () => {
    const { key } = await freshWorkspace();
    const created = await createApproval(key, { title: 'Getter' });
    const res = await server.api('GET', `/approvals/${created.id}`, { key });
    expect(res.status).toBe(200);
    expect(res.body.data).toEqual(created);
  });

  it('answers 404 not_found for an unknown id and 400 invalid_request for a non-UUID', async () => {
    const missing = await server.api('GET', '/approvals/00000000-0000-4000-8000-000000000000');
    expect(missing.status).toBe(404);
    expect(missing.body.error.code).toBe('not_found');
    const bad = await server.api('GET', '/approvals/not-a-uuid');
    expect(bad.status).toBe(400);
    expect(bad.body.error.code).toBe('invalid_request');
  });
});

describe('PATCH /approvals/{id} (decideApproval)', () => {
  it('approves, recording who decided and when', async () => {
    const ws = await freshWorkspace();
    const decider = (
      await server.admin('keys.create', { workspace: ws.name, permissions: 'approvals:read,approvals:decide', name: 'alice' })
    ).key;
    const created = await createApproval(ws.key, { title: 'Approve me' });
    const before = Date.now();
    const res = await decide(decider, created.id, { status: 'approved', decision_note: 'fine' });
    expect(res.status).toBe(200);
    expect(res.body.data).toMatchObject({
      id: created.id,
      status: 'approved',
      decided_by: 'alice',
      decision_note: 'fine',
      consumed_at: null,
    });
    expect(res.body.data.decided_at).toMatch(ISO);
    expect(Math.abs(Date.parse(res.body.data.decided_at) - before)).toBeLessThan(10_000);
    expect((await server.api('GET', `/approvals/${created.id}`, { key: ws.key })).body.data).toEqual(res.body.data);
  });

  it('rejects with a decision_note', async () => {
    const { key } = await freshWorkspace();
    const created = await createApproval(key, { title: 'Reject me' });
    const res = await decide(key, created.id, { status: 'rejected', decision_note: 'Amount above the refund limit' });
    expect(res.status).toBe(200);
    expect(res.body.data).toMatchObject({ status: 'rejected', decision_note: 'Amount above the refund limit' });
    expect(res.body.data.decided_at).toMatch(ISO);
    expect(typeof res.body.data.decided_by).toBe('string');
  });

  it.each([
    ['without decision_note', { status: 'rejected' }],
    ['with a blank decision_note', { status: 'rejected', decision_note: '   ' }],
  ])('answers 400 decision_note_required for a rejection %s, leaving it pending', async (_label, body) => {
    const { key } = await freshWorkspace();
    const created = await createApproval(key, { title: 'Keep pending' });
    const res = await decide(key, created.id, body);
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('decision_note_required');
    expect((await server.api('GET', `/approvals/${created.id}`, { key })).body.data.status).toBe('pending');
  });

  it('answers 409 approval_already_decided for a second decision, keeping the first', async () => {
    const { key } = await freshWorkspace();
    const created = await createApproval(key, { title: 'Once' });
    expect((await decide(key, created.id, { status: 'approved' })).status).toBe(200);
    for (const body of [{ status: 'approved' }, { status: 'rejected', decision_note: 'changed my mind' }]) {
      const res = await decide(key, created.id, body);
      expect(res.status).toBe(409);
      expect(res.body.error.code).toBe('approval_already_decided');
    }
    expect((await server.api('GET', `/approvals/${created.id}`, { key })).body.data.status).toBe('approved');
  });

  it('lets exactly one of two concurrent decisions win, the other answering 409', async () => {
    const { key } = await freshWorkspace();
    const created = await createApproval(key, { title: 'Race' });
    const [a, b] = await Promise.all([
      decide(key, created.id, { status: 'approved' }),
      decide(key, created.id, { status: 'rejected', decision_note: 'no' }),
    ]);
    expect([a.status, b.status].sort()).toEqual([200, 409]);
    const winner = a.status === 200 ? a : b;
    expect((await server.api('GET', `/approvals/${created.id}`, { key })).body.data.status).toBe(winner.body.data.status);
  });

  it('answers 403 insufficient_permission for a key with every permission but approvals:decide', async () => {
    const ws = await freshWorkspace();
    const created = await createApproval(ws.key, { title: 'Not yours' });
    const key = await keyFor(server, PERMISSIONS.filter((p) => p !== 'approvals:decide').join(','), ws.name);
    const res = await decide(key, created.id, { status: 'approved' });
    expect(res.status).toBe(403);
    expect(res.body.error.code).toBe('insufficient_permission');
    expect((await server.api('GET', `/approvals/${created.id}`, { key: ws.key })).body.data.status).toBe('pending');
  });

  it('answers 404 not_found for an unknown id and 400 invalid_request for a non-UUID', async () => {
    const missing = await decide(server.key, '00000000-0000-4000-8000-000000000000', { status: 'approved' });
    expect(missing.status).toBe(404);
    expect(missing.body.error.code).toBe('not_found');
    const bad = await decide(server.key, 'not-a-uuid', { status: 'approved' });
    expect(bad.status).toBe(400);
    expect(bad.body.error.code).toBe('invalid_request');
  });

  it.each([
    ['missing status', { decision_note: 'x' }],
    ['status pending', { status: 'pending' }],
    ['status expired', { status: 'expired' }],
    ['unknown field', { status: 'approved', colour: 'red' }],
  ])('answers 400 invalid_request for %s', async (_label, body) => {
    const { key } = await freshWorkspace();
    const created = await createApproval(key, { title: 'Bad decision' });
    const res = await decide(key, created.id, body);
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('invalid_request');
  });

  it('answers 401 unauthorized without a key', async () => {
    const res = await server.api('PATCH', '/approvals/00000000-0000-4000-8000-000000000000', { key: null, body: { status: 'approved' } });
    expect(res.status).toBe(401);
    expect(res.body.error.code).toBe('unauthorized');
  });
});

describe('approvals tenant isolation', () => {
  it("never shows or decides another workspace's approval", async () => {
    const owner = await freshWorkspace();
    const created = await createApproval(owner.key, { title: 'Private approval' });
    const intruder = await freshWorkspace();
    expect((await server.api('GET', `/approvals/${created.id}`, { key: intruder.key })).status).toBe(404);
    const decided = await decide(intruder.key, created.id, { status: 'approved' });
    expect(decided.status).toBe(404);
    expect(decided.body.error.code).toBe('not_found');
    for (const path of ['/approvals', '/approval/request', '/approvals?status=pending']) {
      expect((await listAll(intruder.key, path)).find((a) => a.id === created.id)).toBeUndefined();
    }
    expect((await server.api('GET', `/approvals/${created.id}`, { key: owner.key })).body.data.status).toBe('pending');
  });
});
