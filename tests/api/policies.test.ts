import type { PolicyCreate, PolicyRule } from '@warden/contract';
import { describe, expect, it } from 'vitest';
import { keyFor, useTestServer } from '../support/server.ts';

const server = useTestServer();

const blockProdDeletes: PolicyRule = {
  id: 'no-prod-deletes',
  match: { action: ['db.delete*'], environment: ['production'] },
  effect: 'block',
  severity: 'high',
  message: 'Deleting in production is not allowed',
};

const create = async (body: PolicyCreate, key?: string) => {
  const res = await server.api('POST', '/policies', { body, key });
  expect(res.status).toBe(201);
  return res.body.data;
};

describe('POST /policies (createPolicy)', () => {
  it('creates a policy from just name and enabled with documented defaults', async () => {
    const res = await server.api('POST', '/policies', { body: { name: 'Minimal', enabled: true } });
    expect(res.status).toBe(201);
    expect(res.body.data).toMatchObject({
      name: 'Minimal',
      enabled: true,
      description: null,
      mode: 'enforce',
      priority: 100,
      rules: [],
      version: 1,
    });
    expect(res.body.data.id).toMatch(/^[0-9a-f-]{36}$/);
    expect(new Date(res.body.data.created_at).toISOString()).toBe(res.body.data.created_at);
    expect(res.body.data.updated_at).toBe(res.body.data.created_at);
  });

  it('defaults enabled to true when only name is sent', async () => {
    const res = await server.api('POST', '/policies', { body: { name: 'Name only' } });
    expect(res.status).toBe(201);
    expect(res.body.data.enabled).toBe(true);
  });

  it('stores rules, mode, priority and description as sent', async () => {
    const res = await server.api('POST', '/policies', {
      body: {
        name: 'Production safety',
        enabled: false,
        description: 'No destructive actions in production',
        mode: 'monitor',
        priority: 500,
        rules: [
          blockProdDeletes,
          { match: { tool: ['stripe.refund*'] }, condition: 'input.amount > 100', effect: 'require_approval' },
          { effect: 'allow', require_execution_proxy: true },
        ],
      },
    });
    expect(res.status).toBe(201);
    expect(res.body.data).toMatchObject({
      enabled: false,
      mode: 'monitor',
      priority: 500,
      description: 'No destructive actions in production',
      version: 1,
    });
    expect(res.body.data.rules).toHaveLength(3);
    expect(res.body.data.rules[0]).toMatchObject(blockProdDeletes);
    expect(res.body.data.rules[1]).toMatchObject({
      effect: 'require_approval',
      condition: 'input.amount > 100',
      match: { tool: ['stripe.refund*'] },
    });
    expect(res.body.data.rules[2]).toMatchObject({ effect: 'allow', require_execution_proxy: true });
    const fetched = await server.api('GET', `/policies/${res.body.data.id}`);
    expect(fetched.body.data).toEqual(res.body.data);
  });

  it('answers 409 conflict for a name already used in the workspace', async () => {
    await create({ name: 'Duplicate', enabled: true });
    const res = await server.api('POST', '/policies', { body: { name: 'Duplicate', enabled: false } });
    expect(res.status).toBe(409);
    expect(res.body.error.code).toBe('conflict');
  });

  it.each([
    ['missing name', { enabled: true }],
    ['empty name', { name: '', enabled: true }],
    ['name too long', { name: 'x'.repeat(201) }],
    ['enabled not a boolean', { name: 'p', enabled: 'yes' }],
    ['unknown mode', { name: 'p', mode: 'audit' }],
    ['priority out of range', { name: 'p', priority: 10_001 }],
    ['unknown field', { name: 'p', colour: 'red' }],
    ['rules not an array', { name: 'p', rules: { effect: 'block' } }],
    ['rule without effect', { name: 'p', rules: [{ match: { action: ['x'] } }] }],
    ['unknown effect', { name: 'p', rules: [{ effect: 'deny' }] }],
    ['unknown rule field', { name: 'p', rules: [{ effect: 'block', when: 'always' }] }],
    ['unknown match field', { name: 'p', rules: [{ effect: 'block', match: { user: ['bob'] } }] }],
    ['empty glob list', { name: 'p', rules: [{ effect: 'block', match: { action: [] } }] }],
    ['empty glob', { name: 'p', rules: [{ effect: 'block', match: { action: [''] } }] }],
    ['glob list not an array', { name: 'p', rules: [{ effect: 'block', match: { action: 'db.*' } }] }],
    ['unknown severity', { name: 'p', rules: [{ effect: 'block', severity: 'apocalyptic' }] }],
  ])('answers 400 invalid_request for %s', async (_label, body) => {
    const res = await server.api('POST', '/policies', { body, unchecked: true });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('invalid_request');
    expect(typeof res.body.error.message).toBe('string');
  });

  it('answers 403 insufficient_permission for a key without policies:write', async () => {
    const readOnly = await keyFor(server, 'policies:read');
    const res = await server.api('POST', '/policies', { body: { name: 'Forbidden', enabled: true }, key: readOnly });
    expect(res.status).toBe(403);
    expect(res.body.error.code).toBe('insufficient_permission');
    const list = await server.api('GET', '/policies?limit=100');
    expect(list.body.data.find((p: { name: string }) => p.name === 'Forbidden')).toBeUndefined();
  });

  it('answers 401 unauthorized without a key', async () => {
    const res = await server.api('POST', '/policies', { body: { name: 'Anonymous', enabled: true }, key: null });
    expect(res.status).toBe(401);
    expect(res.body).toEqual({ error: { code: 'unauthorized', message: 'A valid API key is required' } });
  });
});

