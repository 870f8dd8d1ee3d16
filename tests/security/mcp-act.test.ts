/**
 * MCP operations through the gateway are decided on, and approvals bound to, the whole act
 * in the form it is sent (issue 35, attacks 1 and 3, and the tools/list finding), through an
 * unmodified SDK Client:
 * - resources/read: the URI is normalised by its scheme's rules before it is decided, and the
 *   upstream receives exactly that form; a block on `file:///secret*` holds against every
 *   spelling an upstream would resolve to the same file;
 * - prompts/get: an approval binds the prompt's arguments, and the approver sees them;
 * - tools/list: a tool is hidden only when policy refuses every call to it.
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer, type Server as HttpServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { McpError } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { connectClient } from '../mcp-gateway/support.ts';
import { keyFor, useTestServer } from '../support/server.ts';

const spec = JSON.parse(readFileSync(new URL('../../spec/dist/openapi.json', import.meta.url), 'utf8'));
const ALL: string = spec.components.schemas.Permission.enum.join(',');
const server = useTestServer({ egressAllowlist: ['127.0.0.1/32'], mcpApprovalWaitMs: 500 });

/**
 * A stateless SDK upstream that resolves resource URIs as SDK servers do (WHATWG URL: scheme
 * and host lower-cased, `./` and `..` resolved, `localhost` dropped from file URLs) and keeps
 * the raw params of every request it is sent.
 */
interface ActUpstream {
  url: string;
  /** `method params-JSON` of every request received, in order. */
  received: () => string[];
  close: () => Promise<void>;
}

function buildUpstream(received: string[]): McpServer {
  const upstream = new McpServer({ name: 'act-upstream', version: '1.0.0' });
  upstream.registerResource('secret', 'file:///secret.txt', { mimeType: 'text/plain' }, async (uri) => ({
    contents: [{ uri: uri.href, text: 'the secret' }],
  }));
  upstream.registerResource('public', 'file:///public.txt', { mimeType: 'text/plain' }, async (uri) => ({
    contents: [{ uri: uri.href, text: 'public' }],
  }));
  upstream.registerPrompt('run_sql', { description: 'Runs SQL', argsSchema: { sql: z.string() } }, ({ sql }) => {
    received.push(`ran ${sql}`);
    return { messages: [{ role: 'user', content: { type: 'text', text: `ran: ${sql}` } }] };
  });
  upstream.registerTool('add', { description: 'Adds', inputSchema: { a: z.number(), b: z.number() } }, async ({ a, b }) => ({
    content: [{ type: 'text', text: String(a + b) }],
  }));
  upstream.registerTool('nuke', { description: 'Never' }, async () => ({ content: [{ type: 'text', text: 'boom' }] }));
  upstream.registerTool('ping', { description: 'Pong' }, async () => ({ content: [{ type: 'text', text: 'pong' }] }));
  return upstream;
}

async function readJson(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  const text = Buffer.concat(chunks).toString('utf8');
  return text ? JSON.parse(text) : undefined;
}

async function startActUpstream(): Promise<ActUpstream> {
  const received: string[] = [];
  const http: HttpServer = createServer(async (req, res) => {
    try {
      if (req.method !== 'POST') {
        res.writeHead(405).end();
        return;
      }
      const body = await readJson(req);
      for (const message of (Array.isArray(body) ? body : [body]) as { method?: string; params?: unknown }[])
        if (message?.method && !message.method.startsWith('notifications/') && message.method !== 'initialize')
          received.push(`${message.method} ${JSON.stringify(message.params ?? {})}`);
      const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
      res.on('close', () => void transport.close());
      await buildUpstream(received).connect(transport);
      await transport.handleRequest(req, res, body);
    } catch (error) {
      if (!res.headersSent) res.writeHead(500).end(String(error));
    }
  });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  const { port } = http.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    received: () => [...received],
    close: async () => {
      http.closeAllConnections();
      await new Promise<void>((resolve) => http.close(() => resolve()));
    },
  };
}

