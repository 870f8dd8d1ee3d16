/**
 * A stateful upstream MCP server for the gateway's client-session tests: SDK-built, Streamable
 * HTTP on a loopback port, one McpServer and transport per session. It records, per session,
 * what the client declared at initialize, the GET streams open and the DELETEs received, keeps
 * a note and resource subscriptions per session, asks its client `roots/list` and
 * `elicitation/create` from tools, and sends notifications and asks questions outside any
 * request when told to (on the session's GET stream, as real servers do).
 */
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import {
  type ClientCapabilities,
  ElicitResultSchema,
  ListRootsResultSchema,
  RootsListChangedNotificationSchema,
  type ServerNotification,
  type ServerRequest,
  SubscribeRequestSchema,
  UnsubscribeRequestSchema,
} from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import { readJson } from '../support/mcp-server.ts';

export interface SessionsUpstream {
  url: string;
  /** Ids of the sessions initialized, in order. */
  sessions: () => string[];
  /** Ids of the sessions a DELETE was received for, in order. */
  deleted: () => string[];
  /** What the client declared at this session's initialize (undefined: no such session). */
  capabilities: (sessionId: string) => ClientCapabilities | undefined;
  /** Ids of the sessions whose client said its roots changed (notifications/roots/list_changed), once per notification. */
  rootsChanged: () => string[];
  /** Ids of the sessions whose GET stream is open now. */
  streaming: () => string[];
  /** Sends `notifications/resources/updated` for `uri` to every session subscribed to it; answers their ids. */
  resourceUpdated: (uri: string) => Promise<string[]>;
  /** Sends `notification` to one session outside any request (on its GET stream, if it has one). */
  notify: (sessionId: string, notification: ServerNotification) => Promise<void>;
  /**
   * Asks one session's client `elicitation/create` outside any request (on its GET stream), as the
   * conformance suite's reference server does with `server.request(…)`: the client's answer, or
   * the error it (or Warden) sent back, within `timeoutMs`.
   */
  ask: (sessionId: string, message: string, timeoutMs?: number) => Promise<{ action: string; content?: unknown } | { error: string }>;
  close: () => Promise<void>;
}

interface SessionState {
  note?: string;
  subscriptions: Set<string>;
}

/** The URI of the one resource a client may subscribe to. */
export const WATCHED = 'test://watched';

const text = (value: string) => ({ content: [{ type: 'text' as const, text: value }] });

function buildServer(state: SessionState, onRootsChanged: () => void): McpServer {
  const server = new McpServer(
    { name: 'client-sessions-upstream', version: '1.0.0' },
    { capabilities: { logging: {}, resources: { subscribe: true, listChanged: true }, tools: { listChanged: true } } },
  );
  server.registerTool('whoami', { description: 'Answers the id of the session it runs on' }, async (extra) =>
    text(String(extra.sessionId)),
  );
  server.registerTool('set_note', { description: 'Keeps a note in this session', inputSchema: { note: z.string() } }, async ({ note }) => {
    state.note = note;
    return text('noted');
  });
  server.registerTool('get_note', { description: "Answers this session's note" }, async () => text(state.note ?? '(none)'));
  server.registerTool('list_roots', { description: "Answers the client's roots, comma-separated" }, async (extra) => {
    try {
      const answer = await extra.sendRequest({ method: 'roots/list' } as ServerRequest, ListRootsResultSchema);
      return text(answer.roots.map((root) => root.uri).join(','));
    } catch (error) {
      // the client's (or Warden's) JSON-RPC error, shown to the test as the tool's text
      return text(`roots/list failed: ${(error as Error).message}`);
    }
  });
  server.registerTool(
    'elicit',
    { description: 'Asks the user for a name', inputSchema: { message: z.string() } },
    async ({ message }, extra) => {
      const requestedSchema = { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] };
      // sendRequest, not elicitInput: it asks whatever the client declared
      const answer = await extra.sendRequest(
        { method: 'elicitation/create', params: { message, requestedSchema } } as ServerRequest,
        ElicitResultSchema,
      );
      return text(`action=${answer.action}; content=${JSON.stringify(answer.content ?? {})}`);
    },
  );
  server.registerPrompt('ask_in_prompt', { description: 'Asks the client a question while it answers prompts/get' }, async (extra) => {
    let said: string;
    try {
      const requestedSchema = { type: 'object', properties: { name: { type: 'string' } } };
      const answer = await extra.sendRequest(
        { method: 'elicitation/create', params: { message: 'during a prompt', requestedSchema } } as ServerRequest,
        ElicitResultSchema,
        { timeout: 5_000 },
      );
      said = `answered ${answer.action}`;
    } catch (error) {
      said = `refused: ${(error as Error).message}`;
    }
    return { messages: [{ role: 'user', content: { type: 'text', text: said } }] };
  });
  server.registerResource('watched', WATCHED, { description: 'A resource to subscribe to', mimeType: 'text/plain' }, async (uri) => ({
    contents: [{ uri: uri.href, mimeType: 'text/plain', text: 'watched' }],
  }));
  // a notification handler is given no extra: the session is the one this server was built for
  server.server.setNotificationHandler(RootsListChangedNotificationSchema, async () => onRootsChanged());
  server.server.setRequestHandler(SubscribeRequestSchema, async (request) => {
    state.subscriptions.add(request.params.uri);
    return {};
  });
  server.server.setRequestHandler(UnsubscribeRequestSchema, async (request) => {
    state.subscriptions.delete(request.params.uri);
    return {};
  });
  return server;
}

