/**
 * The gateway's protocol beyond tools, resources and prompts, through an unmodified SDK client:
 * logging/setLevel (`mcp.logging`), completion/complete (`mcp.completion`),
 * resources/subscribe and unsubscribe (`mcp.resources.subscribe`), log messages and questions
 * (`mcp.sampling`, `mcp.elicitation`) the upstream sends during a call, relayed on the call's
 * stream; each audited and blockable by policy. And DNS-rebinding protection: an Origin that
 * is not allowed is refused before anything else.
 */
import { readFileSync } from 'node:fs';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CreateMessageRequestSchema, ElicitRequestSchema, LoggingMessageNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ConformanceUpstream, startConformanceUpstream } from '../support/conformance-upstream.ts';
import { keyFor, useTestServer } from '../support/server.ts';

const spec = JSON.parse(readFileSync(new URL('../../spec/dist/openapi.json', import.meta.url), 'utf8'));
const ALL: string = spec.components.schemas.Permission.enum.join(',');
const server = useTestServer({ egressAllowlist: ['127.0.0.1/32'] });
let upstream: ConformanceUpstream;
let workspaces = 0;
const clients: Client[] = [];

beforeAll(async () => {
  // the 2025 methods forwarded as they are, to an upstream of their era (bridged-eras.test.ts: to a 2026-07-28 one)
  upstream = await startConformanceUpstream({ modern: false });
});
afterAll(async () => {
  for (const client of clients) await client.close().catch(() => undefined);
  await upstream?.close();
});

interface Workspace {
  key: string;
  agentKey: string;
  /** An SDK client on /mcp/ref that can sample and elicit (answers come from `answers`). */
  client: (answers?: { sampled?: () => void; elicited?: () => void }) => Promise<Client>;
  /** The audit events of an action, newest first. */
  events: (action: string) => Promise<{ result: string; agent: string; resource?: string; context: Record<string, unknown> }[]>;
}

/** A workspace of its own: the reference upstream registered as `ref`, agent `bot` with a key, these policies. */
async function workspace(policies: unknown[] = []): Promise<Workspace> {
  const key = await keyFor(server, ALL, `pm-${++workspaces}`);
  const agentKey = `ak_protocol_${workspaces}_${Math.random().toString(36).slice(2)}`;
  const api = (method: string, path: string, body: unknown) =>
    server.api(method as 'POST', path as '/agents', { key, body, unchecked: true });
  expect((await api('POST', '/mcp-servers', { name: 'Ref', slug: 'ref', transport_url: upstream.url })).status).toBe(201);
  expect((await api('POST', '/agents', { name: 'Bot', slug: 'bot', provider: 'local', api_key: agentKey })).status).toBe(201);
  for (const policy of policies) expect((await api('POST', '/policies', policy)).status).toBe(201);
  return {
    key,
    agentKey,
    client: async (answers = {}) => {
      const client = new Client({ name: 'protocol-test', version: '1.0.0' }, { capabilities: { sampling: {}, elicitation: {} } });
      client.setRequestHandler(CreateMessageRequestSchema, async () => {
        answers.sampled?.();
        return { role: 'assistant', content: { type: 'text', text: 'sampled answer' }, model: 'test-model' };
      });
      client.setRequestHandler(ElicitRequestSchema, async () => {
        answers.elicited?.();
        return { action: 'accept', content: { username: 'ada', email: 'ada@example.com' } };
      });
      await client.connect(
        new StreamableHTTPClientTransport(new URL(`${server.url}/mcp/ref`), {
          requestInit: { headers: { authorization: `Bearer ${agentKey}` } },
        }),
      );
      clients.push(client);
      return client;
    },
    events: async (action) => {
      const audit = await server.api('GET', '/audit-logs', { key, query: { action, limit: 20 }, unchecked: true });
      return audit.body.data;
    },
  };
}

const blocking = (action: string) => ({ name: `No ${action}`, rules: [{ match: { action: [action] }, effect: 'block' }] });
/** The text of a tool result (any answer to callTool). */
const text = (result: unknown) => (((result as { content?: unknown }).content ?? []) as { text?: string }[]).map((c) => c.text).join('');

