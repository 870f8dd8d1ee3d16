/** POST /approvals (createApproval) and POST /approval/request (createApprovalRequest): created, and each refusal. */
import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { keyFor, useTestServer } from '../support/server.ts';
import { APPROVAL_FIELDS, approvalHelpers, ISO, UUID } from './support/approvals.ts';

const server = useTestServer();
const { freshWorkspace, createAgent, createPolicy, createApproval, decide, listAll } = approvalHelpers(server);

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
    const res = await server.api('POST', '/approvals', { body, unchecked: true });
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
    const invalid = await server.api('POST', '/approval/request', { key, body: { colour: 'red' }, unchecked: true });
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
