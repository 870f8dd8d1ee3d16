/**
 * Configuration changes are audited (issue 22): creating, changing or deleting a policy, an
 * agent, an MCP server, a key, a webhook endpoint, a workspace setting or the plan writes an
 * audit event (source `configuration`, result `allowed`) naming the actor in `user` —
 * `key:<key id>` through the API, `dashboard:<session id>` through the dashboard API, `cli`
 * through the admin commands — with no secret in it, sealed like every other event, and written
 * in the change's own transaction: a change that fails leaves no event, and no change is
 * visible without its event.
 */
import type { AuditEvent } from '@warden/contract';
import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { dashboardLogin, useTestServer } from '../support/server.ts';

const server = useTestServer({ egressAllowlist: ['127.0.0.1/32'] });

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

let workspaceCount = 0;
/** A new workspace and a key of it with every permission (created by `warden keys create`: an `api_key.created` event by `cli`). */
async function freshWorkspace() {
  const slug = `config-audit-${++workspaceCount}`;
  const workspace = await server.admin('workspaces.create', { slug });
  const created = await server.admin('keys.create', { workspace: slug, permissions: '*' });
  return { slug, id: workspace.id as string, key: created.key as string, keyId: created.id as string };
}
type Workspace = Awaited<ReturnType<typeof freshWorkspace>>;

/** The workspace's configuration events (of `action`, if given), newest first. */
async function configurationEvents(ws: Workspace, action?: string): Promise<AuditEvent[]> {
  const res = await server.api('GET', '/audit-logs', { key: ws.key, query: { limit: 100, ...(action ? { action } : {}) } });
  expect(res.status).toBe(200);
  return res.body.data.filter((event) => event.source === 'configuration');
}

/** The one configuration event of `action` on `resource`. */
async function eventOf(ws: Workspace, action: string, resource: string): Promise<AuditEvent> {
  const events = (await configurationEvents(ws, action)).filter((event) => event.resource === resource);
  expect(events).toHaveLength(1);
  return events[0] as AuditEvent;
}

