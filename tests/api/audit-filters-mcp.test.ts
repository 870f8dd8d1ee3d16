/**
 * The audit log's filters for MCP activity (issue 48): by source (`mcp`: the gateway's and the
 * REST runtime's MCP calls), by the server an act ran on, by tool, and by how an act ended (its
 * outcome event), alone and together, on `/audit-logs` and `/events`; an outcome or a source
 * that is none is 400. And an MCP call read as one row (`view=acts`): its decision event with
 * its outcome event folded in, its resource the tool's address.
 */
import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ConformanceUpstream, startConformanceUpstream } from '../support/conformance-upstream.ts';
import { keyFor, useTestServer } from '../support/server.ts';

const spec = JSON.parse(readFileSync(new URL('../../spec/dist/openapi.json', import.meta.url), 'utf8'));
const ALL: string = spec.components.schemas.Permission.enum.join(',');
const server = useTestServer({ egressAllowlist: ['127.0.0.1/32'] });
let upstream: ConformanceUpstream;
let key: string;

interface Event {
  id: string;
  source: string;
  tool: string | null;
  action: string;
  resource: string | null;
  hash: string | null;
  context: { outcome?: string; decision_event_id?: string; execution?: { server?: string } };
  outcome_event?: Event | null;
}

/** Every event a query lists (following next_cursor). */
async function listed(path: string, query: Record<string, string>): Promise<Event[]> {
  const all: Event[] = [];
  let cursor: string | undefined;
  do {
    const res = await server.api('GET', path as '/audit-logs', {
      key,
      query: { ...query, limit: 100, ...(cursor ? { cursor } : {}) },
      unchecked: true,
    });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    all.push(...(res.body.data as Event[]));
    cursor = res.body.next_cursor ?? undefined;
  } while (cursor);
  return all;
}

beforeAll(async () => {
  upstream = await startConformanceUpstream({ modern: false });
  key = await keyFor(server, ALL, 'audit-mcp-filters');
  const api = (path: string, body: unknown) => server.api('POST', path as '/agents', { key, body, unchecked: true });
  // a port nobody listens on: calls to `down` fail
  const closed = await new Promise<number>((resolve) => {
    const probe = createServer().listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as { port: number };
      probe.close(() => resolve(port));
    });
  });
  expect((await api('/mcp-servers', { name: 'Up', slug: 'up', transport_url: upstream.url })).status).toBe(201);
  expect((await api('/mcp-servers', { name: 'Down', slug: 'down', transport_url: `http://127.0.0.1:${closed}/mcp` })).status).toBe(201);
  const agentKey = `ak_audit_filters_${Math.random().toString(36).slice(2)}`;
  expect((await api('/agents', { name: 'Bot', slug: 'bot', provider: 'local', api_key: agentKey })).status).toBe(201);

  // through the gateway: two calls of one tool (source mcp)
  const client = new Client({ name: 'audit-filters', version: '1.0.0' });
  await client.connect(
    new StreamableHTTPClientTransport(new URL(`${server.url}/mcp/up`), {
      requestInit: { headers: { authorization: `Bearer ${agentKey}` } },
    }),
  );
  for (let i = 0; i < 2; i++) await client.callTool({ name: 'test_simple_text', arguments: {} });
  await client.close();
  // through the REST runtime: one call that runs, one whose server is down
  const call = (server_: string) =>
    server.api('POST', '/runtime/mcp/call', {
      key,
      body: { server: server_, tool: 'test_simple_text', arguments: {}, input: { agent: 'bot' } },
      headers: { 'x-warden-agent-key': agentKey },
      unchecked: true,
    });
  expect((await call('up')).status).toBe(200);
  expect((await call('down')).status).toBe(502);
});
afterAll(async () => {
  await upstream?.close();
});

it.each(['/audit-logs', '/events'])('%s filters by source, server, tool and outcome, alone and together', async (path) => {
  const mcp = await listed(path, { source: 'mcp' });
  expect(mcp.length).toBeGreaterThanOrEqual(4);
  if (path === '/audit-logs') expect(mcp.every((e) => e.source === 'mcp')).toBe(true);

  const full = await listed('/audit-logs', {});
  const ids = (events: Event[]) => events.map((e) => e.id).sort();
  const expectIds = async (query: Record<string, string>, pick: (e: Event) => boolean) =>
    expect(ids(await listed(path, query))).toEqual(ids(full.filter(pick)));

  await expectIds({ source: 'mcp' }, (e) => e.source === 'mcp');
  await expectIds({ server: 'down' }, (e) => e.context.execution?.server === 'down');
  await expectIds({ tool: 'test_simple_text' }, (e) => e.tool === 'test_simple_text');
  await expectIds({ outcome: 'failed' }, (e) => e.context.outcome === 'failed');
  await expectIds({ outcome: 'succeeded', source: 'mcp' }, (e) => e.context.outcome === 'succeeded' && e.source === 'mcp');
  await expectIds(
    { source: 'mcp', server: 'up', tool: 'test_simple_text' },
    (e) => e.source === 'mcp' && e.context.execution?.server === 'up' && e.tool === 'test_simple_text',
  );
  // what was made: two gateway calls and two runtime calls, a decision and an outcome each
  expect((await listed(path, { source: 'mcp', tool: 'test_simple_text' })).length).toBe(8);
  expect((await listed(path, { outcome: 'failed', server: 'down' })).length).toBe(1);
  expect((await listed(path, { outcome: 'succeeded', server: 'up', tool: 'test_simple_text' })).length).toBe(3);
  expect(await listed(path, { source: 'execution' })).toEqual([]);
});