describe('GET /policies (listPolicies)', () => {
  it('pages with limit and cursor, newest first, without repeats', async () => {
    const key = await keyFor(server, 'policies:read,policies:write', 'policy-paging');
    for (let i = 0; i < 5; i++) await create({ name: `Pager ${i}`, enabled: true }, key);
    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const res = await server.api('GET', `/policies?limit=2${cursor ? `&cursor=${cursor}` : ''}`, { key });
      expect(res.status).toBe(200);
      expect(res.body.data.length).toBeLessThanOrEqual(2);
      seen.push(...res.body.data.map((p: { name: string }) => p.name));
      cursor = res.body.next_cursor as string | null;
      expect(res.body.has_more).toBe(cursor !== null);
      pages++;
    } while (cursor && pages < 10);
    expect(seen).toEqual(['Pager 4', 'Pager 3', 'Pager 2', 'Pager 1', 'Pager 0']);
    expect(pages).toBe(3);
  });

  it('answers an empty page for a workspace without policies', async () => {
    const key = await keyFor(server, 'policies:read', 'policy-empty');
    const res = await server.api('GET', '/policies', { key });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ data: [], has_more: false, next_cursor: null });
  });

  it('filters by enabled', async () => {
    const key = await keyFor(server, 'policies:read,policies:write', 'policy-filter');
    await create({ name: 'On A', enabled: true }, key);
    await create({ name: 'Off', enabled: false }, key);
    await create({ name: 'On B', enabled: true }, key);
    const on = await server.api('GET', '/policies?enabled=true', { key });
    expect(on.status).toBe(200);
    expect(on.body.data.map((p: { name: string }) => p.name)).toEqual(['On B', 'On A']);
    const off = await server.api('GET', '/policies?enabled=false', { key });
    expect(off.body.data.map((p: { name: string }) => p.name)).toEqual(['Off']);
    const all = await server.api('GET', '/policies', { key });
    expect(all.body.data).toHaveLength(3);
  });

  it.each([
    ['limit over 100', 'limit=101'],
    ['limit zero', 'limit=0'],
    ['enabled not a boolean', 'enabled=maybe'],
    ['unknown parameter', 'colour=red'],
    ['forged cursor', 'cursor=bm90LWEtY3Vyc29y'],
  ])('answers 400 invalid_request for %s', async (_label, query) => {
    const res = await server.api('GET', `/policies?${query}`);
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('invalid_request');
  });

  it('answers 403 insufficient_permission for a key without policies:read', async () => {
    const key = await keyFor(server, 'agents:read');
    const res = await server.api('GET', '/policies', { key });
    expect(res.status).toBe(403);
    expect(res.body.error.code).toBe('insufficient_permission');
  });

  it('answers 401 unauthorized without a key', async () => {
    const res = await server.api('GET', '/policies', { key: null });
    expect(res.status).toBe(401);
    expect(res.body.error.code).toBe('unauthorized');
  });
});

