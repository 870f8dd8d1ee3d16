/**
 * Issue 35, attacks 4, 5 and 7, through the MCP gateway (an unmodified SDK client, or raw
 * HTTP) and the REST runtime, against an SDK-built upstream:
 * - 4: what an upstream sends is bounded per message (a JSON answer, each SSE event of a POST's
 *   stream or of the session's GET stream): past the limit Warden stops reading, answers a
 *   clear error and records `upstream_message_too_large`; the upstream session keeps working;
 * - 5: upstream sessions belong to one agent: an agent never sees state another agent left in
 *   an upstream session;
 * - 7: a call the client abandoned is recorded `cancelled`, its upstream outcome unknown, never
 *   `failed`.
 */
import { readFileSync } from 'node:fs';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectClient, eventually } from '../mcp-gateway/support.ts';
import { keyFor, useTestServer } from '../support/server.ts';
import { type BoundsUpstream, startBoundsUpstream } from './mcp-bounds-upstream.ts';

const spec = JSON.parse(readFileSync(new URL('../../spec/dist/openapi.json', import.meta.url), 'utf8'));
const ALL: string = spec.components.schemas.Permission.enum.join(',');
const LIMIT = 1024 * 1024;
const server = useTestServer({ egressAllowlist: ['127.0.0.1/32'], mcpMaxMessageBytes: LIMIT });
let upstream: BoundsUpstream;
let workspaces = 0;
const clients: Client[] = [];

beforeAll(async () => {
  upstream = await startBoundsUpstream();
});
afterAll(async () => {
  for (const client of clients) await client.close().catch(() => undefined);
  await upstream?.close();
});

interface Workspace {
  key: string;
  agentKeys: Record<string, string>;
  client: (agent?: string) => Promise<Client>;
  rest: (path: string, body: unknown, agent?: string) => Promise<{ status: number; body: any }>;
  outcomes: (tool: string) => Promise<{ context: Record<string, unknown>; agent: string }[]>;
}

/** A workspace with the upstream registered as `tools` (at `path`), these agents and policies. */
async function workspace(path: 'sse' | 'json' | 'sse-hugelist', agents = ['bot'], policies: unknown[] = []): Promise<Workspace> {
  const key = await keyFor(server, ALL, `bounds-${++workspaces}`);
  const api = (method: string, p: string, body?: unknown) => server.api(method as 'POST', p as '/agents', { key, body, unchecked: true });
  expect((await api('POST', '/mcp-servers', { name: 'tools', slug: 'tools', transport_url: `${upstream.url}/${path}` })).status).toBe(201);
  const agentKeys: Record<string, string> = {};
  for (const slug of agents) {
    agentKeys[slug] = `ak_bounds_${workspaces}_${slug}_${Math.random().toString(36).slice(2)}`;
    expect((await api('POST', '/agents', { name: slug, slug, provider: 'local', api_key: agentKeys[slug] })).status).toBe(201);
  }
  for (const policy of policies) expect((await api('POST', '/policies', policy)).status).toBe(201);
  const first = agents[0] as string;
  return {
    key,
    agentKeys,
    client: async (agent = first) => {
      const client = await connectClient(`${server.url}/mcp/tools`, { authorization: `Bearer ${agentKeys[agent]}` });
      clients.push(client);
      return client;
    },
    rest: (p, body, agent = first) =>
      server.api('POST', p as '/runtime/mcp/call', {
        key,
        headers: { 'x-warden-agent-key': agentKeys[agent] as string },
        body,
        unchecked: true,
      }),
    outcomes: async (tool) => {
      const audit = await server.api('GET', '/audit-logs', { key, query: { limit: 100 }, unchecked: true });
      return (audit.body.data as { context: Record<string, unknown>; agent: string; tool?: string }[]).filter(
        (e) => e.context.outcome !== undefined && (e.tool === tool || tool === '*'),
      );
    },
  };
}

const textOf = (result: object) =>
  (((result as { content?: unknown }).content as { text?: string }[] | undefined)?.[0]?.text ?? '') as string;
const TOO_LARGE = /exceeds? .*1048576 bytes|WARDEN_MCP_MAX_MESSAGE_BYTES/;

