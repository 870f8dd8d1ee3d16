/**
 * Every resource method of the SDK against a real server: the right operation is called, the
 * answer's `data` comes back unwrapped, lists page, and iterators walk every page.
 */
import { beforeAll, describe, expect, expectTypeOf, it } from 'vitest';
import { createWarden, operations, type Warden } from '../../packages/sdk/src/index.ts';
import { useFixture } from '../support/fixture.ts';
import { startTestMcpServer } from '../support/mcp-server.ts';
import { keyFor, useTestServer } from '../support/server.ts';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const AGENT_KEY = 'sdk-agent-key-0123456789abcdef';

// Loopback allow-listed: the MCP upstream below listens on 127.0.0.1.
const server = useTestServer({ egressAllowlist: ['127.0.0.1/32', '::1/128'] });
const mcp = useFixture(startTestMcpServer, (m) => m.close(), 'the test MCP server');
let warden: Warden;

beforeAll(() => {
  warden = createWarden({ apiKey: server.key, baseUrl: server.url });
});

describe('warden.health (getHealth)', () => {
  it('answers the health report without a key being needed', async () => {
    const health = await warden.health();
    expect(health).toMatchObject({ status: 'ok', database: 'ok' });
    expect(typeof health.version).toBe('string');
  });
});

describe('warden.agents', () => {
  it('creates, gets (by id and slug), updates, lists and deletes an agent', async () => {
    const created = await warden.agents.create({ name: 'SDK Bot', provider: 'anthropic', environment: 'production', risk_level: 'high' });
    expect(created).toMatchObject({ name: 'SDK Bot', slug: 'sdk-bot', provider: 'anthropic', status: 'active', has_api_key: true });
    expect(created.id).toMatch(UUID);
    // the key Warden generated reaches the SDK's caller, once
    const { api_key: generated, ...agent } = created;
    expect(generated).toMatch(/^wak_/);

    expect(await warden.agents.get(created.id)).toEqual(agent);
    expect((await warden.agents.get('sdk-bot')).id).toBe(created.id);

    const updated = await warden.agents.update(created.id, { description: 'from the SDK', tags: ['sdk'] });
    expect(updated).toMatchObject({ id: created.id, description: 'from the SDK', tags: ['sdk'] });

    const page = await warden.agents.list({ environment: 'production' });
    expect(page.has_more).toBe(false);
    expect(page.next_cursor).toBeNull();
    expect(page.data.map((a) => a.id)).toContain(created.id);

    expect(await warden.agents.delete(created.id)).toEqual({ id: created.id, deleted: true });
    await expect(warden.agents.get(created.id)).rejects.toMatchObject({ status: 404, code: 'not_found' });
  });

  it('iterates over every page, newest first, and stops fetching when the loop breaks', async () => {
    const key = await keyFor(server, 'agents:read,agents:write', 'sdk-paging');
    const scoped = createWarden({ apiKey: key, baseUrl: server.url });
    for (let i = 0; i < 5; i++) await scoped.agents.create({ name: `Pager ${i}`, provider: 'local' });

    const names: string[] = [];
    for await (const agent of scoped.agents.iterate({ limit: 2 })) names.push(agent.name);
    expect(names).toEqual(['Pager 4', 'Pager 3', 'Pager 2', 'Pager 1', 'Pager 0']);

    const first = await scoped.agents.list({ limit: 2 });
    expect(first.has_more).toBe(true);
    const resumed: string[] = [];
    for await (const agent of scoped.agents.iterate({ limit: 2, cursor: first.next_cursor ?? undefined })) resumed.push(agent.name);
    expect(resumed).toEqual(['Pager 2', 'Pager 1', 'Pager 0']);

    let pagesFetched = 0;
    const counting = createWarden({
      apiKey: key,
      baseUrl: server.url,
      fetch: (input, init) => {
        pagesFetched++;
        return fetch(input, init);
      },
    });
    for await (const agent of counting.agents.iterate({ limit: 2 })) {
      expect(agent.name).toBe('Pager 4');
      break;
    }
    expect(pagesFetched).toBe(1);
  });

  it('passes filters through the iterator', async () => {
    const key = await keyFor(server, 'agents:read,agents:write', 'sdk-filter');
    const scoped = createWarden({ apiKey: key, baseUrl: server.url });
    await scoped.agents.create({ name: 'On', provider: 'local' });
    await scoped.agents.create({ name: 'Off', provider: 'local', status: 'inactive' });
    const names: string[] = [];
    for await (const agent of scoped.agents.iterate({ status: 'inactive', limit: 1 })) names.push(agent.name);
    expect(names).toEqual(['Off']);
  });
});