it('refuses an outcome or a source that is none with 400 invalid_request', async () => {
  for (const query of [{ outcome: 'maybe' }, { source: 'somewhere' }]) {
    const res = await server.api('GET', '/audit-logs', { key, query, unchecked: true });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('invalid_request');
  }
});

describe('view=acts: an act is one row', () => {
  it('lists each call once, its outcome event folded in, exactly the events the plain listing has', async () => {
    const events = await listed('/audit-logs', { source: 'mcp', tool: 'test_simple_text' });
    const acts = await listed('/audit-logs', { source: 'mcp', tool: 'test_simple_text', view: 'acts' });
    expect(acts).toHaveLength(4);
    const decisions = events.filter((e) => e.context.decision_event_id === undefined);
    const outcomes = events.filter((e) => e.context.decision_event_id !== undefined);
    expect(acts.map((a) => a.id).sort()).toEqual(decisions.map((d) => d.id).sort());
    for (const act of acts) {
      const { outcome_event, ...decision } = act;
      // the decision as the plain listing has it, byte for byte, and its own outcome event
      expect(decision).toEqual(events.find((e) => e.id === act.id));
      expect(outcome_event).toEqual(outcomes.find((o) => o.context.decision_event_id === act.id));
    }
    // a call's resource is its tool's address; the outcome event repeats it
    expect(new Set(acts.map((a) => a.resource))).toEqual(new Set(['mcp://up/tools/test_simple_text', 'mcp://down/tools/test_simple_text']));
    for (const act of acts) expect(act.outcome_event?.resource).toBe(act.resource);
  });

  it('outcome selects the acts that ended so; events that are not acts are listed as they are', async () => {
    const failed = await listed('/audit-logs', { view: 'acts', outcome: 'failed' });
    expect(failed).toHaveLength(1);
    expect(failed[0]?.context.execution?.server).toBe('down');
    expect(failed[0]?.outcome_event?.context.outcome).toBe('failed');
    const succeeded = await listed('/audit-logs', { view: 'acts', outcome: 'succeeded', server: 'up' });
    expect(succeeded).toHaveLength(3);

    const all = await listed('/audit-logs', { view: 'acts' });
    expect(all.some((e) => e.context.decision_event_id !== undefined)).toBe(false);
    const configuration = all.filter((e) => e.source === 'configuration');
    expect(configuration.length).toBeGreaterThan(0);
    for (const event of configuration) expect(event).not.toHaveProperty('outcome_event');
  });

  it('a view that is none is 400 invalid_request', async () => {
    const refused = await server.api('GET', '/audit-logs', { key, query: { view: 'rows' }, unchecked: true });
    expect(refused.status).toBe(400);
    expect(refused.body.error.code).toBe('invalid_request');
  });
});

describe("an MCP tool call's resource is its address, whatever the caller declares", () => {
  it('an agent held to one tool by allowed_resources cannot call another by declaring the allowed one', async () => {
    const agentKey = `ak_held_${Math.random().toString(36).slice(2)}`;
    const created = await server.api('POST', '/agents', {
      key,
      body: { name: 'Held', slug: 'held', provider: 'local', api_key: agentKey, allowed_resources: ['mcp://up/tools/test_simple_text'] },
      unchecked: true,
    });
    expect(created.status).toBe(201);
    const call = (tool: string, resource?: string) =>
      server.api('POST', '/runtime/mcp/call', {
        key,
        body: { server: 'up', tool, arguments: {}, input: { agent: 'held', ...(resource ? { resource } : {}) } },
        headers: { 'x-warden-agent-key': agentKey },
        unchecked: true,
      });
    // the runtime answers a refusal as a decision (200, allowed false), the tool not called
    expect((await call('test_simple_text')).body.data.allowed).toBe(true);
    const declaredOther = await call('test_image_content', 'mcp://up/tools/test_simple_text');
    expect(declaredOther.body.data).toMatchObject({
      allowed: false,
      execution: null,
      decision: { policy: 'agent:held', message: "resource 'mcp://up/tools/test_image_content' is not in the agent's allowed_resources" },
    });
    expect((await call('test_image_content')).body.data.allowed).toBe(false);
  });
});
