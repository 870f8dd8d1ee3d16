/**
 * Decisions bound to what actually runs (issue 21, cases 1–3), tried as an attacker holding a
 * key with runtime:execute would: a declared tool, action or resource never hides the executed
 * one, the audit log records what ran, and an approval authorises the one act it was asked for.
 * Each case failed before decisions saw the execution.
 */
import { createHash, randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { EvaluationInput, EvaluationRequest, ExecutionRequest, HttpExecution, McpCallRequest, PolicyRule } from '@warden/contract';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestMcpServer, type TestMcpServer } from '../support/mcp-server.ts';
import { keyFor, useTestServer } from '../support/server.ts';

const ALL =
  'agents:read,agents:write,policies:read,policies:write,approvals:read,approvals:write,approvals:decide,audit:read,runtime:evaluate,runtime:execute,mcp_servers:write';

const server = useTestServer({ egressAllowlist: ['127.0.0.1/32'] });
let mcp: TestMcpServer;
let upstream: Server;
let origin: string;
const received: Array<{ method: string; url: string; body: string }> = [];

beforeAll(async () => {
  mcp = await startTestMcpServer();
  upstream = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    received.push({ method: req.method ?? '', url: req.url ?? '', body: Buffer.concat(chunks).toString('utf8') });
    res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}');
  });
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
  origin = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`;
});

afterAll(async () => {
  upstream?.closeAllConnections();
  await new Promise<void>((resolve) => (upstream ? upstream.close(() => resolve()) : resolve()));
  await mcp?.close();
});

/** A workspace of its own with agent `bot`, MCP server `tools` and the given policy rules. */
async function workspace(rules: PolicyRule[]): Promise<string> {
  const slug = `w${randomUUID().slice(0, 8)}`;
  const key = await keyFor(server, ALL, slug);
  expect((await server.api('POST', '/agents', { key, body: { name: 'bot', slug: 'bot', provider: 'local' } })).status).toBe(201);
  expect((await server.api('POST', '/mcp-servers', { key, body: { name: 'tools', slug: 'tools', transport_url: mcp.url } })).status).toBe(
    201,
  );
  if (rules.length)
    expect((await server.api('POST', '/policies', { key, body: { name: 'guard', enabled: true, rules } })).status).toBe(201);
  return key;
}

const execute = (key: string, body: ExecutionRequest) => server.api('POST', '/runtime/execute', { key, body });
const evaluate = (key: string, body: EvaluationRequest) => server.api('POST', '/policy/evaluate', { key, body });
const mcpCall = (key: string, body: McpCallRequest) => server.api('POST', '/runtime/mcp/call', { key, body });
const approve = (key: string, id: string | null) =>
  server.api('PATCH', `/approvals/${id}`, { key, body: { status: 'approved' } }).then((res) => expect(res.status).toBe(200));

/**
 * The workspace's audit events of decisions and executions (its configuration changes, such as
 * the key's and the agent's creation, aside); `any`, since `context` (read deep below) is
 * free-form in the contract.
 */
async function auditEvents(key: string): Promise<any[]> {
  const res = await server.api('GET', '/audit-logs?limit=100', { key });
  expect(res.status).toBe(200);
  return res.body.data.filter((event) => event.source !== 'configuration');
}

describe('POST /runtime/execute (executeRuntime) decides on what runs', () => {
  it('refuses a declared input.tool that differs from execution.tool with 400, and calls nothing', async () => {
    const key = await workspace([{ match: { tool: ['delete_*'] }, effect: 'block' }]);
    const before = mcp.calls().length;
    const res = await execute(key, {
      input: { action: 'mcp.call', agent: 'bot', tool: 'echo' },
      execution: { mode: 'mcp_proxy', server: 'tools', tool: 'delete_everything', arguments: {} },
    });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('invalid_request');
    expect(mcp.calls().slice(before)).toEqual([]);
  });

  it('blocks an executed URL a resource rule covers, whatever resource the caller declares', async () => {
    const key = await workspace([{ match: { resource: [`${origin}/admin*`] }, effect: 'block' }]);
    const sent = received.length;
    const res = await execute(key, {
      input: { action: 'http.request', agent: 'bot', resource: `${origin}/public` },
      execution: { mode: 'http_proxy', method: 'POST', url: `${origin}/admin/users`, body: { name: 'eve' } },
    });
    expect(res.status).toBe(200);
    expect(res.body.data).toMatchObject({ allowed: false, execution: null, decision: { result: 'blocked' } });
    expect(received.length).toBe(sent);
  });

  it('blocks by the executed method and path, percent-encoded or not, and lets other paths through', async () => {
    const key = await workspace([
      { match: { method: ['POST', 'DELETE'], path: ['/admin*'] }, effect: 'block', message: 'no admin writes' },
    ]);
    for (const url of [`${origin}/admin/users`, `${origin}/%61dmin/users`, `${origin}/public/../admin/users`]) {
      const res = await execute(key, {
        input: { action: 'anything', agent: 'bot', resource: 'harmless' },
        execution: { mode: 'http_proxy', method: 'POST', url },
      });
      expect(res.body.data, url).toMatchObject({ allowed: false, decision: { message: 'no admin writes' } });
    }
    const sent = received.length;
    const ok = await execute(key, {
      input: { action: 'anything', agent: 'bot' },
      execution: { mode: 'http_proxy', method: 'GET', url: `${origin}/admin/users` },
    });
    expect(ok.body.data.allowed).toBe(true);
    expect(received.slice(sent)).toEqual([{ method: 'GET', url: '/admin/users', body: '' }]);
  });

  it('sends the URL in the normalised form the policy decided on', async () => {
    const key = await workspace([]);
    const sent = received.length;
    const res = await execute(key, {
      input: { action: 'read', agent: 'bot' },
      execution: { mode: 'http_proxy', method: 'GET', url: `${origin}/%7Euser/%3akeep?q=%2F` },
    });
    expect(res.body.data.allowed).toBe(true);
    expect(received.slice(sent).map((r) => r.url)).toEqual(['/~user/%3Akeep?q=%2F']);
  });

  it('blocks an MCP tool by a rule on mcp.call whatever action the caller declares', async () => {
    const key = await workspace([{ match: { action: ['mcp.call'], tool: ['delete_*'] }, effect: 'block' }]);
    const before = mcp.calls().length;
    for (const [path, body] of [
      [
        '/runtime/execute',
        {
          input: { action: 'read.only', agent: 'bot' },
          execution: { mode: 'mcp_proxy', server: 'tools', tool: 'delete_everything', arguments: {} },
        },
      ],
      ['/runtime/mcp/call', { server: 'tools', tool: 'delete_everything', arguments: {}, input: { action: 'read.only', agent: 'bot' } }],
    ] as const) {
      const res = await server.api('POST', path, { key, body });
      expect(res.status, path).toBe(200);
      expect(res.body.data.allowed, path).toBe(false);
    }
    expect(mcp.calls().slice(before)).toEqual([]);
  });

  it('matches rules on the MCP server and CEL conditions on the executed arguments', async () => {
    const key = await workspace([
      { match: { server: ['tools'], tool: ['add'] }, condition: 'execution.arguments.a > 100', effect: 'block', message: 'too big' },
    ]);
    const call = (a: number) => mcpCall(key, { server: 'tools', tool: 'add', arguments: { a, b: 1 }, input: { agent: 'bot' } });
    expect((await call(1)).body.data.allowed).toBe(true);
    expect((await call(1000)).body.data).toMatchObject({ allowed: false, decision: { message: 'too big' } });
  });

  it('lets CEL read the executed HTTP request and its body, never a declaration of it', async () => {
    const key = await workspace([
      { condition: 'execution != null && execution.method == "POST" && execution.body.amount > 100', effect: 'block' },
    ]);
    const pay = (amount: number) =>
      execute(key, {
        input: { action: 'pay', agent: 'bot', context: { amount: 1 } },
        execution: { mode: 'http_proxy', method: 'POST', url: `${origin}/pay`, body: { amount } },
      });
    expect((await pay(5)).body.data.allowed).toBe(true);
    expect((await pay(5000)).body.data.allowed).toBe(false);
  });
});

describe('audit events of governed executions record what ran', () => {
  it('records method, redacted URL, host, path and body digest on the decision and the outcome', async () => {
    const key = await workspace([]);
    const body = { amount: 3 };
    const res = await execute(key, {
      input: { action: 'pay', agent: 'bot', resource: 'payments' },
      execution: { mode: 'http_proxy', method: 'POST', url: `${origin}/pay?access_token=s3cr3t&page=2`, body },
    });
    expect(res.body.data.allowed).toBe(true);
    const events = await auditEvents(key);
    expect(events).toHaveLength(2);
    const expected = {
      mode: 'http_proxy',
      method: 'POST',
      url: `${origin}/pay?access_token=%5Bredacted%5D&page=2`,
      host: '127.0.0.1',
      path: '/pay',
      headers: { 'content-type': 'application/json' },
      body_sha256: createHash('sha256').update(JSON.stringify(body)).digest('hex'),
    };
    for (const event of events) expect(event.context.execution).toEqual(expected);
    expect(JSON.stringify(events)).not.toContain('s3cr3t');
    // without a declared resource, the recorded resource is the redacted URL
    await execute(key, {
      input: { action: 'read', agent: 'bot' },
      execution: { mode: 'http_proxy', method: 'GET', url: `${origin}/r?token=t0k3n` },
    });
    const all = await auditEvents(key);
    expect(all.filter((e) => e.action === 'read').map((e) => e.resource)).toEqual([
      `${origin}/r?token=%5Bredacted%5D`,
      `${origin}/r?token=%5Bredacted%5D`,
    ]);
    expect(JSON.stringify(all)).not.toContain('t0k3n');
  });

  it('records server, tool and arguments digest for MCP calls, blocked ones included', async () => {
    const key = await workspace([{ match: { tool: ['delete_*'] }, effect: 'block' }]);
    await mcpCall(key, { server: 'tools', tool: 'echo', arguments: { text: 'hi' }, input: { agent: 'bot' } });
    await mcpCall(key, { server: 'tools', tool: 'delete_everything', input: { agent: 'bot' } });
    const events = await auditEvents(key);
    const byTool = (tool: string) => events.filter((e) => e.context.execution?.tool === tool);
    expect(byTool('echo')).toHaveLength(2); // decision and outcome
    expect(byTool('echo')[0].context.execution).toMatchObject({ mode: 'mcp_proxy', server: 'tools', tool: 'echo' });
    expect(byTool('echo')[0].context.execution.arguments_sha256).toMatch(/^[0-9a-f]{64}$/);
    expect(byTool('delete_everything')).toHaveLength(1);
    expect(byTool('delete_everything')[0].result).toBe('blocked');
  });
});

describe('an approval authorises one exact act', () => {
  const refundRule: PolicyRule = { id: 'refunds', match: { action: ['refund.create'] }, effect: 'require_approval' };

  it('refuses an approval for amount 150 when the context says 9999999 (POST /policy/evaluate)', async () => {
    const key = await workspace([refundRule]);
    const input = { action: 'refund.create', agent: 'bot', resource: 'orders/1', context: { amount: 150 } };
    const asked = await evaluate(key, { input });
    expect(asked.body.data.result).toBe('approval_required');
    const id = asked.body.data.approval_id!;
    await approve(key, id);
    const inflated = await evaluate(key, { input: { ...input, context: { amount: 9999999 } }, approval_id: id });
    expect(inflated.status).toBe(400);
    expect(inflated.body.error.code).toBe('approval_invalid');
    const exact = await evaluate(key, { input: { ...input, context: { amount: 150 } }, approval_id: id });
    expect(exact.body.data).toMatchObject({ allowed: true, approval_id: id });
  });

  it('refuses an approval for GET /harmless on DELETE /admin/delete-all, and the approver saw the GET', async () => {
    const key = await workspace([{ match: { action: ['http.*'] }, effect: 'require_approval' }]);
    const harmless: { input: EvaluationInput; execution: HttpExecution } = {
      input: { action: 'http.call', agent: 'bot', resource: 'api' },
      execution: { mode: 'http_proxy', method: 'GET', url: `${origin}/harmless` },
    };
    const asked = await execute(key, harmless);
    const id = asked.body.data.decision.approval_id!;
    const shown = await server.api('GET', `/approvals/${id}`, { key });
    expect(shown.body.data.execution).toMatchObject({ mode: 'http_proxy', method: 'GET', url: `${origin}/harmless`, body: null });
    await approve(key, id);
    const sent = received.length;
    const swapped = await execute(key, {
      ...harmless,
      approval_id: id,
      execution: { mode: 'http_proxy', method: 'DELETE', url: `${origin}/admin/delete-all` },
    });
    expect(swapped.status).toBe(400);
    expect(swapped.body.error.code).toBe('approval_invalid');
    const withBody = await execute(key, { ...harmless, approval_id: id, execution: { ...harmless.execution, body: { x: 1 } } });
    expect(withBody.body.error.code).toBe('approval_invalid');
    expect(received.length).toBe(sent);
    const exact = await execute(key, { ...harmless, approval_id: id });
    expect(exact.body.data.allowed).toBe(true);
    expect(received.slice(sent).map((r) => `${r.method} ${r.url}`)).toEqual(['GET /harmless']);
  });

  it('refuses an approval for tool echo on delete_everything or other arguments, and shows the approver the arguments', async () => {
    const key = await workspace([{ match: { action: ['mcp.call'] }, effect: 'require_approval' }]);
    const echo: McpCallRequest = { server: 'tools', tool: 'echo', arguments: { text: 'hello' }, input: { agent: 'bot' } };
    const asked = await mcpCall(key, echo);
    const id = asked.body.data.decision!.approval_id!;
    const shown = await server.api('GET', `/approvals/${id}`, { key });
    expect(shown.body.data).toMatchObject({
      tool: 'echo',
      execution: { mode: 'mcp_proxy', server: 'tools', tool: 'echo', arguments: { text: 'hello' } },
    });
    await approve(key, id);
    const before = mcp.calls().length;
    for (const body of [
      { ...echo, tool: 'delete_everything', arguments: {}, approval_id: id },
      { ...echo, arguments: { text: 'rm -rf /' }, approval_id: id },
    ]) {
      const res = await mcpCall(key, body);
      expect(res.body.error?.code).toBe('approval_invalid');
    }
    const viaExecute = await execute(key, {
      input: { action: 'mcp.call', agent: 'bot' },
      execution: { mode: 'mcp_proxy', server: 'tools', tool: 'delete_everything', arguments: {} },
      approval_id: id,
    });
    expect(viaExecute.body.error?.code).toBe('approval_invalid');
    expect(mcp.calls().slice(before)).toEqual([]);
    const exact = await mcpCall(key, { ...echo, approval_id: id });
    expect(exact.body.data.allowed).toBe(true);
    expect(mcp.calls().slice(before)).toEqual(['echo']);
  });

  it('refuses an approval asked by POST /policy/evaluate for a proxied execution of the same input', async () => {
    const key = await workspace([{ match: { action: ['http.*'] }, effect: 'require_approval' }]);
    const input = { action: 'http.call', agent: 'bot', resource: `${origin}/harmless` };
    const id = (await evaluate(key, { input })).body.data.approval_id!;
    await approve(key, id);
    const res = await execute(key, { input, execution: { mode: 'http_proxy', method: 'GET', url: `${origin}/harmless` }, approval_id: id });
    expect(res.body.error.code).toBe('approval_invalid');
  });

  it('lets a POST /approvals approval that pins input and execution allow exactly that execution', async () => {
    const key = await workspace([{ match: { action: ['http.*'] }, effect: 'require_approval' }]);
    const input = { action: 'http.call', agent: 'bot' };
    const execution: HttpExecution = {
      mode: 'http_proxy',
      method: 'POST',
      url: `${origin}/refund`,
      body: { amount: 150, password: 'hunter2' },
    };
    const created = await server.api('POST', '/approvals', { key, body: { title: 'Refund 150', input, execution } });
    expect(created.status).toBe(201);
    expect(created.body.data.execution).toMatchObject({ method: 'POST', body: { amount: 150, password: '[redacted]' } });
    await approve(key, created.body.data.id);
    const other = await execute(key, { input, execution: { ...execution, body: { amount: 9999999 } }, approval_id: created.body.data.id });
    expect(other.body.error.code).toBe('approval_invalid');
    const exact = await execute(key, { input, execution, approval_id: created.body.data.id });
    expect(exact.body.data.allowed).toBe(true);
  });

  it('answers 400 agent_context_required for a POST /approvals input without an agent', async () => {
    const key = await workspace([]);
    const res = await server.api('POST', '/approvals', { key, body: { title: 'x', input: { action: 'refund.create' } } });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('agent_context_required');
  });
});