let upstream: ActUpstream;
const clients: Client[] = [];
let workspaces = 0;

beforeAll(async () => {
  upstream = await startActUpstream();
});
afterAll(async () => {
  for (const client of clients) await client.close().catch(() => undefined);
  await upstream?.close();
});

interface Workspace {
  key: string;
  /** A client of agent `bot` on `/mcp/acts`. */
  client: Client;
  /** A client of agent `bot` on the aggregate `/mcp`. */
  aggregate: Client;
}

async function workspace(rules: unknown[]): Promise<Workspace> {
  const key = await keyFor(server, ALL, `mcp-act-${++workspaces}`);
  const agentKey = `ak_mcp_act_${workspaces}_${Math.random().toString(36).slice(2)}`;
  const post = (path: string, body: unknown) => server.api('POST', path as '/agents', { key, body, unchecked: true });
  expect((await post('/mcp-servers', { name: 'Acts', slug: 'acts', transport_url: upstream.url })).status).toBe(201);
  expect((await post('/agents', { name: 'Bot', slug: 'bot', provider: 'local', api_key: agentKey })).status).toBe(201);
  expect((await post('/policies', { name: 'Acts', rules })).status).toBe(201);
  const headers = { authorization: `Bearer ${agentKey}` };
  const client = await connectClient(`${server.url}/mcp/acts`, headers);
  const aggregate = await connectClient(`${server.url}/mcp`, headers);
  clients.push(client, aggregate);
  return { key, client, aggregate };
}

/** The JSON-RPC error a promise rejects with (fails the test when it resolves). */
async function rpcError(promise: Promise<unknown>): Promise<McpError> {
  const outcome = await promise.then(
    (value) => ({ value }),
    (error: unknown) => ({ error }),
  );
  if (!('error' in outcome)) throw new Error(`expected a JSON-RPC error, got ${JSON.stringify(outcome.value)}`);
  expect(outcome.error).toBeInstanceOf(McpError);
  // the code once: `MCP error <code>: ` is the client SDK's own prefix, never also in what Warden sends
  expect((outcome.error as McpError).message.match(/MCP error -?\d+/g)).toHaveLength(1);
  return outcome.error as McpError;
}

const reads = () => upstream.received().filter((line) => line.startsWith('resources/read '));
const readUris = () => reads().map((line) => (JSON.parse(line.slice('resources/read '.length)) as { uri: string }).uri);

