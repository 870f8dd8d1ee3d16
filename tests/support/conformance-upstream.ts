/**
 * The reference upstream for the official MCP conformance suite's server scenarios
 * (`@modelcontextprotocol/conformance`, `conformance list --server`), built the way a server on
 * the v2 SDK is: one URL serving both protocol eras from one factory of registrations
 * (conformance-upstream-server.ts, with conformance-upstream-tools.ts and -mrtr.ts).
 *
 * - 2026-07-28 (per-request `_meta` envelope): `createMcpHandler(factory, { legacy: 'reject' })`,
 *   which owns `server/discover`, `input_required` results, cache hints, `subscriptions/listen`
 *   and the `Mcp-Method` / `Mcp-Name` / `Mcp-Param-*` header checks.
 * - 2025-11-25 and earlier: the SDK's stateful Streamable HTTP transport, one server instance per
 *   `Mcp-Session-Id`, with the GET stream, DELETE and resumability (an event store).
 *
 * `isLegacyRequest` picks the era. A Host or Origin that is not loopback is refused first
 * (the dns-rebinding-protection scenario).
 */
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
// The v2 SDK is a dependency of apps/server only: the root node_modules holds an older
// @modelcontextprotocol/server and no Node adapter, so both are taken from there.
import { toNodeHandler } from '@modelcontextprotocol/node';
import {
  createMcpHandler,
  createRequestStateCodec,
  type EventStore,
  hostHeaderValidationResponse,
  isLegacyRequest,
  type JSONRPCMessage,
  localhostAllowedHostnames,
  localhostAllowedOrigins,
  type McpServer,
  originValidationResponse,
  type ServerNotifier,
  WebStandardStreamableHTTPServerTransport,
} from '@modelcontextprotocol/server';
import { buildConformanceServer, type UpstreamScope } from './conformance-upstream-server.ts';

export interface ConformanceUpstream {
  url: string;
  /** Every JSON-RPC method POSTed, in order. */
  methods: () => string[];
  /** URIs currently subscribed to with resources/subscribe, over all sessions. */
  subscriptions: () => string[];
  /** Announces that `uri` changed: to the 2025 sessions subscribed to it, and the 2026-07-28 listen streams that name it. */
  resourceUpdated: (uri: string) => Promise<void>;
  close: () => Promise<void>;
}

interface LegacySession {
  transport: WebStandardStreamableHTTPServerTransport;
  server: McpServer;
}

/** Enough events to resume any stream a test opens; the oldest are dropped past it. */
const EVENTS_KEPT = 2_000;
/** The `retry` a priming event suggests: short, so a test's reconnect is quick. */
const RETRY_MS = 500;

/** An in-memory event store: SSE events by stream, so a client can resume with Last-Event-ID. */
function memoryEventStore(): EventStore {
  const events: { id: string; streamId: string; message: JSONRPCMessage }[] = [];
  let next = 0;
  return {
    async storeEvent(streamId, message) {
      const id = `${streamId}_${++next}`;
      events.push({ id, streamId, message });
      if (events.length > EVENTS_KEPT) events.shift();
      return id;
    },
    async getStreamIdForEventId(eventId) {
      return events.find((event) => event.id === eventId)?.streamId;
    },
    async replayEventsAfter(lastEventId, { send }) {
      const start = events.findIndex((event) => event.id === lastEventId);
      const streamId = events[start]?.streamId ?? '';
      for (const event of events.slice(start + 1)) if (event.streamId === streamId) await send(event.id, event.message);
      return streamId;
    },
  };
}

const jsonRpcError = (status: number, code: number, message: string) =>
  Response.json({ jsonrpc: '2.0', error: { code, message }, id: null }, { status });

/** The POSTed body, or undefined when there is none or it is not JSON (the SDK answers those). */
async function readBody(request: Request): Promise<unknown> {
  if (request.method !== 'POST') return undefined;
  try {
    return JSON.parse(await request.clone().text());
  } catch {
    return undefined;
  }
}

const isInitialize = (body: unknown) => typeof body === 'object' && body !== null && (body as { method?: unknown }).method === 'initialize';

/**
 * `modern: false` serves only the stateful revisions, as a 2025 server does: `server/discover`
 * is answered as any request without a session (400), so Warden speaks 2025-11-25 to it.
 */
export async function startConformanceUpstream({ modern: servesModern = true } = {}): Promise<ConformanceUpstream> {
  const subscribed = new Set<string>();
  const methods: string[] = [];
  const sessions = new Map<string, LegacySession>();
  // requestState round-trips through the client: sealed with a per-upstream key, checked on re-entry
  const codec = createRequestStateCodec<Record<string, unknown>>({ key: randomBytes(32) });
  let notifier: ServerNotifier | undefined;
  const scope = (era: UpstreamScope['era']): UpstreamScope => ({
    era,
    subscribed,
    codec,
    notify: () => notifier,
  });

  const modern = createMcpHandler(() => buildConformanceServer(scope('modern')), { legacy: 'reject' });
  notifier = modern.notify;

  /** 2025-era traffic: a session per `initialize`, found again by its `Mcp-Session-Id`. */
  const legacy = async (request: Request, body: unknown): Promise<Response> => {
    const sessionId = request.headers.get('mcp-session-id');
    const session = sessionId ? sessions.get(sessionId) : undefined;
    if (session) return session.transport.handleRequest(request, { parsedBody: body });
    if (sessionId) return jsonRpcError(404, -32001, 'Session not found');
    if (!isInitialize(body)) return jsonRpcError(400, -32000, 'Bad Request: Mcp-Session-Id header is required');
    const server = buildConformanceServer(scope('legacy'));
    const transport = new WebStandardStreamableHTTPServerTransport({
      sessionIdGenerator: () => crypto.randomUUID(),
      eventStore: memoryEventStore(),
      retryInterval: RETRY_MS,
      onsessioninitialized: (id) => {
        sessions.set(id, { transport, server });
      },
      onsessionclosed: (id) => {
        sessions.delete(id);
      },
    });
    await server.connect(transport);
    return transport.handleRequest(request, { parsedBody: body });
  };

  const handler = toNodeHandler({
    fetch: async (request: Request) => {
      // DNS rebinding: a page of another name that resolves to this address is refused
      const refused =
        hostHeaderValidationResponse(request, localhostAllowedHostnames()) ?? originValidationResponse(request, localhostAllowedOrigins());
      if (refused) return refused;
      const body = await readBody(request);
      for (const message of (Array.isArray(body) ? body : [body]) as ({ method?: unknown } | undefined)[])
        if (typeof message?.method === 'string') methods.push(message.method);
      if (!servesModern || (await isLegacyRequest(request, body))) return legacy(request, body);
      return modern.fetch(request, body === undefined ? undefined : { parsedBody: body });
    },
  });
  const http = createServer((req, res) => void handler(req, res));
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  const { port } = http.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    methods: () => [...methods],
    subscriptions: () => [...subscribed],
    resourceUpdated: async (uri) => {
      modern.notify.resourceUpdated(uri);
      if (subscribed.has(uri))
        for (const { server } of sessions.values()) await server.server.sendResourceUpdated({ uri }).catch(() => undefined);
    },
    close: async () => {
      await modern.close();
      for (const { server } of sessions.values()) await server.close().catch(() => undefined);
      sessions.clear();
      http.closeAllConnections();
      await new Promise<void>((resolve) => http.close(() => resolve()));
    },
  };
}