export async function startSessionsUpstream(): Promise<SessionsUpstream> {
  const transports = new Map<string, StreamableHTTPServerTransport>();
  /** Every session ever initialized (kept after it ends, so its capabilities can still be read). */
  const known = new Map<string, { server: McpServer; state: SessionState }>();
  const opened: string[] = [];
  const deleted: string[] = [];
  const rootsChanged: string[] = [];
  const streams = new Map<string, number>();
  const http: Server = createServer(async (req: IncomingMessage, res: ServerResponse) => {
    try {
      const sessionId = req.headers['mcp-session-id'] as string | undefined;
      if (req.method === 'DELETE' && sessionId) deleted.push(sessionId);
      const body = req.method === 'POST' ? await readJson(req) : undefined;
      let transport = sessionId ? transports.get(sessionId) : undefined;
      if (!transport) {
        if (sessionId) {
          res
            .writeHead(404, { 'content-type': 'application/json' })
            .end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32001, message: 'Session not found' }, id: null }));
          return;
        }
        const state: SessionState = { subscriptions: new Set() };
        const server = buildServer(state, () => rootsChanged.push(String(created.sessionId)));
        const created = new StreamableHTTPServerTransport({
          sessionIdGenerator: () => randomUUID(),
          onsessioninitialized: (id) => {
            transports.set(id, created);
            known.set(id, { server, state });
            opened.push(id);
          },
        });
        created.onclose = () => {
          if (created.sessionId) transports.delete(created.sessionId);
        };
        await server.connect(created);
        transport = created;
      }
      if (req.method === 'GET' && sessionId) {
        // counted while the response is open: the session's stream for messages outside requests
        streams.set(sessionId, (streams.get(sessionId) ?? 0) + 1);
        res.on('close', () => streams.set(sessionId, (streams.get(sessionId) ?? 1) - 1));
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
    sessions: () => [...opened],
    deleted: () => [...deleted],
    rootsChanged: () => [...rootsChanged],
    capabilities: (id) => known.get(id)?.server.server.getClientCapabilities(),
    streaming: () => [...streams].filter(([, open]) => open > 0).map(([id]) => id),
    resourceUpdated: async (uri) => {
      const sent: string[] = [];
      for (const [id, session] of known) {
        if (!transports.has(id) || !session.state.subscriptions.has(uri)) continue;
        await session.server.server.sendResourceUpdated({ uri });
        sent.push(id);
      }
      return sent;
    },
    notify: async (id, notification) => {
      await known.get(id)?.server.server.notification(notification);
    },
    ask: async (id, message, timeoutMs = 10_000) => {
      const session = known.get(id);
      if (!session) throw new Error(`no session ${id}`);
      const requestedSchema = { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] };
      try {
        const answer = await session.server.server.request(
          { method: 'elicitation/create', params: { message, requestedSchema } } as ServerRequest,
          ElicitResultSchema,
          { timeout: timeoutMs },
        );
        return { action: answer.action, content: answer.content };
      } catch (error) {
        return { error: (error as Error).message };
      }
    },
    close: async () => {
      for (const t of [...transports.values()]) await t.close().catch(() => undefined);
      http.closeAllConnections();
      await new Promise<void>((resolve) => http.close(() => resolve()));
    },
  };
}