describe('attack 4: an upstream message larger than WARDEN_MCP_MAX_MESSAGE_BYTES', () => {
  for (const mode of ['sse', 'json'] as const) {
    it(`is cut short and answered as a tool error, the session kept (${mode} answers)`, { timeout: 60_000 }, async () => {
      const ws = await workspace(mode);
      const client = await ws.client();
      // under the limit, past the SSE peek: answered whole
      const fits = await client.callTool({ name: 'big', arguments: { bytes: 900_000 } });
      expect(fits.isError, textOf(fits).slice(0, 200)).toBeFalsy();
      expect(textOf(fits).length).toBe(900_000);
      const sessions = upstream.sessions();
      const cut = upstream.cut();
      const started = performance.now();
      const huge = await client.callTool({ name: 'big', arguments: { bytes: 16 * LIMIT } });
      expect(performance.now() - started).toBeLessThan(10_000);
      expect(huge.isError).toBe(true);
      expect(textOf(huge)).toMatch(TOO_LARGE);
      // Warden stopped reading: the upstream could not write its answer whole
      await eventually(() => (upstream.cut() > cut ? true : undefined));
      // the same upstream session serves the next call
      expect(textOf(await client.callTool({ name: 'big', arguments: { bytes: 10 } }))).toBe('x'.repeat(10));
      expect(upstream.sessions()).toBe(sessions);
      const failed = (await ws.outcomes('big')).filter((e) => e.context.outcome === 'failed');
      expect(failed).toHaveLength(1);
      expect(failed[0]?.context.reason).toBe('upstream_message_too_large');
    });
  }

  it("bounds each event of a POST's stream, whatever comes first, and the session's GET stream", { timeout: 60_000 }, async () => {
    const ws = await workspace('sse');
    const client = await ws.client();
    // a small log first: the response is not the stream's first event
    const late = await client.callTool({ name: 'log_then_big', arguments: { log: 10, bytes: 3 * LIMIT } });
    expect(late.isError).toBe(true);
    expect(textOf(late)).toMatch(TOO_LARGE);
    // an oversized log message before a small response: the stream is cut, the call fails
    const log = await client.callTool({ name: 'log_then_big', arguments: { log: 3 * LIMIT, bytes: 10 } });
    expect(log.isError).toBe(true);
    expect(textOf(log)).toMatch(TOO_LARGE);
    // many events, each under the limit, more than the limit in all: answered
    const many = await client.callTool({ name: 'log_then_big', arguments: { log: LIMIT / 2, bytes: LIMIT - 1000 } });
    expect(many.isError, textOf(many).slice(0, 200)).toBeFalsy();
    // the GET stream (the upstream's own messages) is cut; calls go on
    const cut = upstream.cut();
    expect(textOf(await client.callTool({ name: 'notify_big', arguments: { bytes: 3 * LIMIT } }))).toBe('notified');
    await eventually(() => (upstream.cut() > cut ? true : undefined));
    expect(textOf(await client.callTool({ name: 'big', arguments: { bytes: 10 } }))).toBe('x'.repeat(10));
  });

  it('is a JSON-RPC error for a listing and a 502 on the REST runtime', { timeout: 60_000 }, async () => {
    const huge = await workspace('sse-hugelist');
    await expect((await huge.client()).listTools()).rejects.toThrow(TOO_LARGE);
    const discover = await huge.rest('/runtime/mcp/discover', { server: 'tools' });
    expect(discover.status).toBe(502);
    expect(discover.body.error.code).toBe('discovery_failed');
    expect(discover.body.error.message).toMatch(TOO_LARGE);

    for (const mode of ['sse', 'json'] as const) {
      const ws = await workspace(mode);
      const call = await ws.rest('/runtime/mcp/call', { server: 'tools', tool: 'big', arguments: { bytes: 3 * LIMIT } });
      expect(call.status).toBe(502);
      expect(call.body.error.code).toBe('call_failed');
      expect(call.body.error.message).toMatch(TOO_LARGE);
      const execute = await ws.rest('/runtime/execute', {
        input: { action: 'mcp.call' },
        execution: { mode: 'mcp_proxy', server: 'tools', tool: 'big', arguments: { bytes: 3 * LIMIT } },
      });
      expect(execute.status).toBe(502);
      expect(execute.body.error.code).toBe('execution_failed');
      const reasons = (await ws.outcomes('big')).map((e) => `${e.context.outcome}:${e.context.reason}`);
      expect(reasons).toEqual(['failed:upstream_message_too_large', 'failed:upstream_message_too_large']);
      const fine = await ws.rest('/runtime/mcp/call', { server: 'tools', tool: 'big', arguments: { bytes: 10 } });
      expect(fine.status).toBe(200);
    }
  });
});

