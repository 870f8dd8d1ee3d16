/**
 * An SDK-built upstream for tests/security/mcp-bounds.test.ts (stateful Streamable HTTP on a
 * loopback port): `/sse` answers POSTs with SSE streams, `/json` with JSON. Its tools keep a
 * note per upstream session, answer results of any size, send large notifications on the
 * request's stream or the session's GET stream, and run slowly to the end whatever the client
 * does. It counts the answers whose writing the client cut short.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { z } from 'zod';
import { readJson } from '../support/mcp-server.ts';

export interface BoundsUpstream {
  /** Base URL: append `/sse` or `/json`. */
  url: string;
  /** Answers (to any request) whose body the client stopped reading before it was written whole. */
  cut: () => number;
  /** `slow` calls that ran to their end. */
  finished: () => string[];
  /** Upstream sessions opened. */
  sessions: () => number;
  close: () => Promise<void>;
}

const bigText = (bytes: number) => 'x'.repeat(bytes);

function build(finished: string[], hugeList: boolean): McpServer {
  const server = new McpServer({ name: 'bounds-upstream', version: '1.0.0' }, { capabilities: { logging: {} } });
  // a tools/list answer past any sensible limit
  if (hugeList) server.registerTool('described', { description: bigText(3 * 1024 * 1024), inputSchema: {} }, async () => ({ content: [] }));
  let note = '(none)';
  server.registerTool('set_note', { inputSchema: { text: z.string() } }, async ({ text }) => {
    note = text;
    return { content: [{ type: 'text', text: 'noted' }] };
  });
  server.registerTool('get_note', { inputSchema: {} }, async () => ({ content: [{ type: 'text', text: note }] }));
  server.registerTool('big', { inputSchema: { bytes: z.number() } }, async ({ bytes }) => ({
    content: [{ type: 'text', text: bigText(bytes) }],
  }));
  // a log message on the request's own stream first: the answer's first event is not the response
  server.registerTool('log_then_big', { inputSchema: { bytes: z.number(), log: z.number() } }, async ({ bytes, log }, extra) => {
    await extra.sendNotification({ method: 'notifications/message', params: { level: 'info', data: bigText(log) } });
    return { content: [{ type: 'text', text: bigText(bytes) }] };
  });
  // a message on the session's GET stream (no related request), then a small answer
  server.registerTool('notify_big', { inputSchema: { bytes: z.number() } }, async ({ bytes }) => {
    await server.server.notification({ method: 'notifications/message', params: { level: 'info', data: bigText(bytes) } });
    return { content: [{ type: 'text', text: 'notified' }] };
  });
  // runs to its end whatever the client does (a cancellation is not listened to)
  server.registerTool('slow', { inputSchema: { ms: z.number(), tag: z.string() } }, async ({ ms, tag }) => {
    await new Promise((resolve) => setTimeout(resolve, ms));
    finished.push(tag);
    return { content: [{ type: 'text', text: `slept ${ms}` }] };
  });
  return server;
}

export async function startBoundsUpstream(): Promise<BoundsUpstream> {
  const transports = new Map<string, StreamableHTTPServerTransport>();
  const finished: string[] = [];
  let cut = 0;
  let sessions = 0;
  const handler = async (req: IncomingMessage, res: ServerResponse) => {
    res.once('close', () => {
      if (!res.writableFinished) cut += 1;
    });
    try {
      const json = (req.url ?? '').startsWith('/json');
      const sessionId = req.headers['mcp-session-id'] as string | undefined;
      const body = req.method === 'POST' ? await readJson(req) : undefined;
      let transport = sessionId ? transports.get(sessionId) : undefined;
      if (!transport) {
        if (sessionId) {
          res.writeHead(404).end();
          return;
        }
        const created = new StreamableHTTPServerTransport({
          sessionIdGenerator: () => randomUUID(),
          enableJsonResponse: json,
          onsessioninitialized: (id) => {
            sessions += 1;
            transports.set(id, created);
          },
        });
        created.onclose = () => {
          if (created.sessionId) transports.delete(created.sessionId);
        };
        await build(finished, (req.url ?? '').includes('hugelist')).connect(created);
        transport = created;
      }
      await transport.handleRequest(req, res, body);
    } catch (error) {
      if (!res.headersSent) res.writeHead(500).end(String(error));
    }
  };
  const http = createServer((req, res) => void handler(req, res));
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  const { port } = http.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    cut: () => cut,
    finished: () => [...finished],
    sessions: () => sessions,
    close: async () => {
      for (const t of [...transports.values()]) await t.close().catch(() => undefined);
      http.closeAllConnections();
      await new Promise<void>((resolve) => http.close(() => resolve()));
    },
  };
}