/** Waits (bounded) until every configuration event of the workspace is sealed; answers them. */
async function allSealed(ws: Workspace): Promise<AuditEvent[]> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const events = await configurationEvents(ws);
    if (events.every((event) => event.sequence !== null && event.hash !== null)) return events;
    if (Date.now() > deadline)
      throw new Error(`configuration events still unsealed: ${JSON.stringify(events.filter((e) => e.sequence === null))}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** What every configuration event holds, whoever made the change. */
function expectConfigurationEvent(event: AuditEvent, expected: { action: string; resource: string; user: string; severity?: string }) {
  expect(event).toMatchObject({
    source: 'configuration',
    action: expected.action,
    resource: expected.resource,
    user: expected.user,
    result: 'allowed',
    severity: expected.severity ?? 'info',
    agent: null,
  });
}

describe('changes through the API (actor key:<key id>)', () => {
  it('records agent.created, agent.updated and agent.deleted, without the agent key, and seals them', async () => {
    const ws = await freshWorkspace();
    const agentSecret = 'agent-secret-key-never-audited-0123456789';
    const created = await server.api('POST', '/agents', {
      key: ws.key,
      body: { name: 'Audited Bot', provider: 'anthropic', api_key: agentSecret },
    });
    expect(created.status).toBe(201);
    const agent = created.body.data;
    const updated = await server.api('PATCH', `/agents/${agent.id}`, {
      key: ws.key,
      body: { status: 'inactive', api_key: `${agentSecret}-rotated` },
    });
    expect(updated.status).toBe(200);
    const deleted = await server.api('DELETE', `/agents/${agent.slug}`, { key: ws.key });
    expect(deleted.status).toBe(200);

    const user = `key:${ws.keyId}`;
    const create = await eventOf(ws, 'agent.created', agent.id);
    expectConfigurationEvent(create, { action: 'agent.created', resource: agent.id, user });
    expect(create.context).toMatchObject({ slug: 'audited-bot', name: 'Audited Bot' });
    expect(create.request_id).toEqual(expect.any(String));
    const update = await eventOf(ws, 'agent.updated', agent.id);
    expectConfigurationEvent(update, { action: 'agent.updated', resource: agent.id, user });
    expect(update.context).toMatchObject({ fields: ['status', 'api_key'] });
    const remove = await eventOf(ws, 'agent.deleted', agent.id);
    expectConfigurationEvent(remove, { action: 'agent.deleted', resource: agent.id, user, severity: 'medium' });

    const sealed = await allSealed(ws);
    expect(JSON.stringify(sealed)).not.toContain(agentSecret);
    expect(JSON.stringify(sealed)).not.toContain(ws.key);
  });

  it('records policy.created and policy.updated', async () => {
    const ws = await freshWorkspace();
    const created = await server.api('POST', '/policies', {
      key: ws.key,
      body: { name: 'Refund freeze', rules: [{ match: { action: ['refund.create'] }, effect: 'block' }] },
    });
    expect(created.status).toBe(201);
    const policy = created.body.data;
    const updated = await server.api('PATCH', `/policies/${policy.id}`, { key: ws.key, body: { enabled: false } });
    expect(updated.status).toBe(200);

    const user = `key:${ws.keyId}`;
    const create = await eventOf(ws, 'policy.created', policy.id);
    expectConfigurationEvent(create, { action: 'policy.created', resource: policy.id, user });
    expect(create.context).toMatchObject({ name: 'Refund freeze', rules: 1 });
    const update = await eventOf(ws, 'policy.updated', policy.id);
    expectConfigurationEvent(update, { action: 'policy.updated', resource: policy.id, user });
    expect(update.context).toMatchObject({ name: 'Refund freeze', fields: ['enabled'] });
    await allSealed(ws);
  });

  it('records mcp_server.created, .updated and .deleted, without the transport URL', async () => {
    const ws = await freshWorkspace();
    const token = 'mcp-url-token-never-audited';
    const created = await server.api('POST', '/mcp-servers', {
      key: ws.key,
      body: { name: 'Tools', transport_url: `https://mcp.example.com/mcp?token=${token}` },
    });
    expect(created.status).toBe(201);
    const mcp = created.body.data;
    expect((await server.api('PATCH', `/mcp-servers/${mcp.id}`, { key: ws.key, body: { enabled: false } })).status).toBe(200);
    expect((await server.api('DELETE', `/mcp-servers/${mcp.id}`, { key: ws.key })).status).toBe(200);

    const user = `key:${ws.keyId}`;
    expectConfigurationEvent(await eventOf(ws, 'mcp_server.created', mcp.id), { action: 'mcp_server.created', resource: mcp.id, user });
    expectConfigurationEvent(await eventOf(ws, 'mcp_server.updated', mcp.id), { action: 'mcp_server.updated', resource: mcp.id, user });
    expectConfigurationEvent(await eventOf(ws, 'mcp_server.deleted', mcp.id), {
      action: 'mcp_server.deleted',
      resource: mcp.id,
      user,
      severity: 'medium',
    });
    const sealed = await allSealed(ws);
    expect(JSON.stringify(sealed)).not.toContain(token);
    expect(JSON.stringify(sealed)).not.toContain('mcp.example.com');
  });

  it('records settings.updated with the defaults it set; a change of nothing records nothing', async () => {
    const ws = await freshWorkspace();
    const res = await server.api('PATCH', '/settings', { key: ws.key, body: { default_decision: { production: 'block' } } });
    expect(res.status).toBe(200);
    const event = await eventOf(ws, 'settings.updated', ws.id);
    expectConfigurationEvent(event, { action: 'settings.updated', resource: ws.id, user: `key:${ws.keyId}` });
    expect(event.context).toEqual({ fields: ['default_decision.production'], default_decision: { production: 'block' } });
    await allSealed(ws);
  });
});

