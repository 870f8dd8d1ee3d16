/**
 * DELETE /policies/{id} (deletePolicy): 200 with the `Deleted` body (as every DELETE) and gone at
 * once for every later decision, audited
 * as a configuration change (`policy.deleted`, severity medium), 404 for an unknown policy or
 * another workspace's, 403 without `policies:write`.
 */
import type { AuditEvent, PolicyCreate } from '@warden/contract';
import { describe, expect, it } from 'vitest';
import { keyFor, useTestServer } from '../support/server.ts';

const server = useTestServer();

let workspaces = 0;
/** A workspace of its own per test, with a key holding every permission. */
async function freshWorkspace() {
  const slug = `policies-delete-${++workspaces}`;
  const workspace = await server.admin('workspaces.create', { slug });
  const created = await server.admin('keys.create', { workspace: slug, permissions: '*' });
  return { slug, id: workspace.id as string, key: created.key as string, keyId: created.id as string };
}

const createPolicy = async (key: string, body: PolicyCreate) => {
  const res = await server.api('POST', '/policies', { key, body });
  expect(res.status).toBe(201);
  return res.body.data;
};

const blockAll: PolicyCreate = { name: 'Block deploys', rules: [{ match: { action: ['deploy.*'] }, effect: 'block' }] };

describe('DELETE /policies/{id} (deletePolicy)', () => {
  it('answers 200 with the Deleted body, as DELETE /agents/{id} does; the policy is then gone from GET and from the list', async () => {
    const ws = await freshWorkspace();
    const policy = await createPolicy(ws.key, blockAll);
    const kept = await createPolicy(ws.key, { name: 'Kept' });

    const res = await server.api('DELETE', `/policies/${policy.id}`, { key: ws.key });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    expect(res.body).toEqual({ data: { id: policy.id, deleted: true } });
    const agent = await server.api('POST', '/agents', { key: ws.key, body: { name: 'Shape check', provider: 'local' } });
    const agentDeleted = await server.api('DELETE', `/agents/${agent.body.data.id}`, { key: ws.key });
    expect(Object.keys(agentDeleted.body.data).sort()).toEqual(Object.keys(res.body.data).sort());

    expect((await server.api('GET', `/policies/${policy.id}`, { key: ws.key })).status).toBe(404);
    const list = await server.api('GET', '/policies', { key: ws.key });
    expect(list.body.data.map((p) => p.id)).toEqual([kept.id]);
  });

  it('deletes by name, and the name can then be used again', async () => {
    const ws = await freshWorkspace();
    const created = await createPolicy(ws.key, blockAll);
    const byName = await server.api('DELETE', `/policies/${encodeURIComponent('Block deploys')}`, { key: ws.key });
    expect(byName.status).toBe(200);
    expect(byName.body.data).toEqual({ id: created.id, deleted: true });
    const again = await createPolicy(ws.key, blockAll);
    expect(again.version).toBe(1);
  });

  it('takes effect for the very next decision: a blocking policy deleted no longer blocks', async () => {
    const ws = await freshWorkspace();
    const agent = await server.api('POST', '/agents', { key: ws.key, body: { name: 'Deployer', provider: 'local' } });
    expect(agent.status).toBe(201);
    const policy = await createPolicy(ws.key, blockAll);
    const evaluate = () =>
      server.api('POST', '/policy/evaluate', { key: ws.key, body: { input: { action: 'deploy.prod', agent: agent.body.data.slug } } });

    const before = await evaluate();
    expect(before.status).toBe(200);
    expect(before.body.data).toMatchObject({ result: 'blocked', policy: 'Block deploys' });

    expect((await server.api('DELETE', `/policies/${policy.id}`, { key: ws.key })).status).toBe(200);
    const after = await evaluate();
    expect(after.status).toBe(200);
    expect(after.body.data.result).toBe('allowed');
    expect(after.body.data.policy).toBeNull();
  });

  it('records a policy.deleted configuration event (severity medium) naming the key that deleted it', async () => {
    const ws = await freshWorkspace();
    const policy = await createPolicy(ws.key, blockAll);
    expect((await server.api('DELETE', `/policies/${policy.id}`, { key: ws.key })).status).toBe(200);

    const logs = await server.api('GET', '/audit-logs', { key: ws.key, query: { limit: 100, action: 'policy.deleted' } });
    expect(logs.status).toBe(200);
    const events = logs.body.data.filter((event: AuditEvent) => event.resource === policy.id);
    expect(events).toHaveLength(1);
    expect(events[0]).toMatchObject({
      source: 'configuration',
      action: 'policy.deleted',
      resource: policy.id,
      user: `key:${ws.keyId}`,
      result: 'allowed',
      severity: 'medium',
      context: { name: 'Block deploys', rules: 1 },
    });
  });

  it('answers 404 not_found for an unknown id or name, and for a policy already deleted (recording nothing)', async () => {
    const ws = await freshWorkspace();
    const policy = await createPolicy(ws.key, blockAll);
    expect((await server.api('DELETE', `/policies/${policy.id}`, { key: ws.key })).status).toBe(200);

    for (const id of [policy.id, '00000000-0000-4000-8000-000000000000', 'No such policy']) {
      const res = await server.api('DELETE', `/policies/${encodeURIComponent(id)}`, { key: ws.key });
      expect(res.status).toBe(404);
      expect(res.body.error.code).toBe('not_found');
    }
    const logs = await server.api('GET', '/audit-logs', { key: ws.key, query: { limit: 100, action: 'policy.deleted' } });
    expect(logs.body.data).toHaveLength(1);
  });

  it("answers 404 for another workspace's policy, by id and by name, and leaves it in place", async () => {
    const owner = await freshWorkspace();
    const other = await freshWorkspace();
    const policy = await createPolicy(owner.key, blockAll);
    for (const id of [policy.id, encodeURIComponent(policy.name)]) {
      const res = await server.api('DELETE', `/policies/${id}`, { key: other.key });
      expect(res.status).toBe(404);
      expect(res.body.error.code).toBe('not_found');
    }
    const still = await server.api('GET', `/policies/${policy.id}`, { key: owner.key });
    expect(still.status).toBe(200);
    expect(still.body.data).toEqual(policy);
  });

  it('answers 403 insufficient_permission to a key without policies:write, and 401 without a key', async () => {
    const ws = await freshWorkspace();
    const policy = await createPolicy(ws.key, blockAll);
    const reader = await keyFor(server, 'policies:read', ws.slug);

    const forbidden = await server.api('DELETE', `/policies/${policy.id}`, { key: reader });
    expect(forbidden.status).toBe(403);
    expect(forbidden.body.error.code).toBe('insufficient_permission');
    const anonymous = await server.api('DELETE', `/policies/${policy.id}`, { key: null });
    expect(anonymous.status).toBe(401);
    expect(anonymous.body.error.code).toBe('unauthorized');

    expect((await server.api('GET', `/policies/${policy.id}`, { key: ws.key })).status).toBe(200);
  });
});