describe('warden.policies and warden.policy.evaluate', () => {
  it('creates, gets, updates, lists and iterates policies, and evaluates against them', async () => {
    const policy = await warden.policies.create({
      name: 'sdk-refunds',
      rules: [{ match: { action: ['refund.*'] }, effect: 'block', severity: 'high', message: 'No refunds from bots' }],
    });
    expect(policy).toMatchObject({ name: 'sdk-refunds', enabled: true, mode: 'enforce', version: 1 });
    expect((await warden.policies.get('sdk-refunds')).id).toBe(policy.id);
    const updated = await warden.policies.update(policy.id, { description: 'updated by the SDK' });
    expect(updated).toMatchObject({ version: 2, description: 'updated by the SDK' });
    expect((await warden.policies.list()).data.map((p) => p.id)).toContain(policy.id);
    const ids: string[] = [];
    for await (const p of warden.policies.iterate({ limit: 1 })) ids.push(p.id);
    expect(ids).toContain(policy.id);

    await warden.agents.create({ name: 'Evaluator', slug: 'evaluator', provider: 'local' });
    const blocked = await warden.policy.evaluate({ input: { action: 'refund.create', agent: 'evaluator' } });
    expect(blocked).toMatchObject({ allowed: false, action: 'block', policy: 'sdk-refunds', message: 'No refunds from bots' });
    const allowed = await warden.policy.evaluate({ input: { action: 'orders.read', agent: 'evaluator' } });
    expect(allowed).toMatchObject({ allowed: true, matched: false });
  });

  it('sends the agent key from createWarden, and a per-call one over it', async () => {
    await warden.agents.create({ name: 'Keyed', slug: 'sdk-keyed', provider: 'local', api_key: AGENT_KEY });
    const keyed = createWarden({ apiKey: server.key, agentKey: AGENT_KEY, baseUrl: server.url });
    expect(await keyed.policy.evaluate({ input: { action: 'orders.read' } })).toMatchObject({ allowed: true });
    await expect(
      keyed.policy.evaluate({ input: { action: 'orders.read' } }, { agentKey: 'wrong-agent-key-0123456789' }),
    ).rejects.toMatchObject({
      status: 401,
      code: 'invalid_agent_key',
    });
  });
});

describe('warden.approvals', () => {
  it('creates, gets, lists, iterates and decides an approval', async () => {
    await warden.agents.create({ name: 'Asker', slug: 'asker', provider: 'local' });
    const approval = await warden.approvals.create({ title: 'Refund 120 EUR', agent: 'asker', action: 'refund.create', priority: 'high' });
    expect(approval).toMatchObject({ status: 'pending', title: 'Refund 120 EUR', agent: 'asker' });
    expect((await warden.approvals.get(approval.id)).id).toBe(approval.id);
    expect((await warden.approvals.list({ status: 'pending' })).data.map((a) => a.id)).toContain(approval.id);
    const seen: string[] = [];
    for await (const a of warden.approvals.iterate({ limit: 1 })) seen.push(a.id);
    expect(seen).toContain(approval.id);

    const decided = await warden.approvals.decide(approval.id, { status: 'approved', decision_note: 'ok' });
    expect(decided).toMatchObject({ id: approval.id, status: 'approved' });
    await expect(warden.approvals.decide(approval.id, { status: 'rejected', decision_note: 'no' })).rejects.toMatchObject({ status: 409 });
  });
});

describe('warden.audit and warden.compliance', () => {
  it('records an event, lists and iterates logs and events, verifies the chain and reads compliance', async () => {
    const recorded = await warden.audit.record({ action: 'sdk.recorded', result: 'blocked', severity: 'low' });
    expect(recorded).toMatchObject({ result: 'blocked', severity: 'low' });
    expect(recorded.id).toMatch(UUID);

    const logs = await warden.audit.logs({ action: 'sdk.recorded' });
    expect(logs.data.map((e) => e.id)).toEqual([recorded.id]);
    const logIds: string[] = [];
    for await (const event of warden.audit.iterateLogs({ limit: 1 })) logIds.push(event.id);
    expect(logIds).toContain(recorded.id);
    expect(logIds.length).toBeGreaterThan(1);

    const events = await warden.audit.events({ action: 'sdk.recorded' });
    expect(events.data.map((e) => e.id)).toEqual([recorded.id]);
    const eventIds: string[] = [];
    for await (const event of warden.audit.iterateEvents({ limit: 1 })) eventIds.push(event.id);
    expect(eventIds).toEqual(logIds);

    expect(await warden.audit.verify()).toMatchObject({ valid: true });

    const compliance = await warden.compliance.status();
    expect(compliance.score).toBeGreaterThanOrEqual(0);
    expect(compliance.score).toBeLessThanOrEqual(100);
    expect(compliance.controls.length).toBeGreaterThan(0);
  });
});

