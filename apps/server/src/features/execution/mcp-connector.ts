/**
 * MCP client connections to registered servers, through the egress guard: the official SDK's
 * Client over Streamable HTTP, falling back to the older SSE transport (`transport: auto`) when
 * the server answers that it has no Streamable HTTP endpoint (see `connect`).
 * The URL always comes from the registry. Connections opened for a governed session are kept
 * for the session's life and reused by its calls; others are closed after one use.
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js';
import { StreamableHTTPClientTransport, StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { ErrorCode } from '@warden/contract';
import { describeNetworkError, type EgressGuard, findEgressDenied, InvalidTarget } from '../../egress/guard.ts';
import { ApiError } from '../../shared/errors.ts';

export const MCP_REQUEST_TIMEOUT_MS = 15_000;

/** What a server without Streamable HTTP answers the initialize POST (the `auto` transport then tries SSE). */
const SSE_ONLY_STATUSES = new Set([400, 404, 405]);
const speaksOnlySse = (error: unknown) => error instanceof StreamableHTTPError && SSE_ONLY_STATUSES.has(error.code ?? 0);

export interface McpTarget {
  id: string;
  slug: string;
  transport_url: string;
  transport: string;
}

interface Held {
  client: Client;
  expiresAt: number;
}

export class McpConnector {
  private readonly sessions = new Map<string, Held>();
  private readonly sweeper: NodeJS.Timeout;

  constructor(private readonly guard: EgressGuard) {
    this.sweeper = setInterval(() => this.sweep(), 60_000);
    this.sweeper.unref();
  }

  /**
   * Opens a client for `target` within MCP_REQUEST_TIMEOUT_MS in all. `auto` tries Streamable
   * HTTP and falls back to the older SSE transport only when the server answers the
   * initialize POST with 400, 404 or 405 (what a server without Streamable HTTP answers, per
   * the MCP specification's backwards-compatibility guidance), within what is left of the
   * same deadline. A timeout, a reset or any other failure is the server's answer: no
   * fallback, so a hanging server costs one timeout, not two.
   */
  private async connect(target: McpTarget): Promise<Client> {
    const url = this.guard.checkUrl(target.transport_url);
    const fetch = this.guard.fetch.bind(this.guard);
    const client = () => new Client({ name: 'warden', version: '1.0.0' });
    const deadline = performance.now() + MCP_REQUEST_TIMEOUT_MS;
    if (target.transport !== 'sse') {
      const streamable = client();
      try {
        await streamable.connect(new StreamableHTTPClientTransport(url, { fetch }), { timeout: MCP_REQUEST_TIMEOUT_MS });
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
      return sse;
    } catch (error) {
      await sse.close().catch(() => undefined);
      throw error;
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * Runs `work` on a client for `target`: the session's held connection when `session` is
   * given (opened on first use in this process), else a fresh one closed afterwards.
   * Failures become ApiErrors: 403 execution_target_denied for the egress guard, else
   * `failure` (502).
   */
  async use<T>(
    target: McpTarget,
    failure: ErrorCode,
    session: { id: string; expiresAt: Date } | null,
    work: (client: Client) => Promise<T>,
  ): Promise<T> {
    try {
      if (session) {
        let held = this.sessions.get(session.id);
        if (!held) {
          held = { client: await this.connect(target), expiresAt: session.expiresAt.getTime() };
          this.sessions.set(session.id, held);
        }
        try {
          return await work(held.client);
        } catch (error) {
          // A broken connection is dropped; the next call of the session opens a new one.
          this.sessions.delete(session.id);
          await held.client.close().catch(() => undefined);
          throw error;
        }
      }
      const client = await this.connect(target);
      try {
        return await work(client);
      } finally {
        await client.close().catch(() => undefined);
      }
    } catch (error) {
      if (error instanceof ApiError) throw error;
      const denied = findEgressDenied(error);
      if (denied) throw new ApiError('execution_target_denied', `MCP server '${target.slug}': ${denied.message}`, { cause: error });
      if (error instanceof InvalidTarget)
        throw new ApiError('execution_target_denied', `MCP server '${target.slug}': ${error.message}`, { cause: error });
      throw new ApiError(failure, `MCP server '${target.slug}' failed: ${describeNetworkError(error)}`, { cause: error });
    }
  }

  private sweep(now = Date.now()): void {
    for (const [id, held] of this.sessions) {
      if (held.expiresAt <= now) {
        this.sessions.delete(id);
        void held.client.close().catch(() => undefined);
      }
    }
  }

  async close(): Promise<void> {
    clearInterval(this.sweeper);
    this.sweep(Number.POSITIVE_INFINITY);
  }
}