describe('changes through the admin commands (actor cli)', () => {
  it('records api_key.created and api_key.revoked, never the key', async () => {
    const ws = await freshWorkspace();
    const created = await server.admin('keys.create', { workspace: ws.slug, permissions: 'agents:read,audit:read', name: 'reader' });
    await server.admin('keys.revoke', { id: created.id });

    const create = await eventOf(ws, 'api_key.created', created.id);
    expectConfigurationEvent(create, { action: 'api_key.created', resource: created.id, user: 'cli' });
    expect(create.context).toEqual({ name: 'reader', permissions: ['agents:read', 'audit:read'] });
    expect(create.request_id).toBeNull();
    const revoke = await eventOf(ws, 'api_key.revoked', created.id);
    expectConfigurationEvent(revoke, { action: 'api_key.revoked', resource: created.id, user: 'cli', severity: 'medium' });
    // the workspace's own key was created the same way
    expectConfigurationEvent(await eventOf(ws, 'api_key.created', ws.keyId), {
      action: 'api_key.created',
      resource: ws.keyId,
      user: 'cli',
    });

    const sealed = JSON.stringify(await allSealed(ws));
    expect(sealed).not.toContain(created.key);
    expect(sealed).not.toContain(ws.key);
  });

  it('records webhook_endpoint.created, .paused, .resumed and .deleted, never the secret, and billing.plan_changed', async () => {
    const ws = await freshWorkspace();
    const created = await server.admin('webhooks.create', {
      workspace: ws.slug,
      url: 'https://hooks.example.com/cli',
      events: 'agent.created,billing.updated',
    });
    expect(created.secret).toMatch(/^whsec_/);
    await server.admin('webhooks.pause', { workspace: ws.slug, id: created.id });
    await server.admin('webhooks.resume', { workspace: ws.slug, id: created.id });
    await server.admin('webhooks.delete', { workspace: ws.slug, id: created.id });
    await server.admin('billing.set-plan', { workspace: ws.slug, plan: 'team' });
    await server.admin('billing.set-plan', { workspace: ws.slug, plan: 'team' }); // no change: no event

    const create = await eventOf(ws, 'webhook_endpoint.created', created.id);
    expectConfigurationEvent(create, { action: 'webhook_endpoint.created', resource: created.id, user: 'cli' });
    expect(create.context).toEqual({ events: ['agent.created', 'billing.updated'] });
    for (const action of ['webhook_endpoint.paused', 'webhook_endpoint.resumed']) {
      expectConfigurationEvent(await eventOf(ws, action, created.id), { action, resource: created.id, user: 'cli' });
    }
    expectConfigurationEvent(await eventOf(ws, 'webhook_endpoint.deleted', created.id), {
      action: 'webhook_endpoint.deleted',
      resource: created.id,
      user: 'cli',
      severity: 'medium',
    });
    const plan = await eventOf(ws, 'billing.plan_changed', ws.id);
    expectConfigurationEvent(plan, { action: 'billing.plan_changed', resource: ws.id, user: 'cli' });
    expect(plan.context).toEqual({ plan: 'team', previous_plan: 'free' });

    const sealed = JSON.stringify(await allSealed(ws));
    expect(sealed).not.toContain(created.secret);
    expect(sealed).not.toContain(created.secret.slice('whsec_'.length));
  });
});

describe('changes through the dashboard API (actor dashboard:<session id>)', () => {
  it('records webhook, settings and key changes with the session id, never its token or a secret', async () => {
    const ws = await freshWorkspace();
    const session = await dashboardLogin(server.origin, ws.key);
    const token = decodeURIComponent(session.cookie.slice('warden_session='.length));
    const { rows } = await sql<{ id: string }>`SELECT id FROM dashboard_sessions WHERE key_id = ${ws.keyId}`.execute(server.database.db);
    expect(rows).toHaveLength(1);
    const user = `dashboard:${rows[0]?.id}`;
    expect(user).toMatch(/^dashboard:[0-9a-f-]{36}$/);

    const created = await session.api('POST', '/webhooks', {
      body: { url: 'https://hooks.example.com/dashboard', events: ['agent.created'], description: 'from the dashboard' },
    });
    expect(created.status).toBe(201);
    const { endpoint, secret } = created.body.data;
    expect(endpoint.id).toMatch(UUID);
    expect((await session.api('PATCH', `/webhooks/${endpoint.id}`, { body: { events: ['*'], description: null } })).status).toBe(200);
    expect((await session.api('PATCH', `/webhooks/${endpoint.id}`, { body: { paused: true } })).status).toBe(200);
    const rotated = await session.api('POST', `/webhooks/${endpoint.id}/rotate-secret`, { body: { overlap_seconds: 60 } });
    expect(rotated.status).toBe(200);
    expect((await session.api('DELETE', `/webhooks/${endpoint.id}`)).status).toBe(200);
    expect((await session.api('PATCH', '/settings', { body: { default_decision: { staging: 'block' } } })).status).toBe(200);
    const issued = await session.api('POST', '/keys', { body: { name: 'from the dashboard', permissions: ['audit:read'] } });
    expect(issued.status).toBe(201);
    expect((await session.api('DELETE', `/keys/${issued.body.data.key.id}`)).status).toBe(200);

    const update = await eventOf(ws, 'webhook_endpoint.updated', endpoint.id);
    expectConfigurationEvent(update, { action: 'webhook_endpoint.updated', resource: endpoint.id, user });
    expect(update.context).toEqual({ fields: ['events', 'description'] });
    expectConfigurationEvent(await eventOf(ws, 'webhook_endpoint.created', endpoint.id), {
      action: 'webhook_endpoint.created',
      resource: endpoint.id,
      user,
    });
    expectConfigurationEvent(await eventOf(ws, 'webhook_endpoint.paused', endpoint.id), {
      action: 'webhook_endpoint.paused',
      resource: endpoint.id,
      user,
    });
    const rotation = await eventOf(ws, 'webhook_endpoint.secret_rotated', endpoint.id);
    expectConfigurationEvent(rotation, { action: 'webhook_endpoint.secret_rotated', resource: endpoint.id, user });
    expect(rotation.context).toEqual({ overlap_seconds: 60 });
    expectConfigurationEvent(await eventOf(ws, 'webhook_endpoint.deleted', endpoint.id), {
      action: 'webhook_endpoint.deleted',
      resource: endpoint.id,
      user,
      severity: 'medium',
    });
    expectConfigurationEvent(await eventOf(ws, 'settings.updated', ws.id), { action: 'settings.updated', resource: ws.id, user });
    const keyId = issued.body.data.key.id;
    const issuedEvent = await eventOf(ws, 'api_key.created', keyId);
    expectConfigurationEvent(issuedEvent, { action: 'api_key.created', resource: keyId, user });
    expect(issuedEvent.context).toEqual({ name: 'from the dashboard', permissions: ['audit:read'] });
    expectConfigurationEvent(await eventOf(ws, 'api_key.revoked', keyId), {
      action: 'api_key.revoked',
      resource: keyId,
      user,
      severity: 'medium',
    });

    const sealed = JSON.stringify(await allSealed(ws));
    for (const secretValue of [secret, rotated.body.data.secret, token, session.csrf, ws.key, issued.body.data.secret]) {
      expect(sealed).not.toContain(secretValue);
    }
  });
});