describe('warden.credentials', () => {
  it('creates, gets, rotates, lists, iterates and deletes a credential; the secret is never answered', async () => {
    const secret = 'sk_sdk_credential_0123456789LMNO';
    const created = await warden.credentials.create({ name: 'sdk-cred', hosts: ['api.example.com'], auth: { type: 'bearer', secret } });
    expect(created).toMatchObject({
      name: 'sdk-cred',
      hosts: ['api.example.com'],
      auth: { type: 'bearer', header: 'authorization', hint: '…LMNO' },
    });
    expect((await warden.credentials.get('sdk-cred')).id).toBe(created.id);
    const rotated = await warden.credentials.update(created.id, {
      auth: { type: 'header', header: 'X-Api-Key', secret: 'sk_sdk_rotated_0123456789PQRS' },
    });
    expect(rotated.auth).toEqual({ type: 'header', header: 'x-api-key', hint: '…PQRS' });
    expect((await warden.credentials.list()).data.map((c) => c.name)).toContain('sdk-cred');
    const names: string[] = [];
    for await (const c of warden.credentials.iterate({ limit: 1 })) names.push(c.name);
    expect(names).toContain('sdk-cred');
    expect(JSON.stringify([created, rotated])).not.toContain('sk_sdk_');
    expect(await warden.credentials.delete('sdk-cred')).toEqual({ id: created.id, deleted: true });
  });
});

describe('warden.mcpServers and warden.runtime', () => {
  it('creates, gets, updates, lists, iterates and deletes an MCP server', async () => {
    const created = await warden.mcpServers.create({ name: 'Temp MCP', transport_url: 'https://mcp.example.com/mcp' });
    expect(created).toMatchObject({ slug: 'temp-mcp', transport: 'auto', enabled: true });
    expect((await warden.mcpServers.get(created.id)).id).toBe(created.id);
    expect(await warden.mcpServers.update(created.id, { enabled: false })).toMatchObject({ enabled: false });
    expect((await warden.mcpServers.list()).data.map((s) => s.id)).toContain(created.id);
    const ids: string[] = [];
    for await (const s of warden.mcpServers.iterate({ limit: 1 })) ids.push(s.id);
    expect(ids).toContain(created.id);
    expect(await warden.mcpServers.delete(created.id)).toEqual({ id: created.id, deleted: true });
  });

  it('discovers, calls, opens a session and executes through a registered MCP server', async () => {
    await warden.agents.create({ name: 'Tool User', slug: 'tool-user', provider: 'local' });
    await warden.mcpServers.create({ name: 'Upstream', slug: 'upstream', transport_url: mcp.url });
    const input = { agent: 'tool-user' };

    const discovered = await warden.runtime.mcp.discover({ server: 'upstream', input });
    expect(discovered.allowed).toBe(true);
    expect(discovered.tools?.map((t) => t.name)).toContain('add');

    const called = await warden.runtime.mcp.call({ server: 'upstream', tool: 'add', arguments: { a: 2, b: 3 }, input });
    expect(called).toMatchObject({ allowed: true, tool: 'add' });

    const session = await warden.runtime.mcp.session({ server: 'upstream', input });
    expect(session.allowed).toBe(true);
    expect(session.session_id).toMatch(UUID);

    const executed = await warden.runtime.execute({
      input: { action: 'mcp.call', agent: 'tool-user' },
      execution: { mode: 'mcp_proxy', server: 'upstream', tool: 'echo', arguments: { text: 'hi' } },
    });
    expect(executed.allowed).toBe(true);
    expect(executed.execution).toMatchObject({ mode: 'mcp_proxy', content: [{ type: 'text', text: 'hi' }] });
  });
});

describe('raw generated operations', () => {
  it('run on warden.client with its auth, in the {data, error, response} style', async () => {
    const ok = await operations.listAgents({ client: warden.client, query: { limit: 1 } });
    expect(ok.response.status).toBe(200);
    expect(ok.data?.data).toHaveLength(1);
    const missing = await operations.getAgent({ client: warden.client, path: { id: 'no-such-agent' } });
    expect(missing.response.status).toBe(404);
    expect(missing.error).toMatchObject({ error: { code: 'not_found' } });
    // The SDK 0.1 types, kept over @hey-api/openapi-ts 0.97+ (tools/generate.ts, keepSdkResultTypes).
    expectTypeOf(ok.response).toEqualTypeOf<Response>();
    expectTypeOf(missing.request).toEqualTypeOf<Request>();
    type ErrorInterceptor = Parameters<typeof warden.client.interceptors.error.use>[0];
    expectTypeOf<Parameters<ErrorInterceptor>[1]>().toEqualTypeOf<Response>();
  });
});