describe('resources/read is decided on the URI in the form it is sent (attack 1)', { timeout: 60_000 }, () => {
  const blockSecret = [{ match: { action: ['mcp.resources.read'], resource: ['file:///secret*'] }, effect: 'block' }];
  let ws: Workspace;
  beforeAll(async () => {
    ws = await workspace(blockSecret);
  });

  // every spelling an upstream resolves to file:///secret.txt
  const spellings = [
    'file:///secret.txt',
    'FILE:///secret.txt',
    'File:///secret.txt',
    'file:///./secret.txt',
    'file://localhost/secret.txt',
    'file://LOCALHOST/secret.txt',
    'file:/secret.txt',
    'file:///%73ecret.txt',
    'file:///%73%65%63%72%65%74.txt',
    'file:///public/../secret.txt',
    'file:///a/b/../../secret.txt',
    'file:///%2e/secret.txt',
    'file:///%2E%2E/secret.txt',
    'file:///x/%2e%2e/secret.txt',
    'file:////secret.txt',
    'FILE://localhost/./x/.././secret.txt',
  ];
  for (const uri of spellings)
    it(`refuses ${uri}, on a server's endpoint and on the aggregate`, async () => {
      const before = reads().length;
      const error = await rpcError(ws.client.readResource({ uri }));
      expect(error.code).toBe(-32003);
      expect(error.message).toContain("policy 'Acts'");
      const viaAggregate = await rpcError(ws.aggregate.readResource({ uri: `acts__${uri}` }));
      expect(viaAggregate.code).toBe(-32003);
      expect(reads().length).toBe(before);
    });

  // encoded separators, backslashes and control characters: refused as invalid params, never sent
  const refused = [
    'file:///public%2F..%2Fsecret.txt',
    'file:///public%2f..%2fsecret.txt',
    'file:///public%5C..%5Csecret.txt',
    'file:///public\\..\\secret.txt',
    'file:///secret.txt%00',
    'file:///secret.txt%0A',
    'file:///secret\n.txt',
    'file:///secret\t.txt',
    'file:///%zz',
    ' file:///secret.txt',
    'file:///secret.txt ',
    'secret.txt',
  ];
  for (const uri of refused)
    it(`refuses ${JSON.stringify(uri)} as invalid params`, async () => {
      const before = reads().length;
      const error = await rpcError(ws.client.readResource({ uri }));
      expect(error.code).toBe(-32602);
      expect(error.message).toMatch(/resource URI/i);
      expect(reads().length).toBe(before);
    });

  it('sends the upstream exactly the normalised URI it decided on', async () => {
    const cases: [string, string][] = [
      ['FILE://LOCALHOST/./x/../public.txt', 'file:///public.txt'],
      ['file:///%70ublic.txt', 'file:///public.txt'],
      ['file:/public.txt', 'file:///public.txt'],
    ];
    for (const [sent, normalised] of cases) {
      const before = readUris().length;
      const result = await ws.client.readResource({ uri: sent });
      expect(result.contents[0]).toMatchObject({ text: 'public' });
      expect(readUris().slice(before)).toEqual([normalised]);
    }
    // what the audit log records is the normalised URI too
    const events = await server.api('GET', '/audit-logs', {
      key: ws.key,
      query: { action: 'mcp.resources.read', limit: 100 },
      unchecked: true,
    });
    const resources = (events.body.data as { resource: string | null }[]).map((e) => e.resource);
    expect(resources).toContain('file:///public.txt');
    expect(resources).not.toContain('FILE://LOCALHOST/./x/../public.txt');
    expect(resources.filter((r) => r?.includes('secret')).every((r) => r === 'file:///secret.txt')).toBe(true);
  });

  it('does not forward the client\u2019s _meta to the upstream (it is not part of the act)', async () => {
    const before = readUris().length;
    await ws.client.request(
      { method: 'resources/read', params: { uri: 'file:///public.txt', _meta: { 'example.dev/x': 1 } } },
      (await import('@modelcontextprotocol/sdk/types.js')).ReadResourceResultSchema,
    );
    const [line] = reads().slice(before);
    expect(JSON.parse((line as string).slice('resources/read '.length))).toEqual({ uri: 'file:///public.txt' });
  });
});

