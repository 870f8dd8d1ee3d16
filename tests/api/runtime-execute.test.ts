import { readFileSync } from 'node:fs';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestMcpServer, type TestMcpServer } from '../support/mcp-server.ts';
import { keyFor, startTestServer, type TestServer } from '../support/server.ts';

const spec = JSON.parse(readFileSync(new URL('../../spec/dist/openapi.json', import.meta.url), 'utf8'));
const PERMISSIONS: string[] = spec.components.schemas.Permission.enum;
const RESULT_FIELDS = [
  'allowed',
  'action',
  'matched',
  'policy',
  'severity',
  'message',
  'result',
  'approval_id',
  'execution_proxy_required',
];
const HTTP_RESULT_FIELDS = ['mode', 'status', 'headers', 'body', 'body_encoding', 'truncated', 'duration_ms'];
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const FIVE_MIB = 5 * 1024 * 1024;
const BINARY = Buffer.from([0, 1, 2, 0xfe, 0xff, 0x80, 0x7f, 0x0a]);
const AGENT_KEY = 'proxy-agent-secret-key-0123456789';

interface Recorded {
  method: string;
  path: string;
  headers: IncomingHttpHeaders;
  rawHeaders: string[];
  body: string;
}

interface Upstream {
  origin: string;
  port: number;
  requests: Recorded[];
  connections: () => number;
  close: () => Promise<void>;
}