describe('utilities, each a governed act', () => {
  it('forwards logging/setLevel, completion/complete, resources/subscribe and unsubscribe, and audits each', async () => {
    const ws = await workspace();
    const client = await ws.client();
    expect(await client.setLoggingLevel('warning')).toEqual({});
    const completed = await client.complete({
      ref: { type: 'ref/prompt', name: 'test_prompt_with_arguments' },
      argument: { name: 'arg1', value: 'pa' },
    });
    expect(completed.completion.values).toEqual(['paris', 'park', 'party']);
    await client.subscribeResource({ uri: 'test://watched-resource' });
    expect(upstream.subscriptions()).toContain('test://watched-resource');
    await client.unsubscribeResource({ uri: 'test://watched-resource' });
    expect(upstream.subscriptions()).not.toContain('test://watched-resource');

    const logging = await ws.events('mcp.logging');
    expect(logging.some((e) => e.result === 'allowed' && e.agent === 'bot' && e.resource === 'warning')).toBe(true);
    expect(logging.some((e) => e.context.outcome === 'succeeded')).toBe(true);
    expect((await ws.events('mcp.completion')).some((e) => e.resource === 'test_prompt_with_arguments')).toBe(true);
    expect(
      (await ws.events('mcp.resources.subscribe')).filter((e) => e.resource === 'test://watched-resource').length,
    ).toBeGreaterThanOrEqual(2);
  });

  it.each([
    ['mcp.logging', (c: Client) => c.setLoggingLevel('debug')],
    [
      'mcp.completion',
      (c: Client) =>
        c.complete({ ref: { type: 'ref/prompt', name: 'test_prompt_with_arguments' }, argument: { name: 'arg1', value: 'p' } }),
    ],
    ['mcp.resources.subscribe', (c: Client) => c.subscribeResource({ uri: 'test://static-text' })],
    ['mcp.resources.subscribe', (c: Client) => c.unsubscribeResource({ uri: 'test://static-text' })],
  ])('a policy blocks %s: a JSON-RPC error naming it, nothing sent upstream', async (action, send) => {
    const ws = await workspace([blocking(action)]);
    const client = await ws.client();
    const before = upstream.methods().length;
    const error = (await send(client).catch((refused: unknown) => refused)) as Error;
    expect(error).toMatchObject({ code: -32003, message: expect.stringContaining(`No ${action}`) });
    expect(error.message.match(/MCP error -?\d+/g)).toEqual(['MCP error -32003']); // the code once (the client SDK's prefix)
    expect(
      upstream
        .methods()
        .slice(before)
        .filter((m) => m !== 'notifications/initialized' && m !== 'initialize'),
    ).toEqual([]);
    expect((await ws.events(action)).some((e) => e.result === 'blocked')).toBe(true);
  });
});

describe('what the upstream sends during a call, relayed on its stream', () => {
  it("relays the tool's log messages to the calling client only, even with concurrent calls of another agent", async () => {
    const [a, b] = [await workspace(), await workspace()];
    const logs = { a: [] as unknown[], b: [] as unknown[] };
    const [clientA, clientB] = [await a.client(), await b.client()];
    clientA.setNotificationHandler(LoggingMessageNotificationSchema, (n) => void logs.a.push(n.params.data));
    clientB.setNotificationHandler(LoggingMessageNotificationSchema, (n) => void logs.b.push(n.params.data));
    const [logged, plain] = await Promise.all([
      clientA.callTool({ name: 'test_tool_with_logging', arguments: {} }),
      Promise.all([1, 2, 3].map(() => clientB.callTool({ name: 'test_simple_text', arguments: {} }))),
    ]);
    expect(text(logged)).toBe('Logged three messages');
    expect(plain.map(text)).toEqual(Array(3).fill('This is a simple text response for testing.'));
    expect(logs.a).toEqual(['Tool execution started', 'Tool processing data', 'Tool execution completed']);
    expect(logs.b).toEqual([]);
  });

  it('relays sampling and elicitation to the client and its answers back, each audited', async () => {
    const ws = await workspace();
    let sampled = 0;
    let elicited = 0;
    const client = await ws.client({ sampled: () => sampled++, elicited: () => elicited++ });
    expect(text(await client.callTool({ name: 'test_sampling', arguments: { prompt: 'hi' } }))).toBe('LLM response: sampled answer');
    expect(text(await client.callTool({ name: 'test_elicitation', arguments: { message: 'who?' } }))).toBe(
      'User response: action=accept, content={"username":"ada","email":"ada@example.com"}',
    );
    expect([sampled, elicited]).toEqual([1, 1]);
    expect((await ws.events('mcp.sampling')).some((e) => e.result === 'allowed' && e.context.outcome === 'succeeded')).toBe(true);
    expect((await ws.events('mcp.elicitation')).some((e) => e.context.elicitation_action === 'accept')).toBe(true);
  });

  it.each([
    ['mcp.sampling', 'test_sampling', { prompt: 'hi' }],
    ['mcp.elicitation', 'test_elicitation', { message: 'who?' }],
  ])('a policy blocks %s: the client is never asked, the upstream is told', async (action, tool, args) => {
    const ws = await workspace([blocking(action)]);
    let asked = 0;
    const client = await ws.client({ sampled: () => asked++, elicited: () => asked++ });
    const result = await client.callTool({ name: tool, arguments: args });
    expect(result.isError).toBe(true);
    expect(text(result)).toContain(`No ${action}`);
    expect(asked).toBe(0);
    expect((await ws.events(action)).some((e) => e.result === 'blocked')).toBe(true);
  });
});

