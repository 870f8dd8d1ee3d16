/**
 * What the POST /runtime/execute test files share (runtime-execute.*.test.ts): constants, a
 * recording upstream of our own, and `useRuntimeExecute()`, the fixture of each file: a server
 * that may reach loopback (and, on request, a `strict` one with the default egress rules and an
 * MCP server registered on both), the agents and the policy the tests decide with.
 */
import { readFileSync } from 'node:fs';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { AuditEvent, EvaluationInput, ExecutionRequest, HttpExecution, HttpExecutionResult } from '@warden/contract';
import { beforeAll, expect } from 'vitest';
import { useFixture } from '../../support/fixture.ts';
import { startTestMcpServer, type TestMcpServer } from '../../support/mcp-server.ts';
import { type ApiResponse, type TestServer, useTestServer } from '../../support/server.ts';

const spec = JSON.parse(readFileSync(new URL('../../../spec/dist/openapi.json', import.meta.url), 'utf8'));
export const PERMISSIONS: string[] = spec.components.schemas.Permission.enum;
export const RESULT_FIELDS = [
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
export const HTTP_RESULT_FIELDS = ['mode', 'status', 'headers', 'body', 'body_encoding', 'truncated', 'duration_ms'];
export const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
export const FIVE_MIB = 5 * 1024 * 1024;
export const BINARY = Buffer.from([0, 1, 2, 0xfe, 0xff, 0x80, 0x7f, 0x0a]);
export const AGENT_KEY = 'proxy-agent-secret-key-0123456789';

export interface Recorded {
  method: string;
  path: string;
  headers: IncomingHttpHeaders;
  rawHeaders: string[];
  body: string;
}

export interface Upstream {
  origin: string;
  port: number;
  requests: Recorded[];
  connections: () => number;
  close: () => Promise<void>;
}

/** A loopback upstream of our own that records everything it receives. */
export async function startUpstream(host = '127.0.0.1'): Promise<Upstream | null> {
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
export async function closedPort(): Promise<number> {
  const probe = createServer();
  await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
  const { port } = probe.address() as AddressInfo;
  await new Promise<void>((resolve) => probe.close(() => resolve()));
  return port;
}

interface ExecuteOptions {
  key?: string | null;
  headers?: Record<string, string>;
  target?: TestServer;
}

/** The HTTP result of an answer that executed over HTTP (fails the test otherwise). */
export function httpResult(res: ApiResponse<{ data: { execution: unknown } }>): HttpExecutionResult {
  const execution = res.body.data?.execution as HttpExecutionResult | null | undefined;
  expect(execution?.mode, JSON.stringify(res.body)).toBe('http_proxy');
  return execution as HttpExecutionResult;
}

/**
 * The fixture of a runtime-execute test file: `server` allow-lists loopback (IPv4 and IPv6);
 * `strict: true` adds `strict` (default egress rules), `mcp: true` the test MCP server,
 * registered as `upstream-mcp` on each server (and `down-mcp`, a closed port, on `server`).
 */
export function useRuntimeExecute(options: { strict?: boolean; mcp?: boolean } = {}) {
  const server = useTestServer({ egressAllowlist: ['127.0.0.1/32', '::1/128'] }); // loopback allow-listed
  const strict = options.strict ? useTestServer() : undefined; // default egress rules
  const mcp = options.mcp ? useFixture(startTestMcpServer, (m) => m.close(), 'the test MCP server') : undefined;
  const upstream = useFixture(
    async () => (await startUpstream()) as Upstream,
    (u) => u.close(),
    'the upstream',
  );
  const ipv6 = useFixture(
    async () => ({ upstream: await startUpstream('::1') }),
    (u) => u.upstream?.close(),
    'the IPv6 upstream',
  );
  const servers = () => (strict ? [server, strict] : [server]);

  beforeAll(async () => {
    for (const target of servers()) {
      expect((await target.api('POST', '/agents', { body: { name: 'Proxy Bot', slug: 'proxy-bot', provider: 'local' } })).status).toBe(201);
    }
    expect(
      (await server.api('POST', '/agents', { body: { name: 'Keyed Bot', slug: 'keyed-bot', provider: 'local', api_key: AGENT_KEY } }))
        .status,
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
    if (mcp) {
      for (const target of servers()) {
        const registered = await target.api('POST', '/mcp-servers', {
          body: { name: 'Upstream MCP', slug: 'upstream-mcp', transport_url: mcp.url },
        });
        expect(registered.status).toBe(201);
      }
      const down = await server.api('POST', '/mcp-servers', {
        body: { name: 'Down MCP', slug: 'down-mcp', transport_url: `http://127.0.0.1:${await closedPort()}/mcp` },
      });
      expect(down.status).toBe(201);
    }
  }, 120_000); // registrations on up to two servers: slow on a busy machine

  const execute = (body: ExecutionRequest, options: ExecuteOptions = {}) =>
    (options.target ?? server).api('POST', '/runtime/execute', { body, key: options.key, headers: options.headers });

  /** POST /runtime/execute with a body the contract refuses (an unknown mode, a missing field). */
  const executeUnchecked = (body: unknown, options: ExecuteOptions = {}) =>
    (options.target ?? server).api('POST', '/runtime/execute', { body, key: options.key, headers: options.headers, unchecked: true });

  /** An allowed GET of `path` on the upstream by `proxy-bot`, with `extra` execution and `input` fields. */
  const http = (
    path: string,
    extra: Partial<HttpExecution> = {},
    input: Partial<EvaluationInput> = {},
  ): { input: EvaluationInput; execution: HttpExecution } => ({
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
  async function auditEvents(action: string, target: TestServer = server): Promise<AuditEvent[]> {
    const events: AuditEvent[] = [];
    let cursor: string | null = null;
    for (let page = 0; page < 20; page++) {
      const res = await target.api('GET', '/audit-logs', { query: { limit: 100, action, cursor: cursor ?? undefined } });
      expect(res.status).toBe(200);
      events.push(...res.body.data);
      cursor = res.body.next_cursor as string | null;
      if (!cursor) break;
    }
    return events;
  }

  return {
    server,
    /** The server with the default egress rules (`strict: true`). */
    strict: strict as TestServer,
    /** The test MCP server (`mcp: true`). */
    mcp: mcp as TestMcpServer,
    upstream,
    /** The upstream on [::1], or null where this machine has no IPv6 loopback. */
    upstream6: (): Upstream | null => ipv6.upstream,
    execute,
    executeUnchecked,
    http,
    seen,
    auditEvents,
  };
}
