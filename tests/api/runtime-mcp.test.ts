import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { type AddressInfo, connect } from 'node:net';
import type { McpCallRequest, McpDiscoverRequest, McpSessionRequest } from '@warden/contract';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestMcpServer, type TestMcpServer } from '../support/mcp-server.ts';
import { type ApiResponse, keyFor, type TestServer, useTestServer } from '../support/server.ts';

const spec = JSON.parse(readFileSync(new URL('../../spec/dist/openapi.json', import.meta.url), 'utf8'));
const PERMISSIONS: string[] = spec.components.schemas.Permission.enum;
const ALL = PERMISSIONS.join(',');
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const EVERYTHING = new URL('../../node_modules/@modelcontextprotocol/server-everything/dist/index.js', import.meta.url).pathname;

/** A free loopback port: listen on 0, note the port, close. */
async function freePort(): Promise<number> {
  const probe = createServer();
  await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
  const { port } = probe.address() as AddressInfo;
  await new Promise<void>((resolve) => probe.close(() => resolve()));
  return port;
}

const accepts = (port: number) =>
  new Promise<boolean>((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });

/** The published third-party server, in Streamable HTTP mode, on a loopback port. */
async function startEverything(): Promise<{ url: string; child: ChildProcess }> {
  const port = await freePort();
  const child = spawn(process.execPath, [EVERYTHING, 'streamableHttp'], {
    env: { ...process.env, PORT: String(port) },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    stderr += chunk.toString('utf8');
  });
  const deadline = Date.now() + 20_000;
  while (!(await accepts(port))) {
    if (child.exitCode !== null || Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`server-everything did not start on port ${port}: ${stderr}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return { url: `http://127.0.0.1:${port}/mcp`, child };
}

async function stopChild(child: ChildProcess | undefined): Promise<void> {
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 3_000);
  await exited;
  clearTimeout(timer);
}

const server = useTestServer({ egressAllowlist: ['127.0.0.1/32', '::1/128'] }); // loopback allow-listed
const strict = useTestServer(); // default egress rules
let mcp: TestMcpServer;
let everything: { url: string; child: ChildProcess } | undefined;

beforeAll(async () => {
  [mcp, everything] = await Promise.all([startTestMcpServer(), startEverything()]);
  const downPort = await freePort();
  for (const [slug, transport_url] of [
    ['tools', mcp.url],
    ['down', `http://127.0.0.1:${downPort}/mcp`],
    ['everything', everything.url],
  ] as const) {
    expect((await server.api('POST', '/mcp-servers', { body: { name: slug, slug, transport_url } })).status).toBe(201);
  }
  for (const body of [
    { name: 'MCP Bot', slug: 'mcp-bot' },
    { name: 'Other Bot', slug: 'other-bot' },
    { name: 'Narrow Bot', slug: 'narrow-bot', allowed_tools: ['echo', 'add'] },
  ]) {
    expect((await server.api('POST', '/agents', { body: { provider: 'local', ...body } })).status).toBe(201);
  }
  expect((await strict.api('POST', '/agents', { body: { name: 'MCP Bot', slug: 'mcp-bot', provider: 'local' } })).status).toBe(201);
  expect((await strict.api('POST', '/mcp-servers', { body: { name: 'tools', slug: 'tools', transport_url: mcp.url } })).status).toBe(201);
}, 120_000); // a child process and registrations on two servers: slow on a busy machine

afterAll(async () => {
  await stopChild(everything?.child);
  await mcp?.close();
});

const input = { agent: 'mcp-bot' };
const discover = (body: McpDiscoverRequest, options: { key?: string | null; target?: TestServer } = {}) =>
  (options.target ?? server).api('POST', '/runtime/mcp/discover', { body, key: options.key });
const call = (body: McpCallRequest, options: { key?: string | null; target?: TestServer } = {}) =>
  (options.target ?? server).api('POST', '/runtime/mcp/call', { body, key: options.key });
const session = (body: McpSessionRequest, options: { key?: string | null; target?: TestServer } = {}) =>
  (options.target ?? server).api('POST', '/runtime/mcp/session', { body, key: options.key });

/** A workspace of its own (so its policies stay its own) with the test MCP server and agent registered. */
let workspaces = 0;
async function freshWorkspace(): Promise<string> {
  const key = await keyFor(server, ALL, `mcp-${++workspaces}`);
  expect((await server.api('POST', '/mcp-servers', { key, body: { name: 'tools', slug: 'tools', transport_url: mcp.url } })).status).toBe(
    201,
  );
  expect((await server.api('POST', '/agents', { key, body: { name: 'MCP Bot', slug: 'mcp-bot', provider: 'local' } })).status).toBe(201);
  return key;
}

const toolNames = (res: ApiResponse) => res.body.data.tools.map((t: { name: string }) => t.name).sort();

describe('POST /runtime/mcp/discover (discoverMcpTools)', () => {
  it('lists the tools of the registered server with every field the upstream sent', async () => {
    const res = await discover({ server: 'tools', input });
    expect(res.status).toBe(200);
    expect(Object.keys(res.body.data).sort()).toEqual(['allowed', 'result', 'server', 'tools']);
    expect(res.body.data).toMatchObject({ allowed: true, result: 'allowed', server: 'tools' });
    expect(toolNames(res)).toEqual(['add', 'delete_everything', 'echo', 'fail']);
    const echo = res.body.data.tools.find((t) => t.name === 'echo')!;
    // as the SDK-built upstream lists it: it states that the tool runs without a task
    expect(Object.keys(echo).sort()).toEqual(['description', 'execution', 'inputSchema', 'name']);
    expect(echo.execution).toEqual({ taskSupport: 'forbidden' });
    expect(echo.description).toBe('Echoes its text');
    expect(echo.inputSchema).toMatchObject({ type: 'object', properties: { text: { type: 'string' } } });
  });

  it("leaves out the tools outside the agent's allowed_tools", async () => {
    const res = await discover({ server: 'tools', input: { agent: 'narrow-bot' } });
    expect(res.status).toBe(200);
    expect(toolNames(res)).toEqual(['add', 'echo']);
  });

  it('leaves out a tool a policy blocks', async () => {
    const key = await freshWorkspace();
    expect(
      (
        await server.api('POST', '/policies', {
          key,
          body: { name: 'No wipe', rules: [{ match: { tool: ['delete_everything'] }, effect: 'block' }] },
        })
      ).status,
    ).toBe(201);
    const res = await discover({ server: 'tools', input }, { key });
    expect(res.status).toBe(200);
    expect(res.body.data.allowed).toBe(true);
    expect(toolNames(res)).toEqual(['add', 'echo', 'fail']);
  });

  it('answers allowed false with no tools when discovery itself is blocked, and contacts no upstream', async () => {
    const key = await freshWorkspace();
    expect(
      (
        await server.api('POST', '/policies', {
          key,
          body: { name: 'No discovery', rules: [{ match: { action: ['mcp.discover'] }, effect: 'block' }] },
        })
      ).status,
    ).toBe(201);
    const requests = mcp.requests();
    const res = await discover({ server: 'tools', input }, { key });
    expect(res.status).toBe(200);
    expect(res.body.data).toEqual({ allowed: false, result: 'blocked', server: 'tools', tools: [] });
    expect(mcp.requests()).toBe(requests);
  });

  it('audits the discovery (source mcp)', async () => {
    const key = await freshWorkspace();
    expect((await discover({ server: 'tools', input }, { key })).status).toBe(200);
    const res = await server.api('GET', '/audit-logs?limit=100&action=mcp.discover', { key });
    expect(res.status).toBe(200);
    expect(res.body.data.length).toBeGreaterThanOrEqual(1);
    expect(res.body.data.every((e) => e.source === 'mcp' && e.agent === 'mcp-bot')).toBe(true);
  });

  it.each(['transport_url', 'url', 'upstream', 'endpoint'])(
    'answers 400 invalid_request for a body naming %s, and contacts no upstream',
    async (field) => {
      const requests = mcp.requests();
      const res = await server.api('POST', '/runtime/mcp/discover', {
        body: { server: 'tools', input, [field]: mcp.url },
        unchecked: true,
      });
      expect(res.status).toBe(400);
      expect(res.body.error.code).toBe('invalid_request');
      expect(mcp.requests()).toBe(requests);
    },
  );

  it('answers 404 mcp_server_not_found for an unknown server', async () => {
    const res = await discover({ server: 'no-such-server', input });
    expect(res.status).toBe(404);
    expect(res.body.error.code).toBe('mcp_server_not_found');
  });

  it('answers 502 discovery_failed when the upstream is down', async () => {
    const res = await discover({ server: 'down', input });
    expect(res.status).toBe(502);
    expect(res.body.error.code).toBe('discovery_failed');
  });

  it('answers 403 execution_target_denied when the registered URL is loopback and not allow-listed', async () => {
    const requests = mcp.requests();
    const res = await discover({ server: 'tools', input }, { target: strict });
    expect(res.status).toBe(403);
    expect(res.body.error.code).toBe('execution_target_denied');
    expect(mcp.requests()).toBe(requests);
  });

  it('answers 403 insufficient_permission without runtime:execute and 401 without a key', async () => {
    const key = await keyFor(server, PERMISSIONS.filter((p) => p !== 'runtime:execute' && p !== 'admin').join(','));
    const denied = await discover({ server: 'tools', input }, { key });
    expect(denied.status).toBe(403);
    expect(denied.body.error.code).toBe('insufficient_permission');
    const anonymous = await discover({ server: 'tools', input }, { key: null });
    expect(anonymous.status).toBe(401);
    expect(anonymous.body.error.code).toBe('unauthorized');
  });
});

describe('POST /runtime/mcp/call (callMcpTool)', () => {
  it('calls a tool and answers its content', async () => {
    const calls = mcp.calls().length;
    const res = await call({ server: 'tools', tool: 'echo', arguments: { text: 'hello upstream' }, input });
    expect(res.status).toBe(200);
    expect(res.body.data).toMatchObject({
      allowed: true,
      server: 'tools',
      tool: 'echo',
      execution: { content: [{ type: 'text', text: 'hello upstream' }], isError: false },
    });
    expect(res.body.data.decision).toMatchObject({ allowed: true, result: 'allowed' });
    expect(mcp.calls().slice(calls)).toEqual(['echo']);
  });

  it('answers a tool error as 200 with execution.isError true, not a 502', async () => {
    const res = await call({ server: 'tools', tool: 'fail', input });
    expect(res.status).toBe(200);
    expect(res.body.data).toMatchObject({
      allowed: true,
      tool: 'fail',
      execution: { isError: true, content: [{ type: 'text', text: 'it broke' }] },
    });
  });

  it('answers allowed false with execution null for a blocked tool, and never calls it', async () => {
    const key = await freshWorkspace();
    expect(
      (
        await server.api('POST', '/policies', {
          key,
          body: { name: 'No wipe', rules: [{ match: { tool: ['delete_everything'] }, effect: 'block', message: 'never' }] },
        })
      ).status,
    ).toBe(201);
    const calls = mcp.calls();
    const requests = mcp.requests();
    const res = await call({ server: 'tools', tool: 'delete_everything', input }, { key });
    expect(res.status).toBe(200);
    expect(res.body.data).toMatchObject({
      allowed: false,
      server: 'tools',
      tool: 'delete_everything',
      execution: null,
      decision: { result: 'blocked', message: 'never' },
    });
    expect(mcp.calls()).toEqual(calls);
    expect(mcp.requests()).toBe(requests);
  });

  it("refuses a tool outside the agent's allowed_tools", async () => {
    const calls = mcp.calls();
    const res = await call({ server: 'tools', tool: 'fail', input: { agent: 'narrow-bot' } });
    expect(res.status).toBe(200);
    expect(res.body.data).toMatchObject({ allowed: false, execution: null });
    expect(mcp.calls()).toEqual(calls);
  });

  it('answers 400 invalid_request when input.tool differs from tool, and calls nothing', async () => {
    const calls = mcp.calls();
    const res = await call({ server: 'tools', tool: 'echo', arguments: { text: 'x' }, input: { ...input, tool: 'delete_everything' } });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('invalid_request');
    expect(mcp.calls()).toEqual(calls);
  });

  it.each(['transport_url', 'url', 'upstream', 'endpoint'])('answers 400 invalid_request for a body naming %s', async (field) => {
    const requests = mcp.requests();
    const res = await server.api('POST', '/runtime/mcp/call', {
      body: { server: 'tools', tool: 'echo', arguments: { text: 'x' }, input, [field]: mcp.url },
      unchecked: true,
    });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('invalid_request');
    expect(mcp.requests()).toBe(requests);
  });

  it('answers 404 mcp_server_not_found for an unknown server', async () => {
    const res = await call({ server: 'no-such-server', tool: 'echo', input });
    expect(res.status).toBe(404);
    expect(res.body.error.code).toBe('mcp_server_not_found');
  });

  it('answers 502 call_failed when the upstream is down', async () => {
    const res = await call({ server: 'down', tool: 'echo', arguments: { text: 'x' }, input });
    expect(res.status).toBe(502);
    expect(res.body.error.code).toBe('call_failed');
  });

  it('answers 403 execution_target_denied when the registered URL is loopback and not allow-listed', async () => {
    const requests = mcp.requests();
    const res = await call({ server: 'tools', tool: 'echo', arguments: { text: 'x' }, input }, { target: strict });
    expect(res.status).toBe(403);
    expect(res.body.error.code).toBe('execution_target_denied');
    expect(mcp.requests()).toBe(requests);
  });
});

describe('POST /runtime/mcp/session (openMcpSession)', () => {
  it('opens a session that lives 30 minutes', async () => {
    const before = Date.now();
    const res = await session({ server: 'tools', input });
    expect(res.status).toBe(200);
    expect(res.body.data).toMatchObject({ allowed: true, server: 'tools' });
    expect(res.body.data.session_id).toMatch(UUID);
    const expires = new Date(res.body.data.expires_at!);
    expect(expires.toISOString()).toBe(res.body.data.expires_at);
    expect(expires.getTime()).toBeGreaterThanOrEqual(before + 30 * 60_000 - 5_000);
    expect(expires.getTime()).toBeLessThanOrEqual(Date.now() + 30 * 60_000 + 5_000);
  });

  it('serves calls and discovery that name the session, over one upstream connection', async () => {
    const opened = await session({ server: 'tools', input });
    const sessionId = opened.body.data.session_id!;
    const first = await call({ server: 'tools', tool: 'add', arguments: { a: 1, b: 2 }, input, session_id: sessionId });
    expect(first.status).toBe(200);
    expect(first.body.data.execution).toMatchObject({ content: [{ type: 'text', text: '3' }], isError: false });

    // A call reuses an open upstream session, the governed session's own or the one of this
    // workspace and server: one request upstream, no handshake.
    expect((await call({ server: 'tools', tool: 'echo', arguments: { text: 'warm' }, input })).status).toBe(200);
    let requests = mcp.requests();
    expect((await call({ server: 'tools', tool: 'echo', arguments: { text: 'alone' }, input })).status).toBe(200);
    expect(mcp.requests() - requests).toBe(1);
    requests = mcp.requests();
    const second = await call({ server: 'tools', tool: 'echo', arguments: { text: 'in session' }, input, session_id: sessionId });
    expect(second.status).toBe(200);
    expect(second.body.data.execution!.content).toEqual([{ type: 'text', text: 'in session' }]);
    expect(mcp.requests() - requests).toBe(1);

    const listed = await discover({ server: 'tools', input, session_id: sessionId });
    expect(listed.status).toBe(200);
    expect(toolNames(listed)).toContain('echo');
  });

  it.each([
    ['a random UUID', async () => ({ id: '00000000-0000-4000-8000-000000000000', agent: 'mcp-bot', key: undefined })],
    [
      "another agent's session",
      async () => ({ id: (await session({ server: 'tools', input })).body.data.session_id!, agent: 'other-bot', key: undefined }),
    ],
    [
      "another workspace's session",
      async () => ({
        id: (await session({ server: 'tools', input })).body.data.session_id!,
        agent: 'mcp-bot',
        key: await freshWorkspace(),
      }),
    ],
  ])('answers 404 session_not_found for %s, and calls nothing', async (_label, setup) => {
    const { id, agent, key } = await setup();
    expect(id).toMatch(UUID);
    const calls = mcp.calls();
    const res = await call({ server: 'tools', tool: 'echo', arguments: { text: 'x' }, input: { agent }, session_id: id }, { key });
    expect(res.status).toBe(404);
    expect(res.body.error.code).toBe('session_not_found');
    expect(mcp.calls()).toEqual(calls);
  });

  it('answers 404 session_not_found for a session on another server', async () => {
    const opened = await session({ server: 'tools', input });
    const res = await call({
      server: 'everything',
      tool: 'echo',
      arguments: { message: 'x' },
      input,
      session_id: opened.body.data.session_id!,
    });
    expect(res.status).toBe(404);
    expect(res.body.error.code).toBe('session_not_found');
  });

  it('answers 404 session_not_found once the session has expired', async () => {
    const opened = await session({ server: 'tools', input });
    const id = opened.body.data.session_id!;
    expect((await call({ server: 'tools', tool: 'echo', arguments: { text: 'x' }, input, session_id: id })).status).toBe(200);
    await sql`UPDATE mcp_sessions SET expires_at = now() - interval '1 minute' WHERE id = ${id}`.execute(server.database.db);
    const calls = mcp.calls();
    const res = await call({ server: 'tools', tool: 'echo', arguments: { text: 'x' }, input, session_id: id });
    expect(res.status).toBe(404);
    expect(res.body.error.code).toBe('session_not_found');
    expect(mcp.calls()).toEqual(calls);
  });

  it('answers allowed false with no session when a policy blocks it, and contacts no upstream', async () => {
    const key = await freshWorkspace();
    expect(
      (
        await server.api('POST', '/policies', {
          key,
          body: { name: 'No sessions', rules: [{ match: { action: ['mcp.session'] }, effect: 'block' }] },
        })
      ).status,
    ).toBe(201);
    const requests = mcp.requests();
    const res = await session({ server: 'tools', input }, { key });
    expect(res.status).toBe(200);
    expect(res.body.data).toEqual({ allowed: false, server: 'tools', session_id: null, expires_at: null });
    expect(mcp.requests()).toBe(requests);
  });

  it.each(['transport_url', 'url', 'upstream', 'endpoint'])('answers 400 invalid_request for a body naming %s', async (field) => {
    const requests = mcp.requests();
    const res = await server.api('POST', '/runtime/mcp/session', { body: { server: 'tools', input, [field]: mcp.url }, unchecked: true });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('invalid_request');
    expect(mcp.requests()).toBe(requests);
  });

  it('answers 404 mcp_server_not_found for an unknown server', async () => {
    const res = await session({ server: 'no-such-server', input });
    expect(res.status).toBe(404);
    expect(res.body.error.code).toBe('mcp_server_not_found');
  });

  it('answers 502 session_failed when the upstream is down', async () => {
    const res = await session({ server: 'down', input });
    expect(res.status).toBe(502);
    expect(res.body.error.code).toBe('session_failed');
  });

  it('answers 403 execution_target_denied when the registered URL is loopback and not allow-listed', async () => {
    const requests = mcp.requests();
    const res = await session({ server: 'tools', input }, { target: strict });
    expect(res.status).toBe(403);
    expect(res.body.error.code).toBe('execution_target_denied');
    expect(mcp.requests()).toBe(requests);
  });
});

describe('disabled MCP servers', () => {
  it('answers 404 mcp_server_not_found on discover, call and session once the server is disabled', async () => {
    const key = await freshWorkspace();
    expect((await discover({ server: 'tools', input }, { key })).status).toBe(200);
    const patched = await server.api('PATCH', '/mcp-servers/tools', { key, body: { enabled: false } });
    expect(patched.status).toBe(200);
    expect(patched.body.data.enabled).toBe(false);
    const requests = mcp.requests();
    for (const res of [
      await discover({ server: 'tools', input }, { key }),
      await call({ server: 'tools', tool: 'echo', arguments: { text: 'x' }, input }, { key }),
      await session({ server: 'tools', input }, { key }),
    ]) {
      expect(res.status).toBe(404);
      expect(res.body.error.code).toBe('mcp_server_not_found');
    }
    expect(mcp.requests()).toBe(requests);
  });
});

describe('@modelcontextprotocol/server-everything (a published third-party server)', () => {
  it('discovers its tools', async () => {
    const res = await discover({ server: 'everything', input });
    expect(res.status).toBe(200);
    expect(res.body.data).toMatchObject({ allowed: true, server: 'everything' });
    expect(toolNames(res)).toContain('echo');
    for (const tool of res.body.data.tools) {
      expect(typeof tool.name).toBe('string');
      expect(typeof tool.description).toBe('string');
      expect(tool.inputSchema).toMatchObject({ type: 'object' });
    }
  });

  it('calls its echo tool', async () => {
    const res = await call({ server: 'everything', tool: 'echo', arguments: { message: 'hi' }, input });
    expect(res.status).toBe(200);
    expect(res.body.data).toMatchObject({ allowed: true, server: 'everything', tool: 'echo', execution: { isError: false } });
    const texts = res.body.data.execution!.content.filter((c) => c.type === 'text').map((c) => c.text);
    expect(texts.join(' ')).toMatch(/\bhi\b/);
  });

  it('opens a session on it and calls through the session', async () => {
    const opened = await session({ server: 'everything', input });
    expect(opened.status).toBe(200);
    const res = await call({
      server: 'everything',
      tool: 'echo',
      arguments: { message: 'hi again' },
      input,
      session_id: opened.body.data.session_id!,
    });
    expect(res.status).toBe(200);
    expect(JSON.stringify(res.body.data.execution!.content)).toContain('hi again');
  });
});
