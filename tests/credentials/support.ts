/**
 * Upstreams that demand a secret, for the brokered-credential tests: an SDK-built MCP server
 * (stateful Streamable HTTP on loopback) answering 401 to any request without
 * `Authorization: Bearer <its token>`, and a plain HTTP upstream demanding one header. Both
 * record every credential they were sent, so a test can prove who sent what.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { z } from 'zod';

export interface TokenMcpServer {
  url: string;
  /** The token it accepts from now on (a rotation upstream). */
  setToken: (token: string) => void;
  /** The Authorization header of every request but session terminations (DELETE), in order (undefined when none). */
  authorizations: () => (string | undefined)[];
  /** The Authorization header of every DELETE (a client ending its session). */
  terminations: () => (string | undefined)[];
  /** Requests refused with 401. */
  refused: () => number;
  /** Sessions opened and DELETEs received. */
  sessions: () => number;
  deletes: () => number;
  calls: () => string[];
  close: () => Promise<void>;
}

async function readJson(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  const text = Buffer.concat(chunks).toString('utf8');
  return text ? JSON.parse(text) : undefined;
}

function buildServer(calls: string[]): McpServer {
  const server = new McpServer({ name: 'token-upstream', version: '1.0.0' });
  server.registerTool('whoami', { description: 'Says it was reached', inputSchema: { text: z.string() } }, async ({ text }) => {
    calls.push(text);
    return { content: [{ type: 'text', text: `reached: ${text}` }] };
  });
  return server;
}

const listen = async (server: Server) => {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
};

export async function startTokenMcpServer(token: string): Promise<TokenMcpServer> {
  let accepted = token;
  const transports = new Map<string, StreamableHTTPServerTransport>();
  const authorizations: (string | undefined)[] = [];
  const terminations: (string | undefined)[] = [];
  const calls: string[] = [];
  let refused = 0;
  let sessions = 0;
  let deletes = 0;
  const http = createServer(async (req, res) => {
    (req.method === 'DELETE' ? terminations : authorizations).push(req.headers.authorization);
    if (req.headers.authorization !== `Bearer ${accepted}`) {
      refused += 1;
      req.resume();
      res.writeHead(401, { 'content-type': 'application/json', 'www-authenticate': 'Bearer' }).end('{"error":"invalid_token"}');
      return;
    }
    try {
      if (req.method === 'DELETE') deletes += 1;
      const sessionId = req.headers['mcp-session-id'] as string | undefined;
      const body = req.method === 'POST' ? await readJson(req) : undefined;
      let transport = sessionId ? transports.get(sessionId) : undefined;
      if (!transport) {
        transport = new StreamableHTTPServerTransport({
          sessionIdGenerator: () => randomUUID(),
          onsessioninitialized: (id) => {
            sessions += 1;
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
  const origin = await listen(http);
  return {
    url: `${origin}/mcp`,
    setToken: (next) => {
      accepted = next;
    },
    authorizations: () => [...authorizations],
    terminations: () => [...terminations],
    refused: () => refused,
    sessions: () => sessions,
    deletes: () => deletes,
    calls: () => [...calls],
    close: async () => {
      for (const transport of transports.values()) await transport.close().catch(() => undefined);
      http.closeAllConnections();
      await new Promise<void>((resolve) => http.close(() => resolve()));
    },
  };
}

export interface HeaderUpstream {
  origin: string;
  /** The headers of every request received. */
  requests: () => IncomingHttpHeaders[];
  close: () => Promise<void>;
}

/** An HTTP upstream answering 200 `{ok:true}` only to requests whose `header` is `value`, 401 otherwise. */
export async function startHeaderUpstream(header: string, value: string): Promise<HeaderUpstream> {
  const requests: IncomingHttpHeaders[] = [];
  const http = createServer((req, res) => {
    requests.push(req.headers);
    req.resume();
    const ok = req.headers[header.toLowerCase()] === value;
    res.writeHead(ok ? 200 : 401, { 'content-type': 'application/json' }).end(JSON.stringify({ ok }));
  });
  const origin = await listen(http);
  return {
    origin,
    requests: () => [...requests],
    close: async () => {
      http.closeAllConnections();
      await new Promise<void>((resolve) => http.close(() => resolve()));
    },
  };
}
