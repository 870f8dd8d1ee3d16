/**
 * Block rules hold against every spelling an upstream reads as the blocked thing (issue 46,
 * rows 1 and 7), tried as an attacker would against upstreams that read as real ones do:
 * - an MCP upstream (the SDK's server) that parses each resource URI with WHATWG URL and serves
 *   the loopback resource to whatever spelling reaches it: a rule blocking `http://127.0.0.1/*`
 *   and `http://[::1]/*` held against none of `2130706433`, `0x7f000001`, `127.1`, … before;
 * - an HTTP upstream that routes as Express's default router does (case-insensitive), decodes
 *   the path a second time (as IIS and some proxies do), and reads query parameter names as PHP
 *   does (`.` and ` ` become `_`) with Laravel's `_method` override: `/ADMIN/users`,
 *   `/%2561dmin` and `?.method=DELETE` passed blocks on `/admin*` and DELETE before.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type Server as HttpServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { McpError, ReadResourceRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import type { ExecutionRequest, PolicyRule } from '@warden/contract';
import express from 'express';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectClient } from '../mcp-gateway/support.ts';
import { keyFor, useTestServer } from '../support/server.ts';

const server = useTestServer({ egressAllowlist: ['127.0.0.1/32'] });
const ALL = 'agents:write,policies:write,mcp_servers:write,audit:read,runtime:execute';

// ---- the MCP upstream: WHATWG URL, as the SDK's servers and fetch() read a URI

const LOOPBACK_CONTENT = 'the loopback admin page';
let mcpUpstream: HttpServer;
let mcpUrl: string;
const servedUris: string[] = [];

function loopbackReader(): Server {
  const upstream = new Server({ name: 'uri-reader', version: '1.0.0' }, { capabilities: { resources: {} } });
  upstream.setRequestHandler(ReadResourceRequestSchema, async ({ params }) => {
    const url = new URL(params.uri); // the standard parser: 2130706433, 127.1, [0::1]… are all loopback to it
    const loopback = url.hostname === '127.0.0.1' || url.hostname === '[::1]';
    if (loopback) servedUris.push(params.uri);
    return { contents: [{ uri: params.uri, text: loopback ? LOOPBACK_CONTENT : `public ${url.hostname}` }] };
  });
  return upstream;
}

// ---- the HTTP upstream: Express routing, a second decoding, PHP's parameter names

/** The admin routes a request reached, as the upstream resolved them (method and path). */
const reachedAdmin: string[] = [];
let httpUpstream: HttpServer;
let httpOrigin: string;

/** A query parameter's name as PHP reads it (php.net, "Variables From External Sources"). */
const phpName = (name: string) => decodeURIComponent(name.replace(/\+/g, ' ')).replace(/^ +/, '').replace(/[ .[]/g, '_');

function laxApp() {
  const app = express(); // Express's default router: case-insensitive, as the upstreams the rows name
  app.use((req, _res, next) => {
    // a second decoding of the path, as IIS and double-decoding proxies do
    const [path, query = ''] = req.url.split('?');
    req.url = `${decodeURIComponent(path ?? '')}${query ? `?${query}` : ''}`;
    // Laravel's method override, read from PHP's parameter names
    for (const pair of query.split('&')) {
      const [name = '', value = ''] = pair.split('=');
      if (name && phpName(name) === '_method') req.method = decodeURIComponent(value).toUpperCase();
    }
    next();
  });
  app.all('/admin/*rest', (req, res) => {
    reachedAdmin.push(`${req.method} ${req.path}`);
    res.json({ admin: true });
  });
  app.use((req, res) => {
    res.json({ method: req.method, path: req.path });
  });
  return app;
}

beforeAll(async () => {
  mcpUpstream = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const text = Buffer.concat(chunks).toString('utf8');
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
    res.on('close', () => void transport.close());
    await loopbackReader().connect(transport);
    await transport.handleRequest(req, res, text ? JSON.parse(text) : undefined);
  });
  await new Promise<void>((resolve) => mcpUpstream.listen(0, '127.0.0.1', resolve));
  mcpUrl = `http://127.0.0.1:${(mcpUpstream.address() as AddressInfo).port}/mcp`;
  httpUpstream = createServer(laxApp());
  await new Promise<void>((resolve) => httpUpstream.listen(0, '127.0.0.1', resolve));
  httpOrigin = `http://127.0.0.1:${(httpUpstream.address() as AddressInfo).port}`;
});

const clients: Client[] = [];
afterAll(async () => {
  for (const client of clients) await client.close().catch(() => undefined);
  for (const upstream of [mcpUpstream, httpUpstream]) {
    upstream?.closeAllConnections();
    await new Promise<void>((resolve) => (upstream ? upstream.close(() => resolve()) : resolve()));
  }
});

/** A workspace with agent `bot` (development) and its key, the MCP server `reader` and one policy. */
async function workspace(rules: PolicyRule[]): Promise<{ key: string; agentKey: string }> {
  const key = await keyFor(server, ALL, `w${randomUUID().slice(0, 8)}`);
  const agentKey = `ak_${randomUUID()}`;
  const post = (path: string, body: unknown) => server.api('POST', path as '/agents', { key, body, unchecked: true });
  expect((await post('/agents', { name: 'Bot', slug: 'bot', provider: 'local', api_key: agentKey })).status).toBe(201);
  expect((await post('/mcp-servers', { name: 'Reader', slug: 'reader', transport_url: mcpUrl })).status).toBe(201);
  expect((await post('/policies', { name: 'guard', rules })).status).toBe(201);
  return { key, agentKey };
}