describe('GET /policies/{id} (getPolicy)', () => {
  it('gets a policy by id and by name', async () => {
    const created = await create({ name: 'lookup-me', enabled: true, rules: [blockProdDeletes] });
    const byId = await server.api('GET', `/policies/${created.id}`);
    expect(byId.status).toBe(200);
    expect(byId.body.data).toEqual(created);
    const byName = await server.api('GET', '/policies/lookup-me');
    expect(byName.status).toBe(200);
    expect(byName.body.data).toEqual(created);
  });

  it('gets a policy whose name has spaces by its URL-encoded name', async () => {
    const created = await create({ name: 'Spaced Name', enabled: true });
    const res = await server.api('GET', `/policies/${encodeURIComponent('Spaced Name')}`);
    expect(res.status).toBe(200);
    expect(res.body.data.id).toBe(created.id);
  });

  it('answers 404 not_found for an unknown id or name', async () => {
    const byId = await server.api('GET', '/policies/00000000-0000-4000-8000-000000000000');
    expect(byId.status).toBe(404);
    expect(byId.body.error.code).toBe('not_found');
    const byName = await server.api('GET', '/policies/no-such-policy');
    expect(byName.status).toBe(404);
    expect(byName.body.error.code).toBe('not_found');
  });

  it('answers 403 insufficient_permission for a key without policies:read', async () => {
    const created = await create({ name: 'Guarded read', enabled: true });
    const key = await keyFor(server, 'policies:write');
    const res = await server.api('GET', `/policies/${created.id}`, { key });
    expect(res.status).toBe(403);
    expect(res.body.error.code).toBe('insufficient_permission');
  });
});