/** A loopback upstream of our own that records everything it receives. */
async function startUpstream(host = '127.0.0.1'): Promise<Upstream | null> {
  const requests: Recorded[] = [];
  let connections = 0;
  const server: Server = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const path = new URL(req.url ?? '/', 'http://upstream.invalid').pathname;
    requests.push({
      method: req.method ?? '',
      path,
      headers: req.headers,
      rawHeaders: req.rawHeaders,
      body: Buffer.concat(chunks).toString('utf8'),
    });
    res.on('error', () => undefined);
    switch (path) {
      case '/json':
        res
          .writeHead(200, { 'content-type': 'application/json; charset=utf-8', 'x-upstream': 'yes' })
          .end(JSON.stringify({ hello: 'world', n: [1, 2, 3] }));
        return;
      case '/text':
        res.writeHead(200, { 'content-type': 'text/plain; charset=utf-8' }).end('plain words');
        return;
      case '/binary':
        res.writeHead(200, { 'content-type': 'application/octet-stream' }).end(BINARY);
        return;
      case '/empty':
        res.writeHead(204).end();
        return;
      case '/created':
        res.writeHead(201, { 'content-type': 'application/json' }).end(JSON.stringify({ created: true }));
        return;
      case '/redirect':
        res.writeHead(302, { location: `http://${host}:${(server.address() as AddressInfo).port}/json` }).end();
        return;
      case '/large': {
        res.writeHead(200, { 'content-type': 'text/plain' });
        const block = Buffer.alloc(64 * 1024, 'a');
        let sent = 0;
        const pump = () => {
          while (sent < 6 * 1024 * 1024) {
            sent += block.length;
            if (!res.write(block)) return void res.once('drain', pump);
          }
          res.end();
        };
        pump();
        return;
      }
      case '/slow':
        // Never answers: the connection is dropped by Warden's timeout, or by close().
        return;
      case '/reset':
        req.socket.destroy();
        return;
      default:
        res.writeHead(404, { 'content-type': 'application/json' }).end(JSON.stringify({ error: 'nope' }));
    }
  });
  server.on('connection', () => {
    connections += 1;
  });
  const ok = await new Promise<boolean>((resolve) => {
    server.once('error', () => resolve(false));
    server.listen(0, host, () => resolve(true));
  });
  if (!ok) return null;
  const { port } = server.address() as AddressInfo;
  return {
    origin: `http://${host.includes(':') ? `[${host}]` : host}:${port}`,
    port,
    requests,
    connections: () => connections,
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** A loopback port with nothing listening on it. */
async function closedPort(): Promise<number> {
  const probe = createServer();
  await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
  const { port } = probe.address() as AddressInfo;
  await new Promise<void>((resolve) => probe.close(() => resolve()));
  return port;
}

let server: TestServer; // loopback allow-listed
let strict: TestServer; // default egress rules
let upstream: Upstream;
let upstream6: Upstream | null;
let mcp: TestMcpServer;

beforeAll(async () => {
  [server, strict, mcp] = await Promise.all([
    startTestServer({ egressAllowlist: ['127.0.0.1/32', '::1/128'] }),
    startTestServer(),
    startTestMcpServer(),
  ]);
  upstream = (await startUpstream()) as Upstream;
  upstream6 = await startUpstream('::1');
  for (const target of [server, strict]) {
    expect((await target.api('POST', '/agents', { body: { name: 'Proxy Bot', slug: 'proxy-bot', provider: 'local' } })).status).toBe(201);
  }
  expect(
    (await server.api('POST', '/agents', { body: { name: 'Keyed Bot', slug: 'keyed-bot', provider: 'local', api_key: AGENT_KEY } })).status,
  ).toBe(201);
  const policy = await server.api('POST', '/policies', {
    body: {
      name: 'Proxy rules',
      rules: [
        { match: { action: ['http.forbidden'] }, effect: 'block', severity: 'high', message: 'Not this one' },
        { match: { action: ['http.ask'] }, effect: 'require_approval', message: 'Ask a human' },
        { match: { tool: ['delete_everything'] }, effect: 'block', message: 'Too dangerous' },
      ],
    },
  });
  expect(policy.status).toBe(201);
  for (const target of [server, strict]) {
    const registered = await target.api('POST', '/mcp-servers', {
      body: { name: 'Upstream MCP', slug: 'upstream-mcp', transport_url: mcp.url },
    });
    expect(registered.status).toBe(201);
  }
  const down = await server.api('POST', '/mcp-servers', {
    body: { name: 'Down MCP', slug: 'down-mcp', transport_url: `http://127.0.0.1:${await closedPort()}/mcp` },
  });
  expect(down.status).toBe(201);
}, 120_000); // two servers on fresh databases: slow on a busy machine

afterAll(async () => {
  await upstream?.close();
  await upstream6?.close();
  await mcp?.close();
  await server?.close();
  await strict?.close();
});

const execute = (body: unknown, options: { key?: string | null; headers?: Record<string, string>; target?: TestServer } = {}) =>
  (options.target ?? server).api('POST', '/runtime/execute', { body, key: options.key, headers: options.headers });

const http = (path: string, extra: Record<string, unknown> = {}, input: Record<string, unknown> = {}) => ({
  input: { action: 'http.get', agent: 'proxy-bot', ...input },
  execution: { mode: 'http_proxy', method: 'GET', url: `${upstream.origin}${path}`, ...extra },
});

/** The requests the upstream received during `run`. */
async function seen<T>(run: () => Promise<T>): Promise<{ result: T; requests: Recorded[]; connections: number }> {
  const before = upstream.requests.length;
  const connectionsBefore = upstream.connections();
  const result = await run();
  return { result, requests: upstream.requests.slice(before), connections: upstream.connections() - connectionsBefore };
}

/** Every audit event of the key's workspace for an action (all pages of GET /audit-logs). */
async function auditEvents(action: string, target: TestServer = server): Promise<Array<Record<string, unknown>>> {
  const events: Array<Record<string, unknown>> = [];
  let cursor: string | null = null;
  for (let page = 0; page < 20; page++) {
    const res = await target.api('GET', `/audit-logs?limit=100&action=${encodeURIComponent(action)}${cursor ? `&cursor=${cursor}` : ''}`);
    expect(res.status).toBe(200);
    events.push(...res.body.data);
    cursor = res.body.next_cursor;
    if (!cursor) break;
  }
  return events;
}

describe('POST /runtime/execute (executeRuntime)', () => {
  describe('http_proxy', () => {
    it('executes an allowed request and answers the decision and the upstream JSON', async () => {
      const { result: res, requests } = await seen(() => execute(http('/json')));
      expect(res.status).toBe(200);
      const data = res.body.data;
      expect(Object.keys(data).sort()).toEqual(['allowed', 'decision', 'execution']);
      expect(data.allowed).toBe(true);
      for (const field of RESULT_FIELDS) expect(data.decision).toHaveProperty(field);
      expect(data.decision).toMatchObject({
        allowed: true,
        action: 'allow',
        matched: false,
        policy: null,
        result: 'allowed',
        approval_id: null,
        execution_proxy_required: false,
      });
      expect(Object.keys(data.execution).sort()).toEqual([...HTTP_RESULT_FIELDS].sort());
      expect(data.execution).toMatchObject({
        mode: 'http_proxy',
        status: 200,
        body: { hello: 'world', n: [1, 2, 3] },
        body_encoding: 'json',
        truncated: false,
      });
      expect(data.execution.headers['content-type']).toBe('application/json; charset=utf-8');
      expect(data.execution.headers['x-upstream']).toBe('yes');
      expect(Number.isInteger(data.execution.duration_ms)).toBe(true);
      expect(data.execution.duration_ms).toBeGreaterThanOrEqual(0);
      expect(requests).toHaveLength(1);
      expect(requests[0]).toMatchObject({ method: 'GET', path: '/json', body: '' });
    });

    it('passes on the upstream status as data, not as the response status', async () => {
      const notFound = await execute(http('/missing'));
      expect(notFound.status).toBe(200);
      expect(notFound.body.data.execution).toMatchObject({ status: 404, body: { error: 'nope' }, body_encoding: 'json' });
      const created = await execute(http('/created', { method: 'PUT', body: { x: 1 } }));
      expect(created.body.data.execution).toMatchObject({ status: 201, body: { created: true } });
    });

    it('returns a text body as text, a binary body as base64 and an empty body as none', async () => {
      const text = await execute(http('/text'));
      expect(text.status).toBe(200);
      expect(text.body.data.execution).toMatchObject({ status: 200, body: 'plain words', body_encoding: 'text', truncated: false });

      const binary = await execute(http('/binary'));
      expect(binary.status).toBe(200);
      expect(binary.body.data.execution.body_encoding).toBe('base64');
      expect(Buffer.from(binary.body.data.execution.body, 'base64').equals(BINARY)).toBe(true);

      const empty = await execute(http('/empty'));
      expect(empty.status).toBe(200);
      expect(empty.body.data.execution).toMatchObject({ status: 204, body_encoding: 'none', truncated: false });
      expect(empty.body.data.execution.body ?? null).toBeNull();
    });

    it('sends a JSON body as application/json and no body for null', async () => {
      const body = { order: 42, items: [{ sku: 'a', qty: 2 }], note: 'héllo' };
      const { requests } = await seen(() => execute(http('/echo', { method: 'POST', body }, { action: 'http.post' })));
      expect(requests).toHaveLength(1);
      expect(requests[0]?.method).toBe('POST');
      expect(requests[0]?.headers['content-type']).toMatch(/^application\/json/);
      expect(JSON.parse(requests[0]?.body ?? '')).toEqual(body);
      expect(Number(requests[0]?.headers['content-length'])).toBe(Buffer.byteLength(requests[0]?.body ?? ''));

      const { requests: none } = await seen(() => execute(http('/echo', { method: 'POST', body: null }, { action: 'http.post' })));
      expect(none).toHaveLength(1);
      expect(none[0]?.body).toBe('');
    });

    it('forwards request headers except hop-by-hop, Host, Content-Length and X-Warden-*', async () => {
      const headers = {
        'X-Custom': 'custom-value',
        Accept: 'application/json',
        'X-Api-Token': 'upstream-credential',
        'Keep-Alive': 'timeout=99',
        'Proxy-Authorization': 'Basic cHJveHk6c2VjcmV0',
        'Proxy-Connection': 'keep-alive',
        TE: 'trailers',
        Trailer: 'X-Checksum',
        Upgrade: 'websocket',
        'Transfer-Encoding': 'chunked',
        Host: 'evil.example.com',
        'Content-Length': '999',
        'X-Warden-Agent-Key': 'forged-agent-key',
        'x-warden-debug': 'on',
      };
      const { result: res, requests } = await seen(() =>
        execute(http('/json', { method: 'POST', body: { a: 1 }, headers }, { action: 'http.post' })),
      );
      expect(res.status).toBe(200);
      expect(requests).toHaveLength(1);
      const got = requests[0]?.headers ?? {};
      expect(got['x-custom']).toBe('custom-value');
      expect(got.accept).toBe('application/json');
      expect(got['x-api-token']).toBe('upstream-credential');
      for (const name of [
        'keep-alive',
        'proxy-authorization',
        'proxy-connection',
        'te',
        'trailer',
        'upgrade',
        'transfer-encoding',
        'x-warden-agent-key',
        'x-warden-debug',
      ]) {
        expect(got, name).not.toHaveProperty(name);
      }
      expect(got.host).toBe(`127.0.0.1:${upstream.port}`);
      expect(got['content-length']).toBe(String(Buffer.byteLength(requests[0]?.body ?? '')));
      expect(JSON.stringify(requests[0])).not.toContain('evil.example.com');
      expect(JSON.stringify(requests[0])).not.toContain('timeout=99');
    });

    it('does not forward the headers the caller names in Connection (hop-by-hop by declaration)', async () => {
      const { result: res, requests } = await seen(() =>
        execute(http('/json', { headers: { Connection: 'X-Hop-Secret', 'X-Hop-Secret': 'do-not-forward', 'X-Kept': 'kept' } })),
      );
      expect(res.status).toBe(200);
      expect(requests).toHaveLength(1);
      expect(requests[0]?.headers['x-kept']).toBe('kept');
      expect(requests[0]?.headers).not.toHaveProperty('x-hop-secret');
    });

    it('never lets a header value carrying CR/LF inject a header or a request upstream', async () => {
      const { result: res, requests } = await seen(() => execute(http('/json', { headers: { 'X-Note': 'a\r\nX-Injected: yes' } })));
      expect(res.status).not.toBe(200);
      expect(requests).toEqual([]);
      expect(JSON.stringify(upstream.requests)).not.toContain('X-Injected');
      expect(upstream.requests.some((r) => 'x-injected' in r.headers)).toBe(false);
    });

    it('refuses a header value carrying CR/LF with 400 invalid_execution (the caller erred, not the upstream)', async () => {
      const res = await execute(http('/json', { headers: { 'X-Note': 'a\r\nX-Injected: yes' } }));
      expect(res.status).toBe(400);
      expect(res.body.error.code).toBe('invalid_execution');
    });

    it("never lets Warden's own Authorization or the agent key reach the upstream", async () => {
      const { requests } = await seen(async () => {
        expect((await execute(http('/json'))).status).toBe(200);
        const keyed = await execute(http('/json', {}, { agent: 'keyed-bot' }), { headers: { 'x-warden-agent-key': AGENT_KEY } });
        expect(keyed.status).toBe(200);
        expect(keyed.body.data.allowed).toBe(true);
      });
      expect(requests).toHaveLength(2);
      for (const request of requests) {
        expect(request.headers).not.toHaveProperty('authorization');
        expect(request.headers).not.toHaveProperty('x-warden-agent-key');
      }
      const everything = JSON.stringify(upstream.requests);
      expect(everything).not.toContain(server.key);
      expect(everything).not.toContain(AGENT_KEY);
    });

    it('forwards an Authorization header the caller puts in execution.headers, never the workspace key', async () => {
      const { requests } = await seen(() => execute(http('/json', { headers: { Authorization: 'Bearer upstream-token' } })));
      expect(requests).toHaveLength(1);
      expect(requests[0]?.headers.authorization).toBe('Bearer upstream-token');
      expect(JSON.stringify(requests[0])).not.toContain(server.key);
    });

    it('does not follow a redirect: the 302 comes back with its location and the upstream saw one request', async () => {
      const { result: res, requests } = await seen(() => execute(http('/redirect')));
      expect(res.status).toBe(200);
      expect(res.body.data.execution.status).toBe(302);
      expect(res.body.data.execution.headers.location).toBe(`${upstream.origin}/json`);
      expect(requests.map((r) => r.path)).toEqual(['/redirect']);
    });

    it('cuts a body over 5 MiB at 5 MiB and marks it truncated', async () => {
      const res = await execute(http('/large'));
      expect(res.status).toBe(200);
      const execution = res.body.data.execution;
      expect(execution).toMatchObject({ status: 200, truncated: true, body_encoding: 'text' });
      expect(execution.body).toHaveLength(FIVE_MIB);
      expect(/^a+$/.test(execution.body)).toBe(true);
    });

    it('answers 502 execution_failed when the upstream does not answer within timeout_ms', async () => {
      const started = Date.now();
      const { result: res, requests } = await seen(() => execute(http('/slow', { timeout_ms: 300 })));
      expect(res.status).toBe(502);
      expect(res.body.error.code).toBe('execution_failed');
      expect(typeof res.body.error.message).toBe('string');
      expect(res.body).not.toHaveProperty('data');
      expect(Date.now() - started).toBeLessThan(5_000);
      expect(requests.map((r) => r.path)).toEqual(['/slow']);
    });

    it('answers 502 execution_failed when the upstream resets the connection', async () => {
      const res = await execute(http('/reset'));
      expect(res.status).toBe(502);
      expect(res.body.error.code).toBe('execution_failed');
    });

    it('answers 502 execution_failed when the connection is refused', async () => {
      const port = await closedPort();
      const res = await execute({ ...http('/'), execution: { mode: 'http_proxy', method: 'GET', url: `http://127.0.0.1:${port}/` } });
      expect(res.status).toBe(502);
      expect(res.body.error.code).toBe('execution_failed');
    });
  });

  describe('decisions', () => {
    it('answers 200 allowed false with execution null for a blocked action, and sends nothing upstream', async () => {
      const { result: res, requests, connections } = await seen(() => execute(http('/json', {}, { action: 'http.forbidden' })));
      expect(res.status).toBe(200);
      expect(res.body.data).toMatchObject({
        allowed: false,
        execution: null,
        decision: {
          allowed: false,
          action: 'block',
          matched: true,
          policy: 'Proxy rules',
          severity: 'high',
          message: 'Not this one',
          result: 'blocked',
          approval_id: null,
        },
      });
      expect(requests).toEqual([]);
      expect(connections).toBe(0);
    });

    it('asks for an approval, then executes exactly once with the approved approval_id', async () => {
      const request = http('/json', {}, { action: 'http.ask', resource: 'orders/1' });
      const { result: asked, requests: none } = await seen(() => execute(request));
      expect(asked.status).toBe(200);
      expect(asked.body.data).toMatchObject({
        allowed: false,
        execution: null,
        decision: { allowed: false, action: 'require_approval', result: 'approval_required' },
      });
      const approvalId = asked.body.data.decision.approval_id;
      expect(approvalId).toMatch(UUID);
      expect(none).toEqual([]);

      const approved = await server.api('PATCH', `/approvals/${approvalId}`, { body: { status: 'approved' } });
      expect(approved.status).toBe(200);

      const { result: ran, requests: once } = await seen(() => execute({ ...request, approval_id: approvalId }));
      expect(ran.status).toBe(200);
      expect(ran.body.data).toMatchObject({
        allowed: true,
        decision: { allowed: true, result: 'allowed', approval_id: approvalId },
        execution: { status: 200 },
      });
      expect(once).toHaveLength(1);

      const { result: again, requests: never } = await seen(() => execute({ ...request, approval_id: approvalId }));
      expect(again.status).toBe(400);
      expect(again.body.error.code).toBe('approval_invalid');
      expect(never).toEqual([]);
    });

    it('never executes with a rejected approval', async () => {
      const request = http('/json', {}, { action: 'http.ask', resource: 'orders/2' });
      const asked = await execute(request);
      const approvalId = asked.body.data.decision.approval_id;
      expect(approvalId).toMatch(UUID);
      expect((await server.api('PATCH', `/approvals/${approvalId}`, { body: { status: 'rejected', decision_note: 'no' } })).status).toBe(
        200,
      );
      const { result: res, requests } = await seen(() => execute({ ...request, approval_id: approvalId }));
      expect(res.status).toBe(200);
      expect(res.body.data).toMatchObject({ allowed: false, execution: null, decision: { allowed: false, result: 'blocked' } });
      expect(requests).toEqual([]);
    });

    it('refuses an approval given for another resource with 400 approval_invalid', async () => {
      const asked = await execute(http('/json', {}, { action: 'http.ask', resource: 'orders/3' }));
      const approvalId = asked.body.data.decision.approval_id;
      expect((await server.api('PATCH', `/approvals/${approvalId}`, { body: { status: 'approved' } })).status).toBe(200);
      const { result: res, requests } = await seen(() =>
        execute({ ...http('/json', {}, { action: 'http.ask', resource: 'orders/4' }), approval_id: approvalId }),
      );
      expect(res.status).toBe(400);
      expect(res.body.error.code).toBe('approval_invalid');
      expect(requests).toEqual([]);
    });

    it('audits the decision and the outcome of every execution (source execution)', async () => {
      const ok = await execute(http('/json', {}, { action: 'http.audited' }));
      expect(ok.status).toBe(200);
      const events = await auditEvents('http.audited');
      expect(events).toHaveLength(2);
      expect(events.every((e) => e.source === 'execution' && e.agent === 'proxy-bot')).toBe(true);
      expect(events.map((e) => e.id)).toContain(ok.body.data.decision.audit_event_id);

      const port = await closedPort();
      const failed = await execute({
        input: { action: 'http.audited-failure', agent: 'proxy-bot' },
        execution: { mode: 'http_proxy', method: 'GET', url: `http://127.0.0.1:${port}/` },
      });
      expect(failed.status).toBe(502);
      const failureEvents = await auditEvents('http.audited-failure');
      expect(failureEvents).toHaveLength(2);
      expect(failureEvents.every((e) => e.source === 'execution')).toBe(true);

      const blocked = await execute(http('/json', {}, { action: 'http.forbidden', resource: 'audit-check' }));
      expect(blocked.body.data.allowed).toBe(false);
      const blockedEvents = (await auditEvents('http.forbidden')).filter((e) => e.resource === 'audit-check');
      expect(blockedEvents).toHaveLength(1);
      expect(blockedEvents[0]).toMatchObject({ source: 'execution', result: 'blocked', policy: 'Proxy rules' });
    });
  });

  describe('mcp_proxy', () => {
    it('calls a tool of a registered MCP server and answers its content and isError', async () => {
      const calls = mcp.calls().length;
      const res = await execute({
        input: { action: 'mcp.call', agent: 'proxy-bot' },
        execution: { mode: 'mcp_proxy', server: 'upstream-mcp', tool: 'add', arguments: { a: 2, b: 3 } },
      });
      expect(res.status).toBe(200);
      expect(res.body.data.allowed).toBe(true);
      expect(res.body.data.execution).toMatchObject({
        mode: 'mcp_proxy',
        server: 'upstream-mcp',
        tool: 'add',
        content: [{ type: 'text', text: '5' }],
        isError: false,
      });
      expect(mcp.calls().slice(calls)).toEqual(['add']);
    });

    it('answers a tool error as isError true, not a 502', async () => {
      const res = await execute({
        input: { action: 'mcp.call', agent: 'proxy-bot' },
        execution: { mode: 'mcp_proxy', server: 'upstream-mcp', tool: 'fail' },
      });
      expect(res.status).toBe(200);
      expect(res.body.data.execution).toMatchObject({
        mode: 'mcp_proxy',
        tool: 'fail',
        isError: true,
        content: [{ type: 'text', text: 'it broke' }],
      });
    });

    it('never calls a tool a policy blocks', async () => {
      const calls = mcp.calls().length;
      const requests = mcp.requests();
      const res = await execute({
        input: { action: 'mcp.call', agent: 'proxy-bot' },
        execution: { mode: 'mcp_proxy', server: 'upstream-mcp', tool: 'delete_everything' },
      });
      expect(res.status).toBe(200);
      expect(res.body.data).toMatchObject({ allowed: false, execution: null, decision: { result: 'blocked', message: 'Too dangerous' } });
      expect(mcp.calls().length).toBe(calls);
      expect(mcp.requests()).toBe(requests);
    });

    it('answers 502 execution_failed when the MCP server is down', async () => {
      const res = await execute({
        input: { action: 'mcp.call', agent: 'proxy-bot' },
        execution: { mode: 'mcp_proxy', server: 'down-mcp', tool: 'echo', arguments: { text: 'x' } },
      });
      expect(res.status).toBe(502);
      expect(res.body.error.code).toBe('execution_failed');
    });

    it('answers 403 execution_target_denied when the registered URL is loopback and not allow-listed, and calls nothing', async () => {
      const requests = mcp.requests();
      const res = await execute(
        {
          input: { action: 'mcp.call', agent: 'proxy-bot' },
          execution: { mode: 'mcp_proxy', server: 'upstream-mcp', tool: 'echo', arguments: { text: 'x' } },
        },
        { target: strict },
      );
      expect(res.status).toBe(403);
      expect(res.body.error.code).toBe('execution_target_denied');
      expect(mcp.requests()).toBe(requests);
    });

    it('answers 404 session_not_found for a session_id no session of this agent has', async () => {
      const calls = mcp.calls();
      const res = await execute({
        input: { action: 'mcp.call', agent: 'proxy-bot' },
        execution: {
          mode: 'mcp_proxy',
          server: 'upstream-mcp',
          tool: 'echo',
          arguments: { text: 'x' },
          session_id: '00000000-0000-4000-8000-000000000000',
        },
      });
      expect(res.status).toBe(404);
      expect(res.body.error.code).toBe('session_not_found');
      expect(mcp.calls()).toEqual(calls);
    });

    it('answers 404 mcp_server_not_found for an unknown server slug', async () => {
      const res = await execute({
        input: { action: 'mcp.call', agent: 'proxy-bot' },
        execution: { mode: 'mcp_proxy', server: 'no-such-server', tool: 'echo', arguments: { text: 'x' } },
      });
      expect(res.status).toBe(404);
      expect(res.body.error.code).toBe('mcp_server_not_found');
    });
  });

  describe('errors', () => {
    it('answers 400 invalid_execution_mode for an unknown mode', async () => {
      const res = await execute({
        input: { action: 'x', agent: 'proxy-bot' },
        execution: { mode: 'ftp', method: 'GET', url: `${upstream.origin}/json` },
      });
      expect(res.status).toBe(400);
      expect(res.body.error.code).toBe('invalid_execution_mode');
    });

    it.each([
      ['http_proxy without method', { mode: 'http_proxy', url: 'http://127.0.0.1:9/' }],
      ['http_proxy with an unknown method', { mode: 'http_proxy', method: 'BREW', url: 'http://127.0.0.1:9/' }],
      ['http_proxy with a timeout over 30 s', { mode: 'http_proxy', method: 'GET', url: 'http://127.0.0.1:9/', timeout_ms: 60_000 }],
      ['mcp_proxy without tool', { mode: 'mcp_proxy', server: 'upstream-mcp' }],
      ['mcp_proxy without server', { mode: 'mcp_proxy', tool: 'echo' }],
      ['mcp_proxy with a url', { mode: 'mcp_proxy', server: 'upstream-mcp', tool: 'echo', url: 'http://127.0.0.1:9/' }],
    ])('answers 400 invalid_execution for %s', async (_label, execution) => {
      const { result: res, requests } = await seen(() => execute({ input: { action: 'x', agent: 'proxy-bot' }, execution }));
      expect(res.status).toBe(400);
      expect(res.body.error.code).toBe('invalid_execution');
      expect(requests).toEqual([]);
    });

    it.each([
      ['not a url', 'not a url'],
      ['an ftp: URL', 'ftp://x'],
      ['a relative URL', '/x'],
      ['a file: URL', 'file:///etc/passwd'],
    ])('answers 400 invalid_execution_url for %s', async (_label, url) => {
      const res = await execute({ input: { action: 'x', agent: 'proxy-bot' }, execution: { mode: 'http_proxy', method: 'GET', url } });
      expect(res.status).toBe(400);
      expect(res.body.error.code).toBe('invalid_execution_url');
    });

    it('answers 400 invalid_execution_url for credentials in the URL, and sends nothing', async () => {
      const { result: res, connections } = await seen(() =>
        execute({
          input: { action: 'x', agent: 'proxy-bot' },
          execution: { mode: 'http_proxy', method: 'GET', url: `http://user:pw@127.0.0.1:${upstream.port}/json` },
        }),
      );
      expect(res.status).toBe(400);
      expect(res.body.error.code).toBe('invalid_execution_url');
      expect(connections).toBe(0);
    });

    it.each([
      ['127.0.0.1', () => `http://127.0.0.1:${upstream.port}/json`],
      ['localhost (denied after DNS resolution)', () => `http://localhost:${upstream.port}/json`],
      ['127.1', () => `http://127.1:${upstream.port}/json`],
      ['[::ffff:127.0.0.1]', () => `http://[::ffff:127.0.0.1]:${upstream.port}/json`],
    ])('answers 403 execution_target_denied for %s without an allowlist, and the listener sees no connection', async (_label, url) => {
      const {
        result: res,
        requests,
        connections,
      } = await seen(() =>
        execute(
          { input: { action: 'http.get', agent: 'proxy-bot' }, execution: { mode: 'http_proxy', method: 'GET', url: url() } },
          { target: strict },
        ),
      );
      expect(res.status).toBe(403);
      expect(res.body.error.code).toBe('execution_target_denied');
      expect(requests).toEqual([]);
      expect(connections).toBe(0);
    });

    it('answers 403 execution_target_denied for [::1] without an allowlist, and the listener sees no connection', async ({ skip }) => {
      if (!upstream6) skip('::1 is not available here');
      const target = upstream6 as Upstream;
      const before = target.requests.length;
      const connections = target.connections();
      const res = await execute(
        {
          input: { action: 'http.get', agent: 'proxy-bot' },
          execution: { mode: 'http_proxy', method: 'GET', url: `http://[::1]:${target.port}/json` },
        },
        { target: strict },
      );
      expect(res.status).toBe(403);
      expect(res.body.error.code).toBe('execution_target_denied');
      expect(target.requests.length).toBe(before);
      expect(target.connections()).toBe(connections);
    });

    it('reaches [::1] when the allowlist names ::1/128', async ({ skip }) => {
      if (!upstream6) skip('::1 is not available here');
      const res = await execute(http('/json', { url: `${(upstream6 as Upstream).origin}/json` }));
      expect(res.status).toBe(200);
      expect(res.body.data.execution).toMatchObject({ status: 200, body: { hello: 'world' } });
    });

    it('audits a denied target as the outcome of the execution', async () => {
      const res = await execute(
        {
          input: { action: 'http.denied-audit', agent: 'proxy-bot' },
          execution: { mode: 'http_proxy', method: 'GET', url: `http://127.0.0.1:${upstream.port}/json` },
        },
        { target: strict },
      );
      expect(res.status).toBe(403);
      const events = await auditEvents('http.denied-audit', strict);
      expect(events).toHaveLength(2);
      expect(events.every((e) => e.source === 'execution')).toBe(true);
      expect(events.map((e) => e.result)).toContain('blocked');
    });

    it('answers 403 insufficient_permission for a key without runtime:execute, and sends nothing', async () => {
      const key = await keyFor(server, PERMISSIONS.filter((p) => p !== 'runtime:execute' && p !== 'admin').join(','));
      const { result: res, requests, connections } = await seen(() => execute(http('/json'), { key }));
      expect(res.status).toBe(403);
      expect(res.body.error.code).toBe('insufficient_permission');
      expect(requests).toEqual([]);
      expect(connections).toBe(0);
    });

    it('answers 401 unauthorized without a key, and sends nothing', async () => {
      const { result: res, requests } = await seen(() => execute(http('/json'), { key: null }));
      expect(res.status).toBe(401);
      expect(res.body).toEqual({ error: { code: 'unauthorized', message: 'A valid API key is required' } });
      expect(requests).toEqual([]);
    });

    it('never sent the workspace key or the agent key to any upstream during this file', () => {
      const everything = JSON.stringify(upstream.requests) + JSON.stringify(upstream6?.requests ?? []);
      expect(upstream.requests.length).toBeGreaterThan(10);
      expect(everything).not.toContain(server.key);
      expect(everything).not.toContain(strict.key);
      expect(everything).not.toContain(AGENT_KEY);
    });
  });
});
