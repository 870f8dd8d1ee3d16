/**
 * Opening, reaching and ending one upstream MCP session; keeping them is the pool's
 * (mcp-connector.ts). The official SDK's Client over Streamable HTTP, falling back to the older
 * SSE transport (`transport: auto`) when the server answers that it has no Streamable HTTP
 * endpoint (see `connect`); every request through the egress guard, read within
 * `maxMessageBytes` per message (mcp-fetch.ts), the URL always from the registry, the server's
 * secret header added to requests to its own origin only (`fetchFor`). And what a failure is,
 * as callers answer it (`upstreamFailure`).
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js';
import { StreamableHTTPClientTransport, StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { type ClientCapabilities, McpError } from '@modelcontextprotocol/sdk/types.js';
import type { ErrorCode } from '@warden/contract';
import { describeNetworkError, type EgressGuard, findEgressDenied, InvalidTarget } from '../../egress/guard.ts';
import { ApiError } from '../../shared/errors.ts';
import { DEFAULT_MAX_MESSAGE_BYTES, guardedFetch, tooLargeOf } from './mcp-fetch.ts';
import { type Discovery, ModernUpstream, type Stateful } from './modern-upstream.ts';

/** How long one upstream request may take, and a handshake in all. */
export const MCP_REQUEST_TIMEOUT_MS = 15_000;
/** How long a DELETE that terminates an upstream session may take. */
const TERMINATE_TIMEOUT_MS = 2_000;

/** How long a server's era (what its `server/discover` answered, or that it gave no modern evidence) is trusted before it is probed again. */
const ERA_TRUSTED_MS = 10 * 60_000;
/** Servers whose era is remembered at most; the oldest verdict goes first. */
const MAX_ERAS = 1_000;

/** What a server without Streamable HTTP answers the initialize POST (the `auto` transport then tries SSE). */
const SSE_ONLY_STATUSES = new Set([400, 404, 405]);
const speaksOnlySse = (error: unknown) => error instanceof StreamableHTTPError && SSE_ONLY_STATUSES.has(error.code ?? 0);
/** What a server answers a request on a session it no longer has (404 per the specification; many SDK servers say 400). */
export const deadSession = (error: unknown) => error instanceof StreamableHTTPError && (error.code === 404 || error.code === 400);
/** The first error in `error`'s cause chain (five deep) that `test` accepts. */
function causeWhere<T extends Error>(error: unknown, test: (e: Error) => e is T): T | undefined {
  for (let e: unknown = error, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++) if (test(e)) return e;
  return undefined;
}
/** Warden's own refusal inside an SDK error (an OAuth connection that needs an admin, thrown from fetchFor). */
const apiErrorIn = (error: unknown) => causeWhere(error, (e): e is ApiError => e instanceof ApiError);
const NETWORK_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'UND_ERR_SOCKET', 'UND_ERR_CLOSED']);
export const networkFailure = (error: unknown): boolean =>
  causeWhere(error, (e): e is Error => NETWORK_CODES.has((e as { code?: string }).code ?? '')) !== undefined;

/** The secret header Warden sends a server (mcp-registry.ts): opened only when a request is built. */
export interface UpstreamCredential {
  /** Changes with every rotation (or new OAuth connection); says nothing of the secret. */
  revision: string;
  /**
   * The header as sent for a call of `agentId` (an OAuth connection may be that agent's own);
   * given the value the server has just answered 401 to (`rejected`), a renewed one if it can.
   */
  header: (request?: { rejected?: string; agentId?: string }) => [name: string, value: string] | Promise<[name: string, value: string]>;
  /** True when a 401 may be answered by renewing the value (an OAuth access token): the request is sent once more. */
  renewable?: boolean;
}

export interface McpTarget {
  id: string;
  workspace_id: string;
  slug: string;
  transport_url: string;
  transport: string;
  auth?: UpstreamCredential;
}

/**
 * A client session of the MCP gateway: its calls use upstream sessions of their own, which
 * declare to the upstream what the client declared (Warden relays only what its client can answer).
 */
export interface ClientOwner {
  id: string;
  capabilities: ClientCapabilities;
  /** Called with each upstream client opened for the session (and its server), before its handshake: the gateway's relay handlers. */
  prepare?: (client: Client, target: McpTarget) => void;
  /** Runs each of the session's requests on `client`: the gateway ties what the upstream sends meanwhile to that request. */
  around?: <T>(client: Client, work: () => Promise<T>) => Promise<T>;
  /**
   * Called, in the async context of the request it belongs to, when the upstream closed a
   * request's stream and the client resumes it (a GET with `Last-Event-ID`: SEP-1699 polling).
   */
  polled?: () => void;
}

/** `fetch`, telling `polled` of each GET that resumes a stream (McpDialer.connect). */
const tellingResumes =
  (fetch: typeof globalThis.fetch, polled: () => void): typeof globalThis.fetch =>
  (input, init) => {
    if ((init?.method ?? 'GET') === 'GET' && new Headers(init?.headers).has('last-event-id')) polled();
    return fetch(input, init);
  };