describe('the event is written in the change’s transaction', () => {
  it('a create that fails after its event was written (slug or name taken: 409) leaves no event', async () => {
    const ws = await freshWorkspace();
    const first = await server.api('POST', '/agents', { key: ws.key, body: { name: 'Twin', provider: 'local' } });
    expect(first.status).toBe(201);
    const again = await server.api('POST', '/agents', { key: ws.key, body: { name: 'Twin', provider: 'local' } });
    expect(again.status).toBe(409);
    expect(again.body.error.code).toBe('conflict');
    expect((await configurationEvents(ws, 'agent.created')).map((event) => event.resource)).toEqual([first.body.data.id]);

    const policy = await server.api('POST', '/policies', { key: ws.key, body: { name: 'Only once' } });
    expect(policy.status).toBe(201);
    expect((await server.api('POST', '/policies', { key: ws.key, body: { name: 'Only once' } })).status).toBe(409);
    expect(await configurationEvents(ws, 'policy.created')).toHaveLength(1);

    const mcp = { name: 'Once', transport_url: 'https://mcp.example.com/once' };
    expect((await server.api('POST', '/mcp-servers', { key: ws.key, body: mcp })).status).toBe(201);
    expect((await server.api('POST', '/mcp-servers', { key: ws.key, body: mcp })).status).toBe(409);
    expect(await configurationEvents(ws, 'mcp_server.created')).toHaveLength(1);
  });

  it('an update that fails after its event was written (a slug taken: 409) leaves no event, and nothing changed', async () => {
    const ws = await freshWorkspace();
    const taken = await server.api('POST', '/agents', { key: ws.key, body: { name: 'Taken', provider: 'local' } });
    const mover = await server.api('POST', '/agents', { key: ws.key, body: { name: 'Mover', provider: 'local' } });
    const clash = await server.api('PATCH', `/agents/${mover.body.data.id}`, { key: ws.key, body: { slug: taken.body.data.slug } });
    expect(clash.status).toBe(409);
    expect(await configurationEvents(ws, 'agent.updated')).toEqual([]);
    expect((await server.api('GET', `/agents/${mover.body.data.id}`, { key: ws.key })).body.data.slug).toBe('mover');
  });

  it('no change is visible without its event: concurrent creates, some refused, match their events one to one', async () => {
    const ws = await freshWorkspace();
    // 12 creates at once, 4 of them for a slug another of them also wants
    const names = [...Array.from({ length: 8 }, (_, i) => `Racer ${i}`), 'Racer 0', 'Racer 1', 'Racer 2', 'Racer 3'];
    const answers = await Promise.all(
      names.map((name) => server.api('POST', '/agents', { key: ws.key, body: { name, provider: 'local' } })),
    );
    expect(answers.filter((res) => res.status === 201)).toHaveLength(8);
    expect(answers.filter((res) => res.status === 409)).toHaveLength(4);

    const agents = await server.api('GET', '/agents', { key: ws.key, query: { limit: 100 } });
    const agentIds = agents.body.data.map((agent) => agent.id).sort();
    const eventResources = (await configurationEvents(ws, 'agent.created')).map((event) => event.resource).sort();
    expect(agentIds).toHaveLength(8);
    expect(eventResources).toEqual(agentIds);
  });

  it('a revocation of an unknown key records nothing', async () => {
    const ws = await freshWorkspace();
    await expect(server.admin('keys.revoke', { id: '00000000-0000-4000-8000-000000000000' })).rejects.toThrow(/no active key/);
    expect(await configurationEvents(ws, 'api_key.revoked')).toEqual([]);
  });
});
