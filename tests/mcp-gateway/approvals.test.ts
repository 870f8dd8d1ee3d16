/**
 * require_approval through the MCP gateway: the call is held open (with progress
 * notifications) until a human decides the approval bound to this server, tool and these
 * arguments; undecided, it answers which approval to decide, and the same call completes on
 * retry once approved; other arguments never ride on that approval.
 */
import { readFileSync } from 'node:fs';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { keyFor, useTestServer } from '../support/server.ts';
import { type CountingUpstream, connectClient, eventually, startCountingUpstream } from './support.ts';

const spec = JSON.parse(readFileSync(new URL('../../spec/dist/openapi.json', import.meta.url), 'utf8'));
const ALL: string = spec.components.schemas.Permission.enum.join(',');
const WAIT_MS = 3_000;
const server = useTestServer({ egressAllowlist: ['127.0.0.1/32'], mcpApprovalWaitMs: WAIT_MS });
let upstream: CountingUpstream;
let workspaces = 0;
const clients: Client[] = [];

beforeAll(async () => {
  upstream = await startCountingUpstream();
});
afterAll(async () => {
  for (const client of clients) await client.close().catch(() => undefined);
  await upstream?.close();
});

/** A workspace where calling `add` needs an approval; its key and a client for agent `bot`. */
async function workspace(): Promise<{ key: string; client: Client }> {
  const key = await keyFor(server, ALL, `ap-${++workspaces}`);
  const agentKey = `ak_approvals_${workspaces}_${Math.random().toString(36).slice(2)}`;
  const post = (path: string, body: unknown) => server.api('POST', path as '/agents', { key, body, unchecked: true });
  expect((await post('/mcp-servers', { name: 'tools', slug: 'tools', transport_url: upstream.url })).status).toBe(201);
  expect((await post('/agents', { name: 'Bot', slug: 'bot', provider: 'local', api_key: agentKey })).status).toBe(201);
  expect(
    (await post('/policies', { name: 'Ask for sums', rules: [{ match: { tool: ['add'] }, effect: 'require_approval' }] })).status,
  ).toBe(201);
  const client = await connectClient(`${server.url}/mcp/tools`, { authorization: `Bearer ${agentKey}` });
  clients.push(client);
  return { key, client };
}

const pendingApprovals = async (key: string) =>
  (await server.api('GET', '/approvals', { key, query: { status: 'pending' }, unchecked: true })).body.data as {
    id: string;
    tool: string;
    execution: Record<string, unknown>;
  }[];
const decide = (key: string, id: string, status: 'approved' | 'rejected') =>
  server.api('PATCH', `/approvals/${id}` as '/approvals/{id}', {
    key,
    body: status === 'rejected' ? { status, decision_note: 'not today' } : { status },
    unchecked: true,
  });
const textOf = (result: unknown): string => (result as { content: { text?: string }[] }).content[0]?.text ?? '';
const addCalls = (args: string) => upstream.calls().filter((c) => c === `add:${args}`).length;

describe('tools/call that policy says needs an approval', { timeout: 60_000 }, () => {
  it('holds the call, sends progress while it waits, and completes it once approved', async () => {
    const { key, client } = await workspace();
    const progress: string[] = [];
    const call = client.callTool({ name: 'add', arguments: { a: 1, b: 2 } }, undefined, {
      onprogress: (p) => progress.push(p.message ?? ''),
      timeout: 20_000,
    });
    const approval = await eventually(async () => (await pendingApprovals(key))[0]);
    expect(approval.tool).toBe('add');
    expect(approval.execution).toMatchObject({ mode: 'mcp_proxy', server: 'tools', tool: 'add', arguments: { a: 1, b: 2 } });
    expect((await decide(key, approval.id, 'approved')).status).toBe(200);
    const result = await call;
    expect(result.isError).toBeFalsy();
    expect(result.structuredContent).toEqual({ sum: 3 });
    expect(progress.some((m) => m.includes(approval.id))).toBe(true);
    const used = await server.api('GET', `/approvals/${approval.id}` as '/approvals/{id}', { key, unchecked: true });
    expect(used.body.data.consumed_at).not.toBeNull();
  });

  it('answers an undecided call with the approval and where to decide it; the same call completes on retry once approved', async () => {
    const { key, client } = await workspace();
    const started = Date.now();
    const first = await client.callTool({ name: 'add', arguments: { a: 4, b: 4 } });
    expect(Date.now() - started).toBeGreaterThanOrEqual(WAIT_MS - 100);
    expect(first.isError).toBe(true);
    const [approval] = await pendingApprovals(key);
    expect(approval).toBeDefined();
    const id = approval?.id as string;
    expect(textOf(first)).toContain(id);
    expect(textOf(first)).toContain(`/api/v1/approvals/${id}`);
    expect(textOf(first)).toContain('/dashboard/');
    expect(first._meta).toEqual({ 'dev.agentwarden/approval': { id, status: 'pending' } });
    expect(addCalls('{"a":4,"b":4}')).toBe(0);

    expect((await decide(key, id, 'approved')).status).toBe(200);
    const retried = await client.callTool({ name: 'add', arguments: { b: 4, a: 4 } }); // key order does not matter
    expect(retried.isError).toBeFalsy();
    expect(retried.structuredContent).toEqual({ sum: 8 });
    expect(addCalls('{"a":4,"b":4}')).toBe(1);
    // used once: the next identical call asks again
    expect((await pendingApprovals(key)).length).toBe(0);
  });

  it('never lets other arguments ride on an approval: they get an approval of their own and do not run', async () => {
    const { key, client } = await workspace();
    expect((await client.callTool({ name: 'add', arguments: { a: 10, b: 20 } })).isError).toBe(true);
    const [approval] = await pendingApprovals(key);
    const id = approval?.id as string;
    expect((await decide(key, id, 'approved')).status).toBe(200);
    // approved and unused, yet it authorises {a:10,b:20} only
    const swapped = await client.callTool({ name: 'add', arguments: { a: 20, b: 10 } });
    expect(swapped.isError).toBe(true);
    expect(textOf(swapped)).not.toContain(id);
    expect(addCalls('{"a":20,"b":10}')).toBe(0);
    const pending = await pendingApprovals(key);
    expect(pending.length).toBe(1);
    expect(pending[0]?.id).not.toBe(id);
    expect(pending[0]?.execution).toMatchObject({ arguments: { a: 20, b: 10 } });
    // the approved act still runs
    expect((await client.callTool({ name: 'add', arguments: { a: 10, b: 20 } })).structuredContent).toEqual({ sum: 30 });
  });

  it('answers a rejected approval as a denial, and does not forward the call', async () => {
    const { key, client } = await workspace();
    const call = client.callTool({ name: 'add', arguments: { a: 7, b: 7 } }, undefined, { timeout: 20_000 });
    const approval = await eventually(async () => (await pendingApprovals(key))[0]);
    expect((await decide(key, approval.id, 'rejected')).status).toBe(200);
    const result = await call;
    expect(result.isError).toBe(true);
    expect(textOf(result)).toContain(`approval ${approval.id} was rejected`);
    // retried: still refused by the rejection, no new approval asked for
    const again = await client.callTool({ name: 'add', arguments: { a: 7, b: 7 } });
    expect(again.isError).toBe(true);
    expect(textOf(again)).toContain('rejected');
    expect(addCalls('{"a":7,"b":7}')).toBe(0);
  });
});