/** An upstream session reached by its id from any process (an MCP task's): no handshake, not pooled. */
export interface UpstreamSession {
  sessionId: string;
  protocolVersion: string;
  /** The agent whose session it is: an OAuth connection of its own is used for it. */
  agentId?: string;
}

/** The id and protocol version of a connected client's Streamable HTTP session (undefined on SSE). */
export function upstreamSessionOf(client: Client): UpstreamSession | undefined {
  const transport = client.transport;
  if (!(transport instanceof StreamableHTTPClientTransport) || !transport.sessionId || !transport.protocolVersion) return undefined;
  return { sessionId: transport.sessionId, protocolVersion: transport.protocolVersion };
}

export class McpDialer {
  private readonly fetch: typeof fetch;
  /** Each server's era as last probed, by its id, URL and secret: a modern one's discovery, or none (stateful revisions). */
  private readonly eras = new Map<string, { discovery?: Discovery; until: number }>();

  constructor(
    private readonly guard: EgressGuard,
    maxMessageBytes = DEFAULT_MAX_MESSAGE_BYTES,
  ) {
    this.fetch = guardedFetch(guard, maxMessageBytes);
  }

  /**
   * Opens a client for `target` within MCP_REQUEST_TIMEOUT_MS in all. A server that answers
   * `server/discover` is spoken to in revision 2026-07-28 (ModernUpstream); one that gives no
   * modern evidence, in the stateful revisions (the probe's verdict is kept ERA_TRUSTED_MS per
   * server, so a session costs the probe once in that time). For those, `auto` tries Streamable
   * HTTP and falls back to the older SSE transport only when the server answers the
   * initialize POST with 400, 404 or 405 (what a server without Streamable HTTP answers, per
   * the MCP specification's backwards-compatibility guidance), within what is left of the
   * same deadline. A timeout, a reset or any other failure is the server's answer: no
   * fallback, so a hanging server costs one timeout, not two.
   */
  async connect(target: McpTarget, onClose: () => void, agentId?: string, owner?: ClientOwner): Promise<Client> {
    const url = this.guard.checkUrl(target.transport_url);
    const secretSending = this.fetchFor(target, url, agentId);
    const fetch = owner?.polled ? tellingResumes(secretSending, owner.polled) : secretSending;
    const started = performance.now();
    const modern = target.transport === 'sse' ? undefined : await this.connectModern(target, url, fetch, owner, agentId);
    if (modern) {
      modern.onclose = onClose;
      return modern;
    }
    const client = () => {
      // declares what the gateway's own client declared, no more: Warden asks the upstream's questions of that client
      const c = new Client({ name: 'warden', version: '1.0.0' }, { capabilities: owner?.capabilities ?? {} });
      // a failing background stream (the server-to-client GET) is not the caller's error
      c.onerror = () => undefined;
      owner?.prepare?.(c, target);
      return c;
    };
    const deadline = started + MCP_REQUEST_TIMEOUT_MS;
    if (target.transport !== 'sse') {
      const streamable = client();
      try {
        // what the probe left of the one deadline
        const left = Math.max(1, Math.round(deadline - performance.now()));
        await streamable.connect(new StreamableHTTPClientTransport(url, { fetch }), { timeout: left });
        streamable.onclose = onClose;
        return streamable;
      } catch (error) {
        await streamable.close().catch(() => undefined);
        if (target.transport === 'streamable_http' || !speaksOnlySse(error)) throw error;
      }
    }
    const sse = client();
    const remaining = Math.max(1, Math.round(deadline - performance.now()));
    let timer: NodeJS.Timeout | undefined;
    try {
      // The SSE transport's start has no timeout of its own: bound it, and close the client on
      // failure so it does not keep reconnecting in the background.
      await Promise.race([
        sse.connect(new SSEClientTransport(url, { fetch }), { timeout: remaining }),
        new Promise((_, reject) => {
          timer = setTimeout(() => reject(new Error('no answer within the MCP timeout')), remaining);
        }),
      ]);
      sse.onclose = onClose;
      return sse;
    } catch (error) {
      await sse.close().catch(() => undefined);
      throw error;
    } finally {
      clearTimeout(timer);
    }
  }