describe('PATCH /policies/{id} (updatePolicy)', () => {
  it('updates fields and increments version on every change', async () => {
    const created = await create({ name: 'Versioned', enabled: true });
    const first = await server.api('PATCH', `/policies/${created.id}`, { body: { enabled: false } });
    expect(first.status).toBe(200);
    expect(first.body.data).toMatchObject({
      id: created.id,
      name: 'Versioned',
      enabled: false,
      version: 2,
      mode: 'enforce',
      priority: 100,
    });
    expect(Date.parse(first.body.data.updated_at)).toBeGreaterThanOrEqual(Date.parse(created.updated_at));
    expect(first.body.data.created_at).toBe(created.created_at);
    const second = await server.api('PATCH', `/policies/${created.id}`, {
      body: { mode: 'monitor', priority: 7, description: 'now monitored' },
    });
    expect(second.status).toBe(200);
    expect(second.body.data).toMatchObject({ mode: 'monitor', priority: 7, description: 'now monitored', enabled: false, version: 3 });
    const cleared = await server.api('PATCH', `/policies/${created.id}`, { body: { description: null } });
    expect(cleared.body.data).toMatchObject({ description: null, version: 4 });
    expect((await server.api('GET', `/policies/${created.id}`)).body.data).toEqual(cleared.body.data);
  });

  it('replaces the rules as a whole', async () => {
    const created = await create({ name: 'Rule swap', enabled: true, rules: [blockProdDeletes, { effect: 'allow' }] });
    const replacement: PolicyRule = { match: { action: ['email.send'] }, effect: 'require_approval', severity: 'low' };
    const res = await server.api('PATCH', `/policies/${created.id}`, { body: { rules: [replacement] } });
    expect(res.status).toBe(200);
    expect(res.body.data.rules).toHaveLength(1);
    expect(res.body.data.rules[0]).toMatchObject(replacement);
    expect(res.body.data.version).toBe(2);
    const emptied = await server.api('PATCH', `/policies/${created.id}`, { body: { rules: [] } });
    expect(emptied.body.data).toMatchObject({ rules: [], version: 3 });
  });

  it('updates a policy addressed by name, including renaming it', async () => {
    await create({ name: 'Old name', enabled: true });
    const res = await server.api('PATCH', `/policies/${encodeURIComponent('Old name')}`, { body: { name: 'New name' } });
    expect(res.status).toBe(200);
    expect(res.body.data).toMatchObject({ name: 'New name', version: 2 });
    expect((await server.api('GET', `/policies/${encodeURIComponent('Old name')}`)).status).toBe(404);
    expect((await server.api('GET', `/policies/${encodeURIComponent('New name')}`)).status).toBe(200);
  });

  it('answers 404 not_found for an unknown policy', async () => {
    const res = await server.api('PATCH', '/policies/00000000-0000-4000-8000-000000000000', { body: { enabled: false } });
    expect(res.status).toBe(404);
    expect(res.body.error.code).toBe('not_found');
    expect((await server.api('PATCH', '/policies/ghost', { body: { enabled: false } })).status).toBe(404);
  });

  it('answers 409 conflict when renaming to a taken name, and changes nothing', async () => {
    const a = await create({ name: 'Taken A', enabled: true });
    await create({ name: 'Taken B', enabled: true });
    const res = await server.api('PATCH', `/policies/${a.id}`, { body: { name: 'Taken B' } });
    expect(res.status).toBe(409);
    expect(res.body.error.code).toBe('conflict');
    expect((await server.api('GET', `/policies/${a.id}`)).body.data).toMatchObject({ name: 'Taken A', version: 1 });
  });

  it.each([
    ['an empty patch', {}],
    ['an unknown field', { colour: 'red' }],
    ['an unknown effect', { rules: [{ effect: 'deny' }] }],
    ['an unknown rule field', { rules: [{ effect: 'block', when: 'always' }] }],
    ['an empty glob list', { rules: [{ effect: 'block', match: { resource: [] } }] }],
    ['an empty name', { name: '' }],
  ])('answers 400 invalid_request for %s', async (_label, body) => {
    const created = await create({ name: `Invalid patch ${Math.random()}`, enabled: true });
    const res = await server.api('PATCH', `/policies/${created.id}`, { body, unchecked: true });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('invalid_request');
    expect((await server.api('GET', `/policies/${created.id}`)).body.data.version).toBe(1);
  });

  it('answers 403 insufficient_permission for a key without policies:write', async () => {
    const created = await create({ name: 'Guarded write', enabled: true });
    const key = await keyFor(server, 'policies:read');
    const res = await server.api('PATCH', `/policies/${created.id}`, { body: { enabled: false }, key });
    expect(res.status).toBe(403);
    expect(res.body.error.code).toBe('insufficient_permission');
    expect((await server.api('GET', `/policies/${created.id}`)).body.data).toMatchObject({ enabled: true, version: 1 });
  });
});

describe('tenant isolation of policies', () => {
  it('never shows or changes another workspace’s policy', async () => {
    const created = await create({ name: 'Private policy', enabled: true });
    const other = await keyFor(server, 'policies:read,policies:write', 'policy-intruder');
    expect((await server.api('GET', `/policies/${created.id}`, { key: other })).status).toBe(404);
    expect((await server.api('GET', `/policies/${encodeURIComponent('Private policy')}`, { key: other })).status).toBe(404);
    const patch = await server.api('PATCH', `/policies/${created.id}`, { key: other, body: { enabled: false } });
    expect(patch.status).toBe(404);
    expect(patch.body.error.code).toBe('not_found');
    const list = await server.api('GET', '/policies?limit=100', { key: other });
    expect(list.status).toBe(200);
    expect(list.body.data).toEqual([]);
    expect((await server.api('GET', `/policies/${created.id}`)).body.data).toMatchObject({ enabled: true, version: 1 });
  });

  it('lets two workspaces use the same policy name', async () => {
    await create({ name: 'Shared name', enabled: true });
    const other = await keyFor(server, 'policies:read,policies:write', 'policy-neighbour');
    const res = await server.api('POST', '/policies', { body: { name: 'Shared name', enabled: true }, key: other });
    expect(res.status).toBe(201);
  });
});