describe('prompts/get approvals bind the arguments (attack 3)', { timeout: 60_000 }, () => {
  const askForSql = [{ match: { action: ['mcp.prompts.get'], resource: ['run_sql'] }, effect: 'require_approval' }];
  const pending = async (key: string) =>
    (await server.api('GET', '/approvals', { key, query: { status: 'pending' }, unchecked: true })).body.data as {
      id: string;
      execution: Record<string, unknown> | null;
    }[];
  const approve = (key: string, id: string) =>
    server.api('PATCH', `/approvals/${id}` as '/approvals/{id}', { key, body: { status: 'approved' }, unchecked: true });
  const ran = () => upstream.received().filter((line) => line.startsWith('ran '));

  for (const endpoint of ['client', 'aggregate'] as const)
    it(`an approval of run_sql {sql:"select 1"} does not authorise {sql:"drop table users"} (${endpoint})`, async () => {
      const ws = await workspace(askForSql);
      const client = ws[endpoint];
      const name = endpoint === 'client' ? 'run_sql' : 'acts__run_sql';
      const first = await rpcError(client.getPrompt({ name, arguments: { sql: 'select 1' } }));
      expect(first.code).toBe(-32003);
      const [approval] = await pending(ws.key);
      expect(approval).toBeDefined();
      const id = approval?.id as string;
      expect(first.data).toMatchObject({ approval_id: id });
      // the approver is shown the whole act: method, prompt and arguments
      expect(approval?.execution).toMatchObject({
        mode: 'mcp_proxy',
        server: 'acts',
        method: 'prompts/get',
        prompt: 'run_sql',
        arguments: { sql: 'select 1' },
      });
      expect((await approve(ws.key, id)).status).toBe(200);

      const before = ran().length;
      const swapped = await rpcError(client.getPrompt({ name, arguments: { sql: 'drop table users' } }));
      expect(swapped.code).toBe(-32003);
      expect((swapped.data as { approval_id: string }).approval_id).not.toBe(id);
      expect(ran().slice(before)).toEqual([]);
      const asked = await pending(ws.key);
      expect(asked.map((a) => a.execution?.arguments)).toEqual([{ sql: 'drop table users' }]);

      // the approved act runs, once
      const approved = await client.getPrompt({ name, arguments: { sql: 'select 1' } });
      expect(approved.messages[0]?.content).toMatchObject({ text: 'ran: select 1' });
      expect(ran().slice(before)).toEqual(['ran select 1']);
    });

  it('secret-looking arguments are shown redacted; the audit log records the prompt, its arguments redacted and their digest', async () => {
    const ws = await workspace([{ match: { action: ['mcp.prompts.get'] }, effect: 'require_approval' }]);
    await rpcError(ws.client.getPrompt({ name: 'run_sql', arguments: { sql: 'select 2', api_key: 'sk-live-123' } as never }));
    const [approval] = await pending(ws.key);
    expect(approval?.execution?.arguments).toEqual({ sql: 'select 2', api_key: '[redacted]' });
    expect(JSON.stringify(approval)).not.toContain('sk-live-123');
    const events = await server.api('GET', '/audit-logs', { key: ws.key, query: { action: 'mcp.prompts.get' }, unchecked: true });
    const [event] = events.body.data as { resource: string; context: { execution: Record<string, unknown> } }[];
    expect(event?.resource).toBe('run_sql');
    expect(event?.context.execution).toMatchObject({ method: 'prompts/get', prompt: 'run_sql' });
    expect(event?.context.execution.arguments).toEqual({ sql: 'select 2', api_key: '[redacted]' });
    // the digest is of what was sent, secret included: it still proves which arguments were decided on
    expect(event?.context.execution.arguments_sha256).toBe(
      createHash('sha256').update('{"api_key":"sk-live-123","sql":"select 2"}').digest('hex'),
    );
    expect(JSON.stringify(event)).not.toContain('sk-live-123');
  });

  it('a workspace that keeps digests only (audit_mcp_arguments: digest) records no arguments; the change is audited', async () => {
    const ws = await workspace([{ match: { action: ['mcp.*'] }, effect: 'allow' }]);
    const patch = (body: unknown) => server.api('PATCH', '/settings', { key: ws.key, body, unchecked: true });
    expect((await patch({ audit_mcp_arguments: 'everything' })).status).toBe(400);
    const set = await patch({ audit_mcp_arguments: 'digest' });
    expect(set.status).toBe(200);
    expect(set.body.data.audit_mcp_arguments).toBe('digest');
    await ws.client.getPrompt({ name: 'run_sql', arguments: { sql: 'select 4' } });
    const events = (await server.api('GET', '/audit-logs', { key: ws.key, unchecked: true })).body.data as {
      action: string;
      context: Record<string, unknown> & { execution?: Record<string, unknown> };
    }[];
    const prompt = events.find((e) => e.action === 'mcp.prompts.get' && e.context.outcome === undefined);
    expect(prompt?.context.execution?.arguments).toBeUndefined();
    expect(prompt?.context.execution?.arguments_bytes).toBeUndefined();
    expect(prompt?.context.execution?.arguments_sha256).toBe(createHash('sha256').update('{"sql":"select 4"}').digest('hex'));
    expect(JSON.stringify(events)).not.toContain('select 4');
    const changed = events.find((e) => e.action === 'settings.updated');
    expect(changed?.context).toMatchObject({ fields: ['audit_mcp_arguments'], audit_mcp_arguments: 'digest' });
  });

  it('arguments over the audit bound are recorded by size and digest only; an outcome does not repeat them', async () => {
    const ws = await workspace([{ match: { action: ['mcp.*'] }, effect: 'allow' }]);
    const sql = `select '${'x'.repeat(20_000)}'`;
    await ws.client.getPrompt({ name: 'run_sql', arguments: { sql } });
    await ws.client.callTool({ name: 'add', arguments: { a: 2, b: 3 } });
    const events = (await server.api('GET', '/audit-logs', { key: ws.key, unchecked: true })).body.data as {
      action: string;
      context: { execution?: Record<string, unknown>; outcome?: unknown };
    }[];
    const prompt = events.find((e) => e.action === 'mcp.prompts.get' && e.context.outcome === undefined);
    expect(prompt?.context.execution?.arguments).toBeUndefined();
    expect(prompt?.context.execution?.arguments_bytes).toBe(Buffer.byteLength(JSON.stringify({ sql })));
    expect(prompt?.context.execution?.arguments_sha256).toMatch(/^[0-9a-f]{64}$/);
    const add = events.filter((e) => e.context.execution?.tool === 'add');
    expect(add.find((e) => e.context.outcome === undefined)?.context.execution?.arguments).toEqual({ a: 2, b: 3 });
    const outcome = add.find((e) => e.context.outcome !== undefined);
    expect(outcome?.context.execution).toMatchObject({ tool: 'add' });
    expect(outcome?.context.execution?.arguments).toBeUndefined();
  });

  it('policy conditions read prompt arguments as execution.arguments', async () => {
    const ws = await workspace([
      { match: { action: ['mcp.prompts.get'] }, condition: 'execution.arguments.sql.startsWith("drop")', effect: 'block' },
    ]);
    expect((await ws.client.getPrompt({ name: 'run_sql', arguments: { sql: 'select 3' } })).messages).toHaveLength(1);
    expect((await rpcError(ws.client.getPrompt({ name: 'run_sql', arguments: { sql: 'drop table t' } }))).code).toBe(-32003);
  });
});

