/**
 * The `auto` MCP transport: Streamable HTTP first, the older SSE transport only when the
 * server answers the initialize POST with 400, 404 or 405 (it has no Streamable HTTP
 * endpoint, per the MCP specification's backwards-compatibility guidance). A reset or a 5xx
 * is the server's answer: 502 at once, no second attempt over SSE. (A server that hangs is
 * answered within one MCP timeout, not two: tests/reliability/upstream-faults.test.ts.)
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { SSEServerTransport } from '@modelcontextprotocol/sdk/server/sse.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { type FaultyUpstream, startResettingUpstream } from '../reliability/support/faulty-upstreams.ts';
import { useTestServer } from '../support/server.ts';

interface Upstream {
  url: string;
  /** `METHOD /path` of every HTTP request received. */
  seen: string[];
  close: () => Promise<void>;
}

async function listen(handler: (req: IncomingMessage, res: ServerResponse) => void) {
  const seen: string[] = [];
  const http: Server = createServer((req, res) => {
    seen.push(`${req.method} ${new URL(req.url ?? '/', 'http://x').pathname}`);
    handler(req, res);
  });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  const { port } = http.address() as AddressInfo;
  return {
    port,
    seen,
    close: async () => {
      http.closeAllConnections();
      await new Promise<void>((resolve) => http.close(() => resolve()));
    },
  };
}

/** A legacy MCP server: SSE only (GET /sse, then POST /messages); a POST to /sse is 405. */
async function startSseOnlyServer(): Promise<Upstream> {
  const transports = new Map<string, SSEServerTransport>();
  const l = await listen((req, res) => {
    const path = new URL(req.url ?? '/', 'http://x').pathname;
    if (req.method === 'GET' && path === '/sse') {
      const transport = new SSEServerTransport('/messages', res);
      transports.set(transport.sessionId, transport);
      res.on('close', () => transports.delete(transport.sessionId));
      const server = new McpServer({ name: 'legacy-sse', version: '1.0.0' });
      server.registerTool('echo', { description: 'Echoes its text', inputSchema: { text: z.string() } }, async ({ text }) => ({
        content: [{ type: 'text', text }],
      }));
      void server.connect(transport);
      return;
    }
    if (req.method === 'POST' && path === '/messages') {
      const transport = transports.get(new URL(req.url ?? '/', 'http://x').searchParams.get('sessionId') ?? '');
      if (transport) return void transport.handlePostMessage(req, res);
      return void res.writeHead(404).end();
    }
    res.writeHead(405, { allow: 'GET' }).end();
  });
  return { url: `http://127.0.0.1:${l.port}/sse`, seen: l.seen, close: l.close };
}

/** Answers every request 500. */
async function startFailingServer(): Promise<Upstream> {
  const l = await listen((_req, res) => res.writeHead(500, { 'content-type': 'text/plain' }).end('boom'));
  return { url: `http://127.0.0.1:${l.port}/mcp`, seen: l.seen, close: l.close };
}

const server = useTestServer({ egressAllowlist: ['127.0.0.1/32'] });
let sseOnly: Upstream;
let failing: Upstream;
let resetting: FaultyUpstream;

const call = (slug: string) =>
  server.api('POST', '/runtime/mcp/call', {
    body: { server: slug, tool: 'echo', arguments: { text: 'hello' }, input: { agent: 'transport-bot' } },
  });

beforeAll(async () => {
  [sseOnly, failing, resetting] = await Promise.all([startSseOnlyServer(), startFailingServer(), startResettingUpstream('/mcp')]);
  expect((await server.api('POST', '/agents', { body: { name: 'T', provider: 'local', slug: 'transport-bot' } })).status).toBe(201);
  for (const [slug, url] of [
    ['legacy', sseOnly.url],
    ['failing', failing.url],
    ['resetting', resetting.url],
  ] as const) {
    const res = await server.api('POST', '/mcp-servers', { body: { name: slug, slug, transport_url: url, transport: 'auto' } });
    expect(res.status).toBe(201);
  }
});

afterAll(async () => {
  await Promise.all([sseOnly?.close(), failing?.close(), resetting?.close()]);
});

describe('POST /runtime/mcp/call with transport auto', () => {
  it('falls back to SSE when the server answers the Streamable HTTP POST 405, and the call succeeds (200)', async () => {
    const res = await call('legacy');
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body.data.execution!.content).toEqual([{ type: 'text', text: 'hello' }]);
    expect(sseOnly.seen[0]).toBe('POST /sse');
    expect(sseOnly.seen).toContain('GET /sse');
  });

  it('answers 502 call_failed when the server answers 500, without trying SSE', async () => {
    const res = await call('failing');
    expect(res.status).toBe(502);
    expect(res.body.error.code).toBe('call_failed');
    // the server/discover probe (a 500 leaves the server a 2025 one: record 0030), then initialize, and no SSE
    expect(failing.seen).toEqual(['POST /mcp', 'POST /mcp']);
  });

  it('answers 502 call_failed at once when the server resets the connection, without a second connection for SSE', async () => {
    const before = resetting.accepted();
    const t0 = performance.now();
    const res = await call('resetting');
    expect(res.status).toBe(502);
    expect(res.body.error.code).toBe('call_failed');
    expect(performance.now() - t0).toBeLessThan(5_000);
    expect(resetting.accepted() - before).toBe(1);
  });
});