describe("the client's answer to a relayed question", () => {
  const post = (agentKey: string, body: unknown, session?: string) =>
    fetch(`${server.url}/mcp/ref`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        authorization: `Bearer ${agentKey}`,
        ...(session ? { 'mcp-session-id': session, 'mcp-protocol-version': '2025-11-25' } : {}),
      },
      body: JSON.stringify(body),
    });

  it('is taken only from the agent that was asked: another agent answering the same id changes nothing', async () => {
    const [asked, other] = [await workspace(), await workspace()];
    // a session whose client can elicit: Warden declares to the upstream only what its client declared
    const initialized = await post(asked.agentKey, {
      jsonrpc: '2.0',
      id: 1,
      method: 'initialize',
      params: { protocolVersion: '2025-11-25', capabilities: { elicitation: {} }, clientInfo: { name: 'raw', version: '1' } },
    });
    const session = initialized.headers.get('mcp-session-id') ?? undefined;
    expect(session).toMatch(/^wms_/);
    await initialized.body?.cancel();
    const call = await post(
      asked.agentKey,
      {
        jsonrpc: '2.0',
        id: 7,
        method: 'tools/call',
        params: { name: 'test_elicitation', arguments: { message: 'who?' } },
      },
      session,
    );
    expect(call.headers.get('content-type')).toBe('text/event-stream');
    const reader = (call.body as ReadableStream<Uint8Array>)
      .pipeThrough(new TextDecoderStream() as unknown as ReadableWritablePair<string, Uint8Array>)
      .getReader();
    let received = '';
    const next = async () => {
      for (;;) {
        const event = /data: (.*)\n\n/.exec(received);
        if (event) {
          received = received.slice(event.index + event[0].length);
          return JSON.parse(event[1] as string);
        }
        const { value, done } = await reader.read();
        if (done) throw new Error('the stream ended');
        received += value;
      }
    };
    const question = await next();
    expect(question).toMatchObject({ method: 'elicitation/create', params: { message: 'who?' } });
    const answer = (name: string) => ({
      jsonrpc: '2.0',
      id: question.id,
      result: { action: 'accept', content: { username: name, email: `${name}@example.com` } },
    });
    await post(other.agentKey, answer('mallory'));
    expect((await post(asked.agentKey, answer('ada'))).status).toBe(202);
    expect(await next()).toMatchObject({ id: 7, result: { content: [{ text: expect.stringContaining('"username":"ada"') }] } });
  });
});

describe('DNS-rebinding protection (Origin)', () => {
  const initialize = (headers: Record<string, string>, agentKey: string) =>
    fetch(`${server.url}/mcp/ref`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        authorization: `Bearer ${agentKey}`,
        ...headers,
      },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method: 'initialize',
        params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'origin-test', version: '1' } },
      }),
    });

  it('refuses an Origin that is not allowed with 403 and a JSON-RPC error, before authentication', async () => {
    const ws = await workspace();
    for (const origin of [
      'http://evil.example.com',
      'https://localhost.evil.example',
      'http://127.0.0.1.nip.io',
      'null',
      'file://',
      'not a url',
    ]) {
      for (const key of [ws.agentKey, 'not-a-key']) {
        const res = await initialize({ origin }, key);
        expect(res.status, origin).toBe(403);
        expect(await res.json()).toMatchObject({ jsonrpc: '2.0', error: { code: -32000, data: { code: 'origin_not_allowed' } }, id: null });
      }
    }
  });

  it('serves requests without an Origin and loopback origins', async () => {
    const ws = await workspace();
    for (const headers of [
      {} as Record<string, string>,
      { origin: 'http://localhost:6274' },
      { origin: 'http://127.0.0.1:8080' },
      { origin: 'https://[::1]' },
    ])
      expect((await initialize(headers, ws.agentKey)).status, JSON.stringify(headers)).toBe(200);
  });
});