describe('tools/list hides a tool only when policy refuses every call to it', { timeout: 60_000 }, () => {
  const names = async (client: Client) => (await client.listTools()).tools.map((t) => t.name).sort();

  it('lists a tool whose block depends on the arguments, and still decides each call', async () => {
    const ws = await workspace([
      { match: { tool: ['add'] }, condition: 'execution.arguments.a > 10', effect: 'block' },
      { match: { tool: ['nuke'] }, effect: 'block' },
      { match: { tool: ['ping'] }, condition: 'execution.server == "acts"', effect: 'block' },
    ]);
    expect(await names(ws.client)).toEqual(['add']);
    expect(await names(ws.aggregate)).toEqual(['acts__add']);
    const allowed = await ws.client.callTool({ name: 'add', arguments: { a: 1, b: 2 } });
    expect(allowed.isError).toBeFalsy();
    const refused = await ws.client.callTool({ name: 'add', arguments: { a: 11, b: 2 } });
    expect(refused.isError).toBe(true);
  });

  it('keeps per-call conditions of every spelling from hiding a tool, and hides on conditions that hold for every call', async () => {
    const ws = await workspace([
      { match: { tool: ['add'] }, condition: 'has(execution.arguments.a) && execution["arguments"]["a"] > 10', effect: 'block' },
      { match: { tool: ['ping'] }, condition: 'input.tool == "ping"', effect: 'block' },
    ]);
    expect(await names(ws.client)).toEqual(['add', 'nuke']);
  });
});
