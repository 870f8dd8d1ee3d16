/**
 * The dashboard API's agents (suspend and reactivate: PATCH /agents/{id}) and MCP servers
 * (/mcp-servers: list, register, change, delete, with the egress guard's refusal on save), each
 * through the v1 services with the session as actor; and what a session may not do (without
 * the permission, or on another workspace's objects). Shared helpers: ./support/dashboard.ts.
 */
import { describe, expect, it } from 'vitest';
import { useTestServer } from '../support/server.ts';
import { dashboardHelpers, UUID } from './support/dashboard.ts';

const server = useTestServer({ egressAllowlist: ['127.0.0.1/32'] });
const { login, freshWorkspace, newKey } = dashboardHelpers(server);

async function configurationEvents(key: string, action: string, resource: string) {
  const page = await server.api('GET', '/audit-logs', { key, query: { action, limit: 100 } });
  expect(page.status).toBe(200);
  return page.body.data.filter((e) => e.resource === resource && e.source === 'configuration');
}

const createAgent = async (key: string, slug: string) => {
  const res = await server.api('POST', '/agents', { key, body: { name: slug, slug, provider: 'local' } });
  expect(res.status).toBe(201);
  return res.body.data;
};

const evaluate = (key: string, agent: string) =>
  server.api('POST', '/policy/evaluate', { key, body: { input: { action: 'report.read', agent } } });

describe('suspending and reactivating an agent (PATCH /agents/{id})', () => {
  it('a suspended agent is refused at runtime (403 agent_inactive) until it is reactivated; both are audited', async () => {
    const ws = await freshWorkspace('*');
    const session = await login(ws.key);
    const agent = await createAgent(ws.key, 'payer');
    expect((await evaluate(ws.key, 'payer')).status).toBe(200);

    const suspended = await session.api('PATCH', `/agents/${agent.id}`, { body: { status: 'suspended' } });
    expect(suspended.status).toBe(200);
    expect(suspended.body.data).toMatchObject({ id: agent.id, status: 'suspended', slug: 'payer' });
    const refused = await evaluate(ws.key, 'payer');
    expect(refused.status).toBe(403);
    expect(refused.body.error.code).toBe('agent_inactive');
    expect((await session.api('GET', '/agents', { query: { status: 'suspended' } })).body.data.map((a) => a.id)).toEqual([agent.id]);

    const reactivated = await session.api('PATCH', `/agents/${agent.id}`, { body: { status: 'active' } });
    expect(reactivated.body.data.status).toBe('active');
    expect((await evaluate(ws.key, 'payer')).status).toBe(200);

    const events = await configurationEvents(ws.key, 'agent.updated', agent.id);
    expect(events).toHaveLength(2);
    for (const event of events) {
      expect(event).toMatchObject({
        user: expect.stringMatching(/^dashboard:[0-9a-f-]{36}$/),
        context: { slug: 'payer', fields: ['status'] },
      });
    }
  });

  it('answers 400 for anything but a status, 403 without agents:write, 404 for another workspace’s agent', async () => {
    const ws = await freshWorkspace('*');
    const agent = await createAgent(ws.key, 'sleeper');
    const session = await login(ws.key);
    for (const body of [{ status: 'asleep' }, { status: 'suspended', name: 'renamed' }, {}]) {
      const res = await session.api('PATCH', `/agents/${agent.id}`, { body, unchecked: true });
      expect(res.status, JSON.stringify(body)).toBe(400);
    }

    const reader = await login((await newKey(ws.slug, 'admin,agents:read')).key);
    const refused = await reader.api('PATCH', `/agents/${agent.id}`, { body: { status: 'suspended' } });
    expect(refused.status).toBe(403);
    expect(refused.body.error.code).toBe('insufficient_permission');

    const other = await freshWorkspace('*');
    const outsider = await login(other.key);
    const foreign = await outsider.api('PATCH', `/agents/${agent.id}`, { body: { status: 'suspended' } });
    expect(foreign.status).toBe(404);
    expect(foreign.body.error.code).toBe('not_found');
    expect((await server.api('GET', `/agents/${agent.id}`, { key: ws.key })).body.data.status).toBe('active');
  });
});