  /** A 2026-07-28 client for `target`, or undefined when the server speaks only the stateful revisions. */
  private async connectModern(
    target: McpTarget,
    url: URL,
    fetch: typeof globalThis.fetch,
    owner?: ClientOwner,
    agentId?: string,
  ): Promise<ModernUpstream | undefined> {
    // per credential as it is sent (an OAuth connection may be the agent's own): what discovery answered may differ
    const key = `${target.id}\u0000${target.transport_url}\u0000${target.auth?.revision ?? ''}\u0000${target.auth ? (agentId ?? '') : ''}`;
    const known = this.eras.get(key);
    const trusted = known && known.until > Date.now() ? known : undefined;
    if (trusted && !trusted.discovery) return undefined;
    let answered: ModernUpstream | Stateful;
    try {
      answered = await ModernUpstream.connect(url, fetch, owner?.capabilities ?? {}, MCP_REQUEST_TIMEOUT_MS, trusted?.discovery);
    } catch (error) {
      // a verdict that failed is probed again next time
      this.eras.delete(key);
      throw error;
    }
    const upstream = answered instanceof ModernUpstream ? answered : undefined;
    if (upstream) owner?.prepare?.(upstream, target);
    if (trusted) return upstream;
    this.eras.delete(key);
    if (upstream || (answered as Stateful).certain) {
      if (this.eras.size >= MAX_ERAS) this.eras.delete(this.eras.keys().next().value as string);
      this.eras.set(key, { discovery: upstream?.discovery, until: Date.now() + ERA_TRUSTED_MS });
    }
    return upstream;
  }

  /**
   * The guarded fetch, adding the server's secret header to requests to its own origin only
   * (an SSE server names the URL to POST to: another origin never gets the secret).
   */
  private fetchFor(target: McpTarget, url: URL, agentId?: string): typeof fetch {
    const auth = target.auth;
    if (!auth) return this.fetch;
    return async (input, init = {}) => {
      const to = new URL(input instanceof Request ? input.url : String(input));
      if (to.origin !== url.origin) return this.fetch(input, init);
      const headers = new Headers(init.headers);
      const [name, value] = await auth.header({ agentId });
      headers.set(name, value);
      const answer = await this.fetch(input, { ...init, headers });
      if (answer.status !== 401 || !auth.renewable) return answer;
      // an access token revoked or expired early: renewed once, and the request (its body a string) sent again
      const [, renewed] = await auth.header({ rejected: value, agentId });
      if (renewed === value) return answer;
      await answer.body?.cancel();
      headers.set(name, renewed);
      return this.fetch(input, { ...init, headers });
    };
  }

  /**
   * Runs `work` on an upstream session known by its id (an MCP task's), with no handshake. A
   * session the upstream no longer has is not re-established: what lived in it is gone.
   */
  async attach<T>(target: McpTarget, failure: ErrorCode, upstream: UpstreamSession, work: (client: Client) => Promise<T>): Promise<T> {
    const client = new Client({ name: 'warden', version: '1.0.0' });
    client.onerror = () => undefined;
    try {
      const url = this.guard.checkUrl(target.transport_url);
      const transport = new StreamableHTTPClientTransport(url, {
        fetch: this.fetchFor(target, url, upstream.agentId),
        sessionId: upstream.sessionId,
      });
      transport.setProtocolVersion(upstream.protocolVersion);
      await client.connect(transport);
      return await work(client);
    } catch (error) {
      if (deadSession(error))
        throw new ApiError(
          'session_not_found',
          `MCP server '${target.slug}' no longer has this upstream session (it restarted, or ended it)`,
          {
            cause: error,
          },
        );
      throw upstreamFailure(target, failure, error);
    } finally {
      await client.close().catch(() => undefined);
    }
  }

  /** Terminates an upstream session known by its id (DELETE), at most TERMINATE_TIMEOUT_MS; failures are ignored. */
  async terminate(target: McpTarget, upstream: UpstreamSession): Promise<void> {
    await this.attach(target, 'call_failed', upstream, async (client) => {
      if (client.transport instanceof StreamableHTTPClientTransport) await this.terminateOn(client.transport);
    }).catch(() => undefined);
  }

  async terminateOn(transport: StreamableHTTPClientTransport): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      transport.terminateSession(),
      new Promise((resolve) => {
        timer = setTimeout(resolve, TERMINATE_TIMEOUT_MS);
      }),
    ])
      .catch(() => undefined)
      .finally(() => clearTimeout(timer));
  }
}

/** A failure as the ApiError callers answer: 403 execution_target_denied for the egress guard, else `failure` (502). */
export function upstreamFailure(target: McpTarget, failure: ErrorCode, error: unknown): unknown {
  const own = apiErrorIn(error);
  if (own) return own;
  const denied = findEgressDenied(error);
  if (denied) return new ApiError('execution_target_denied', `MCP server '${target.slug}': ${denied.message}`, { cause: error });
  if (error instanceof InvalidTarget)
    return new ApiError('execution_target_denied', `MCP server '${target.slug}': ${error.message}`, { cause: error });
  const tooLarge = tooLargeOf(error);
  if (tooLarge) return new ApiError(failure, `MCP server '${target.slug}' failed: ${tooLarge.message}`, { cause: tooLarge });
  const why = error instanceof McpError ? error.message : describeNetworkError(error);
  return new ApiError(failure, `MCP server '${target.slug}' failed: ${why}`, { cause: error });
}