describe('attack 5: upstream sessions belong to one agent', () => {
  it('an agent does not see what another agent left in an upstream session, on any edge', { timeout: 60_000 }, async () => {
    const ws = await workspace(
      'sse',
      ['alice', 'bob'],
      [{ name: 'Alice never notes', rules: [{ match: { agent: ['alice'], tool: ['set_note'] }, effect: 'block' }] }],
    );
    const bob = await ws.client('bob');
    expect(textOf(await bob.callTool({ name: 'set_note', arguments: { text: "bob's secret" } }))).toBe('noted');
    const alice = await ws.client('alice');
    const blocked = await alice.callTool({ name: 'set_note', arguments: { text: 'alice' } });
    expect(blocked.isError).toBe(true);
    expect(textOf(await alice.callTool({ name: 'get_note', arguments: {} }))).toBe('(none)');
    const aliceRest = await ws.rest('/runtime/mcp/call', { server: 'tools', tool: 'get_note', arguments: {} }, 'alice');
    expect(aliceRest.body.data.execution.content[0].text).toBe('(none)');
    // the agent's own session (the REST runtime's) is apart from the session bob's MCP client keeps; it is bob's on every call
    const bobRest = await ws.rest('/runtime/mcp/call', { server: 'tools', tool: 'get_note', arguments: {} }, 'bob');
    expect(bobRest.body.data.execution.content[0].text).toBe('(none)');
    expect((await ws.rest('/runtime/mcp/call', { server: 'tools', tool: 'set_note', arguments: { text: 'bob rest' } }, 'bob')).status).toBe(
      200,
    );
    const bobAgain = await ws.rest('/runtime/mcp/call', { server: 'tools', tool: 'get_note', arguments: {} }, 'bob');
    expect(bobAgain.body.data.execution.content[0].text).toBe('bob rest');
    expect(textOf(await bob.callTool({ name: 'get_note', arguments: {} }))).toBe("bob's secret");
    expect(
      (await ws.rest('/runtime/mcp/call', { server: 'tools', tool: 'get_note', arguments: {} }, 'alice')).body.data.execution.content[0]
        .text,
    ).toBe('(none)');
    // a governed session is a session of its own
    const opened = await ws.rest('/runtime/mcp/session', { server: 'tools' }, 'bob');
    expect(opened.status).toBe(200);
    const inSession = await ws.rest(
      '/runtime/mcp/call',
      { server: 'tools', tool: 'get_note', arguments: {}, session_id: opened.body.data.session_id },
      'bob',
    );
    expect(inSession.body.data.execution.content[0].text).toBe('(none)');
  });
});

describe('attack 7: a call the client abandons', () => {
  const post = (ws: Workspace, body: unknown, signal: AbortSignal) =>
    fetch(`${server.url}/mcp/tools`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${ws.agentKeys.bot}`,
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        'mcp-protocol-version': '2025-06-18',
      },
      body: JSON.stringify(body),
      signal,
    });

  for (const [how, meta] of [
    ['a plain tools/call', undefined],
    ['a tools/call that asks for progress (SSE)', { progressToken: 7 }],
  ] as const) {
    it(`is recorded cancelled, its upstream outcome unknown, never failed (${how})`, { timeout: 60_000 }, async () => {
      const ws = await workspace('sse');
      const tag = `slow-${workspaces}`;
      const abort = new AbortController();
      const call = post(
        ws,
        {
          jsonrpc: '2.0',
          id: 1,
          method: 'tools/call',
          params: { name: 'slow', arguments: { ms: 1_500, tag }, ...(meta ? { _meta: meta } : {}) },
        },
        abort.signal,
      ).then(async (res) => res.text());
      // the call is on its way upstream once the decision is recorded
      await eventually(async () => ((await ws.outcomes('*')).length > 0 || (await decided(ws)) ? true : undefined));
      await new Promise((resolve) => setTimeout(resolve, 200));
      abort.abort();
      await expect(call).rejects.toThrow();
      const [outcome] = await eventually(async () => {
        const events = await ws.outcomes('slow');
        return events.length > 0 ? events : undefined;
      });
      expect(outcome?.context.outcome).toBe('cancelled');
      expect(outcome?.context.upstream_outcome).toBe('unknown');
      // the upstream did run it to its end
      await eventually(() => (upstream.finished().includes(tag) ? true : undefined));
      expect((await ws.outcomes('slow')).map((e) => e.context.outcome)).toEqual(['cancelled']);
    });
  }

  async function decided(ws: Workspace): Promise<boolean> {
    const audit = await server.api('GET', '/audit-logs', { key: ws.key, query: { limit: 10 }, unchecked: true });
    return (audit.body.data as { tool?: string }[]).some((e) => e.tool === 'slow');
  }
});