describe('MCP servers (/mcp-servers)', () => {
  it('registers, lists, changes and deletes a server, each audited with the session as actor', async () => {
    const ws = await freshWorkspace('*');
    const session = await login(ws.key);
    const created = await session.api('POST', '/mcp-servers', {
      body: { name: 'GitHub', slug: 'github', transport_url: 'https://mcp.example.com/mcp', description: 'Issues' },
    });
    expect(created.status).toBe(201);
    const server1 = created.body.data;
    expect(server1).toMatchObject({ name: 'GitHub', slug: 'github', transport: 'auto', enabled: true, description: 'Issues' });
    expect(server1.id).toMatch(UUID);
    const local = await session.api('POST', '/mcp-servers', { body: { name: 'Local tools', transport_url: 'http://127.0.0.1:9/mcp' } });
    expect(local.status).toBe(201);
    expect(local.body.data.slug).toBe('local-tools');

    const list = await session.api('GET', '/mcp-servers');
    expect(list.body.data.map((s) => s.slug)).toEqual(['local-tools', 'github']);
    expect((await server.api('GET', `/mcp-servers/${server1.id}`, { key: ws.key })).body.data).toEqual(server1);

    const changed = await session.api('PATCH', `/mcp-servers/${server1.id}`, {
      body: { enabled: false, transport_url: 'https://mcp2.example.com/mcp', description: null },
    });
    expect(changed.status).toBe(200);
    expect(changed.body.data).toMatchObject({ enabled: false, transport_url: 'https://mcp2.example.com/mcp', description: null });

    const deleted = await session.api('DELETE', `/mcp-servers/${server1.id}`);
    expect(deleted.body).toEqual({ data: { id: server1.id, deleted: true } });
    expect((await server.api('GET', `/mcp-servers/${server1.id}`, { key: ws.key })).status).toBe(404);

    for (const [action, severity] of [
      ['mcp_server.created', 'info'],
      ['mcp_server.updated', 'info'],
      ['mcp_server.deleted', 'medium'],
    ] as const) {
      const [event] = await configurationEvents(ws.key, action, server1.id);
      expect(event, action).toMatchObject({ severity, user: expect.stringMatching(/^dashboard:/) });
      expect(JSON.stringify(event)).not.toContain('mcp.example.com');
    }
  });

  it('refuses, in words naming transport_url, what the egress guard refuses; nothing is saved', async () => {
    const ws = await freshWorkspace('*');
    const session = await login(ws.key);
    for (const url of [
      'http://10.1.2.3/mcp',
      'http://169.254.169.254/latest',
      'http://[::1]:8080/mcp',
      'https://user:pw@mcp.example.com/mcp',
    ]) {
      const res = await session.api('POST', '/mcp-servers', { body: { name: 'Inside', transport_url: url } });
      expect(res.status, url).toBe(400);
      expect(res.body.error.code).toBe('invalid_request');
      expect(res.body.error.message).toMatch(/^transport_url: /);
    }
    const denied = await session.api('POST', '/mcp-servers', { body: { name: 'Inside', transport_url: 'http://10.1.2.3/mcp' } });
    expect(denied.body.error.message).toContain('WARDEN_EGRESS_ALLOWLIST');
    const ok = (await session.api('POST', '/mcp-servers', { body: { name: 'Outside', transport_url: 'https://mcp.example.com/x' } })).body
      .data;
    const moved = await session.api('PATCH', `/mcp-servers/${ok.id}`, { body: { transport_url: 'http://192.168.1.1/mcp' } });
    expect(moved.status).toBe(400);
    expect(moved.body.error.message).toMatch(/^transport_url: /);
    expect((await session.api('GET', '/mcp-servers')).body.data.map((s) => s.transport_url)).toEqual(['https://mcp.example.com/x']);
  });

  it('answers 409 for a slug taken and 400 for a malformed one or an ftp URL', async () => {
    const ws = await freshWorkspace('*');
    const session = await login(ws.key);
    expect(
      (await session.api('POST', '/mcp-servers', { body: { name: 'A', slug: 'tools', transport_url: 'https://a.example.com' } })).status,
    ).toBe(201);
    const taken = await session.api('POST', '/mcp-servers', { body: { name: 'B', slug: 'tools', transport_url: 'https://b.example.com' } });
    expect(taken.status).toBe(409);
    expect(taken.body.error.code).toBe('conflict');
    for (const body of [
      { name: 'C', slug: 'Not A Slug', transport_url: 'https://c.example.com' },
      { name: 'D', transport_url: 'ftp://d.example.com' },
      { name: '', transport_url: 'https://e.example.com' },
    ]) {
      const res = await session.api('POST', '/mcp-servers', { body, unchecked: true });
      expect(res.status, JSON.stringify(body)).toBe(400);
    }
  });

  it('needs mcp_servers:read to list and mcp_servers:write to change; another workspace’s server is 404', async () => {
    const ws = await freshWorkspace('*');
    const owner = await login(ws.key);
    const created = (await owner.api('POST', '/mcp-servers', { body: { name: 'Mine', transport_url: 'https://mine.example.com' } })).body
      .data;

    const none = await login((await newKey(ws.slug, 'admin')).key);
    expect((await none.api('GET', '/mcp-servers')).status).toBe(403);
    const reader = await login((await newKey(ws.slug, 'admin,mcp_servers:read')).key);
    expect((await reader.api('GET', '/mcp-servers')).status).toBe(200);
    for (const res of [
      await reader.api('POST', '/mcp-servers', { body: { name: 'X', transport_url: 'https://x.example.com' } }),
      await reader.api('PATCH', `/mcp-servers/${created.id}`, { body: { enabled: false } }),
      await reader.api('DELETE', `/mcp-servers/${created.id}`),
    ]) {
      expect(res.status).toBe(403);
      expect(res.body.error.code).toBe('insufficient_permission');
    }

    const outsider = await login((await freshWorkspace('*')).key);
    expect((await outsider.api('GET', '/mcp-servers')).body.data).toEqual([]);
    expect((await outsider.api('PATCH', `/mcp-servers/${created.id}`, { body: { enabled: false } })).status).toBe(404);
    expect((await outsider.api('DELETE', `/mcp-servers/${created.id}`)).status).toBe(404);
    expect((await owner.api('GET', '/mcp-servers')).body.data).toEqual([created]);
  });
});