describe('resources/read: a blocked host in any spelling WHATWG URL reads as it (row 1)', { timeout: 60_000 }, () => {
  let client: Client;
  beforeAll(async () => {
    const { agentKey } = await workspace([
      { match: { action: ['mcp.resources.read'], resource: ['http://127.0.0.1/*', 'http://[::1]/*'] }, effect: 'block' },
    ]);
    client = await connectClient(`${server.url}/mcp/reader`, { authorization: `Bearer ${agentKey}` });
    clients.push(client);
  });

  const spellings = [
    'http://127.0.0.1/admin',
    'http://2130706433/admin',
    'http://0x7f000001/admin',
    'http://127.1/admin',
    'http://0177.0.0.1/admin',
    'http://127.0.0.1./admin',
    'http://127.0.0.1%2e/admin',
    'http://[0:0:0:0:0:0:0:1]/admin',
    'http://[0::1]/admin',
    // the same families, further
    'http://0x7f.0.0.1/admin',
    'http://0x7F.1/admin',
    'http://017700000001/admin',
    'http://%31%32%37.0.0.1/admin',
    'http://[::ffff:127.0.0.1]/admin',
    'http://[::FFFF:7F00:1]/admin',
    'http://[0000:0000::0001]/admin',
    'HTTP://127.0.0.1:80/admin',
    'http://127.0.0.1/ADMIN/../admin',
  ];
  for (const uri of spellings)
    it(`never serves ${uri}`, async () => {
      const served = servedUris.length;
      const outcome = await client.readResource({ uri }).then(
        (result) => ({ result }),
        (error: unknown) => ({ error }),
      );
      expect('error' in outcome, JSON.stringify(outcome)).toBe(true);
      const error = (outcome as { error: McpError }).error;
      expect(error).toBeInstanceOf(McpError);
      // blocked by the rule (-32003), or refused as a URI that has no one form (-32602): never sent
      expect([-32003, -32602]).toContain(error.code);
      expect(servedUris.length).toBe(served);
    });

  it('sends an allowed host in its canonical form, the one it decided on', async () => {
    const result = await client.readResource({ uri: 'http://0x7f000002/x' });
    expect(result.contents[0]).toMatchObject({ uri: 'http://127.0.0.2/x', text: 'public 127.0.0.2' });
  });
});

describe('HTTP: blocks on a path and a method hold against case, double encoding and PHP names (row 7)', () => {
  const execute = ({ key, agentKey }: { key: string; agentKey: string }, method: string, path: string) =>
    server.api('POST', '/runtime/execute', {
      key,
      headers: { 'x-warden-agent-key': agentKey },
      body: {
        input: { action: 'http.request', agent: 'bot' },
        execution: { mode: 'http_proxy', method, url: `${httpOrigin}${path}` },
      } as ExecutionRequest,
      unchecked: true,
    });

  it('a block on /admin* holds for every spelling a case-folding, double-decoding upstream routes to /admin', async () => {
    const ws = await workspace([{ match: { path: ['/admin*'] }, effect: 'block' }]);
    for (const path of ['/admin/users', '/ADMIN/users', '/Admin/users', '/%2561dmin/users', '/%2541DMIN/users', '/%252561dmin/users']) {
      const reached = reachedAdmin.length;
      const res = await execute(ws, 'GET', path);
      expect(res.status, path).toBe(200);
      expect(res.body.data, path).toMatchObject({ allowed: false, decision: { result: 'blocked' } });
      expect(reachedAdmin.length, path).toBe(reached);
    }
    // what is not the admin route still runs
    expect((await execute(ws, 'GET', '/public/admin')).body.data.allowed).toBe(true);
  });

  it('an allow rule matches the exact form only: a folded spelling falls to the default, never allowed by it', async () => {
    const ws = await workspace([{ match: { path: ['/reports*'] }, effect: 'allow' }]);
    const { key } = ws;
    expect(
      (await server.api('PATCH', '/settings', { key, body: { default_decision: { development: 'block' } }, unchecked: true })).status,
    ).toBe(200);
    expect((await execute(ws, 'GET', '/reports/1')).body.data.allowed).toBe(true);
    expect((await execute(ws, 'GET', '/REPORTS/1')).body.data.allowed).toBe(false);
  });

  it('a block on DELETE holds against _method in every spelling PHP reads as one: refused, nothing sent', async () => {
    const ws = await workspace([{ match: { method: ['DELETE'] }, effect: 'block' }]);
    for (const query of [
      '_method=DELETE',
      '.method=DELETE',
      '%2Emethod=DELETE',
      '%20.method=DELETE',
      '+.method=DELETE',
      '%255Fmethod=DELETE',
      '[method=DELETE',
      '_METHOD=DELETE',
      'a=1&%2E%6Dethod=DELETE',
    ]) {
      const reached = reachedAdmin.length;
      const res = await execute(ws, 'POST', `/admin/users/7?${query}`);
      expect(res.status, query).toBe(400);
      expect(res.body.error.code, query).toBe('invalid_execution');
      expect(reachedAdmin.length, query).toBe(reached);
    }
  });
});
