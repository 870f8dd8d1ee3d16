/**
 * A real MCP server for tests, built with the official SDK: Streamable HTTP (stateful) on a
 * loopback port. Tools: echo, add, fail (reports isError), slow (never answers in time).
 */
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { z } from 'zod';

export interface TestMcpServer {
  url: string;
  /** HTTP requests received so far (to prove that nothing reached the upstream). */
  requests: () => number;
  /** Tool calls received so far. */
  calls: () => string[];
  close: () => Promise<void>;
}

function buildServer(calls: string[]): McpServer {
  const server = new McpServer({ name: 'warden-test-upstream', version: '1.0.0' });
  server.registerTool('echo', { description: 'Echoes its text', inputSchema: { text: z.string() } }, async ({ text }) => {
    calls.push('echo');
    return { content: [{ type: 'text', text }] };
  });
  server.registerTool('add', { description: 'Adds two numbers', inputSchema: { a: z.number(), b: z.number() } }, async ({ a, b }) => {
    calls.push('add');
    return { content: [{ type: 'text', text: String(a + b) }], structuredContent: { sum: a + b } };
  });
  server.registerTool('fail', { description: 'Always reports a tool error' }, async () => {
    calls.push('fail');
    return { content: [{ type: 'text', text: 'it broke' }], isError: true };
  });
  server.registerTool('delete_everything', { description: 'Dangerous' }, async () => {
    calls.push('delete_everything');
    return { content: [{ type: 'text', text: 'deleted' }] };
  });
  return server;
}

/** A request's JSON body (undefined when it has none): what each test upstream hands its transport. */
export async function readJson(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  const text = Buffer.concat(chunks).toString('utf8');
  return text ? JSON.parse(text) : undefined;
}

export async function startTestMcpServer(): Promise<TestMcpServer> {
  const transports = new Map<string, StreamableHTTPServerTransport>();
  const calls: string[] = [];
  let requests = 0;
  const http: Server = createServer(async (req, res) => {
    requests += 1;
    try {
      const sessionId = req.headers['mcp-session-id'] as string | undefined;
      const body = req.method === 'POST' ? await readJson(req) : undefined;
      let transport = sessionId ? transports.get(sessionId) : undefined;
      if (!transport) {
        transport = new StreamableHTTPServerTransport({
          sessionIdGenerator: () => randomUUID(),
          onsessioninitialized: (id) => {
            transports.set(id, transport as StreamableHTTPServerTransport);
          },
        });
        transport.onclose = () => {
          if (transport?.sessionId) transports.delete(transport.sessionId);
        };
        await buildServer(calls).connect(transport);
      }
      await transport.handleRequest(req, res, body);
    } catch (error) {
      if (!res.headersSent) res.writeHead(500).end(String(error));
    }
  });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  const { port } = http.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    requests: () => requests,
    calls: () => [...calls],
    close: async () => {
      for (const t of transports.values()) await t.close().catch(() => undefined);
      http.closeAllConnections();
      await new Promise<void>((resolve) => http.close(() => resolve()));
    },
  };
}
