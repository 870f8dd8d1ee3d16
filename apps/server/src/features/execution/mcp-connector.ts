/**
 * The one connection manager for upstream MCP servers, shared by the REST runtime
 * (`/runtime/mcp/*`, `mcp_proxy`) and the MCP gateway (`/mcp`): it keeps the upstream sessions
 * that McpDialer opens (mcp-dialer.ts: the transports, the egress guard, the server's secret).
 *
 * - One upstream session per agent and server (per governed session for `/runtime/mcp/session`,
 *   per client session for the gateway's clients that keep one), opened on first use and reused by every call of that agent after it, on every edge,
 *   concurrent calls included: a call pays no handshake. Never shared by two agents: an
 *   upstream keeps state per session (what one agent left there, another would read).
 * - An upstream session is terminated (HTTP DELETE, as the transport specification asks) when
 *   it has been idle for `idleMs`, when its governed session expires, when a share is full (fairly:
 *   an agent's own least recently used past MAX_POOLED_PER_AGENT, the workspace's heaviest agent's
 *   past MAX_POOLED_PER_WORKSPACE, the heaviest workspace's past MAX_POOLED: see evictFor), when the registry's URL or transport
 *   changes, and on shutdown.
 * - A dead upstream session (the server restarted or forgot it: it answers 404, or 400 to a
 *   session it does not know) is re-established transparently, once: the failed request never
 *   ran, so it is sent again on the new session. A network failure is retried the same way
 *   only for requests that change nothing (listing, reading).
 * - A server's upstream secret (its `upstream_auth`) is sent to its own origin only
 *   (McpDialer.fetchFor). A rotation changes its revision, part of the pool key: the sessions
 *   opened with the old secret are terminated as soon as a call opens one with the new
 *   (`retireStale`) or when idle.
 * - An MCP task's upstream session is apart from all this: opened for the task (`dedicated`),
 *   never pooled, reached again by its id from any process (`attach`), terminated by whoever
 *   sweeps the expired task (`terminate`).
 */
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { ErrorCode } from '@warden/contract';
import type { EgressGuard } from '../../egress/guard.ts';
import { ApiError } from '../../shared/errors.ts';
import {
  type ClientOwner,
  deadSession,
  McpDialer,
  type McpTarget,
  networkFailure,
  type UpstreamSession,
  upstreamFailure,
  upstreamSessionOf,
} from './mcp-dialer.ts';
import { DEFAULT_MAX_MESSAGE_BYTES } from './mcp-fetch.ts';

/** Default for how long an unused upstream session is kept (WARDEN_MCP_UPSTREAM_IDLE_MS). */
export const DEFAULT_UPSTREAM_IDLE_MS = 300_000;
/**
 * Upstream sessions kept at most (each holds a client, and a socket for its GET stream); beyond,
 * the least recently used is terminated.
 */
export const MAX_POOLED = 1_000;
/** Upstream sessions one workspace keeps at most (its agents × servers in use); beyond, its heaviest agent's least recently used goes. */
export const MAX_POOLED_PER_WORKSPACE = 250;
/** Upstream sessions one agent keeps at most (its client sessions × servers); beyond, its own least recently used goes. */
export const MAX_POOLED_PER_AGENT = 64;

/** The least recently used of the group (by `groupOf`) holding the most of `entries` (ordered least recently used first). */
function oldestOfHeaviest<T>(entries: readonly T[], groupOf: (entry: T) => string): T {
  const counts = new Map<string, number>();
  for (const entry of entries) counts.set(groupOf(entry), (counts.get(groupOf(entry)) ?? 0) + 1);
  const heaviest = Math.max(...counts.values());
  return entries.find((entry) => counts.get(groupOf(entry)) === heaviest) as T;
}

/** A governed session (`/runtime/mcp/session`): its calls share an upstream session of their own. */
export interface HeldSession {
  id: string;
  expiresAt: Date;
}

/** Whose upstream session a call uses: the agent's, its governed session's, or its gateway client session's. */
export interface UpstreamOwner {
  agentId: string;
  session: HeldSession | null;
  client?: ClientOwner;
}

export interface UseOptions {
  /** True when sending the request twice changes nothing (a list or a read): network failures are retried too. */
  idempotent?: boolean;
  /**
   * Runs `work` on a new upstream session of its own (Streamable HTTP only), not pooled and left
   * open upstream when `work` succeeds: the session of an MCP task, which `work` keeps by its id
   * (see UpstreamSession) and reaches again with `attach`. It is terminated if `work` fails.
   */
  dedicated?: boolean;
}

interface Pooled {
  key: string;
  /** The gateway client session it was opened for, if any (see endClient). */
  clientId?: string;
  /** Whose session it is on which server, whatever its URL, transport or secret (see retireStale). */
  owner: string;
  workspaceId: string;
  agentId: string;
  client: Promise<Client>;
  lastUsed: number;
  /** For a governed session: when it expires. */
  expiresAt: number;
  closed: boolean;
  /** Calls running on it (an idle sweep leaves it alone meanwhile). */
  inUse: number;
}

export class McpConnector {
  private readonly pool = new Map<string, Pooled>();
  /** Client sessions that ended (see endClient). */
  private readonly endedClients = new Set<string>();
  private readonly sweeper: NodeJS.Timeout;
  /** Terminations in flight, awaited on shutdown. */
  private readonly closing = new Set<Promise<void>>();
  /** Opens, reaches and ends one upstream session (mcp-dialer.ts). */
  private readonly dialer: McpDialer;
  /** How often idle sessions are looked for. */
  readonly sweepMs: number;

  constructor(
    guard: EgressGuard,
    private readonly idleMs = DEFAULT_UPSTREAM_IDLE_MS,
    maxMessageBytes = DEFAULT_MAX_MESSAGE_BYTES,
  ) {
    this.sweepMs = Math.min(30_000, Math.max(50, Math.floor(idleMs / 2)));
    this.sweeper = setInterval(() => this.sweep(), this.sweepMs);
    this.sweeper.unref();
    this.dialer = new McpDialer(guard, maxMessageBytes);
  }

  /** Upstream sessions currently pooled (open or opening). */
  get size(): number {
    return this.pool.size;
  }

  private ownerOf(target: McpTarget, { agentId, session, client }: UpstreamOwner): string {
    const where = `${target.workspace_id}\u0000${target.id}\u0000${agentId}`;
    if (session) return `session\u0000${session.id}\u0000${where}`;
    return client ? `client\u0000${client.id}\u0000${where}` : `agent\u0000${where}`;
  }

  private keyOf(target: McpTarget, owner: UpstreamOwner): string {
    // the URL, transport and secret are part of the key: a registry change opens a new upstream session
    return `${this.ownerOf(target, owner)}\u0000${target.transport}\u0000${target.auth?.revision ?? ''}\u0000${target.transport_url}`;
  }

  /**
   * Terminates the owner's sessions on this server opened with another URL, transport or
   * secret (a rotated secret is not used again); one a call still runs on is left to the idle sweep.
   */
  private retireStale(owner: string, key: string): void {
    for (const entry of [...this.pool.values()]) if (entry.owner === owner && entry.key !== key && entry.inUse === 0) this.retire(entry);
  }

  /**
   * Makes room for a new session of `agentId` in `workspaceId`, fairly: past the agent's share,
   * its own least recently used goes; past the workspace's, the least recently used of the
   * workspace's heaviest agent; past the process's, that of the heaviest workspace. So an agent
   * that opens many sessions ends its own, never another agent's (or workspace's) while it holds more.
   */
  private evictFor(workspaceId: string, agentId: string): void {
    if (this.pool.size < MAX_POOLED_PER_AGENT) return;
    const entries = [...this.pool.values()]; // least recently used first
    const own = entries.filter((entry) => entry.workspaceId === workspaceId && entry.agentId === agentId);
    const workspace = entries.filter((entry) => entry.workspaceId === workspaceId);
    if (own.length >= MAX_POOLED_PER_AGENT) this.retire(own[0] as Pooled);
    else if (workspace.length >= MAX_POOLED_PER_WORKSPACE) this.retire(oldestOfHeaviest(workspace, (entry) => entry.agentId));
    else if (this.pool.size >= MAX_POOLED) this.retire(oldestOfHeaviest(entries, (entry) => entry.workspaceId));
  }

  private acquire(target: McpTarget, owner: UpstreamOwner): Pooled {
    const { session } = owner;
    if (owner.client && this.endedClients.has(owner.client.id))
      throw new ApiError('session_not_found', 'This MCP session has ended: initialize a new one');
    const key = this.keyOf(target, owner);
    const now = Date.now();
    const found = this.pool.get(key);
    if (found && !found.closed) {
      found.lastUsed = now;
      // most recently used last, so eviction takes the first
      this.pool.delete(key);
      this.pool.set(key, found);
      return found;
    }
    const ownerKey = this.ownerOf(target, owner);
    this.retireStale(ownerKey, key);
    this.evictFor(target.workspace_id, owner.agentId);
    const entry: Pooled = {
      key,
      clientId: owner.client?.id,
      owner: ownerKey,
      workspaceId: target.workspace_id,
      agentId: owner.agentId,
      lastUsed: now,
      expiresAt: session ? session.expiresAt.getTime() : Number.POSITIVE_INFINITY,
      closed: false,
      inUse: 0,
      client: Promise.resolve(null as never),
    };
    entry.client = this.dialer.connect(
      target,
      () => {
        // the transport closed under us: forget it, the next call opens a new session
        if (this.pool.get(key) === entry) this.pool.delete(key);
        entry.closed = true;
      },
      owner.agentId,
      owner.client,
    );
    // a failed handshake is not pooled
    entry.client.catch(() => {
      if (this.pool.get(key) === entry) this.pool.delete(key);
      entry.closed = true;
    });
    this.pool.set(key, entry);
    return entry;
  }

  /** Terminates the upstream session (DELETE) and closes the client, in the background. */
  private retire(entry: Pooled): void {
    if (this.pool.get(entry.key) === entry) this.pool.delete(entry.key);
    if (entry.closed) return;
    entry.closed = true;
    const done = entry.client
      .then(async (client) => {
        client.onclose = undefined;
        const transport = client.transport;
        if (transport instanceof StreamableHTTPClientTransport) await this.dialer.terminateOn(transport);
        await client.close();
      })
      .catch(() => undefined);
    this.closing.add(done);
    void done.finally(() => this.closing.delete(done));
  }

  /**
   * Runs `work` on the pooled client of `owner` (its agent's, or its governed session's) for
   * `target` (with `dedicated`, on a new session of its own). Failures become ApiErrors: 403
   * execution_target_denied for the egress guard, else `failure` (502).
   */
  async use<T>(
    target: McpTarget,
    failure: ErrorCode,
    owner: UpstreamOwner,
    work: (client: Client) => Promise<T>,
    options: UseOptions = {},
  ): Promise<T> {
    try {
      if (options.dedicated) return await this.dedicated(target, work, owner);
      for (let attempt = 0; ; attempt++) {
        const entry = this.acquire(target, owner);
        // counted while the handshake runs too, so that the idle sweep does not end a session being opened
        entry.inUse += 1;
        let client: Client;
        try {
          client = await entry.client;
        } catch (error) {
          entry.inUse -= 1;
          // a failed handshake is the server's answer: not retried
          throw error;
        }
        try {
          const around = owner.client?.around;
          return await (around ? around(client, () => work(client)) : work(client));
        } catch (error) {
          const broken = deadSession(error) || networkFailure(error);
          if (!broken) throw error;
          this.retire(entry);
          // once: a second failure is the server's answer
          if (attempt > 0 || !(deadSession(error) || options.idempotent)) throw error;
        } finally {
          entry.inUse -= 1;
          entry.lastUsed = Date.now();
        }
      }
    } catch (error) {
      throw upstreamFailure(target, failure, error);
    }
  }

  private async dedicated<T>(target: McpTarget, work: (client: Client) => Promise<T>, owner: UpstreamOwner): Promise<T> {
    const client = await this.dialer.connect(target, () => undefined, owner.agentId, owner.client);
    let kept = false;
    try {
      if (!upstreamSessionOf(client))
        throw new Error(
          "MCP tasks asked for by the client need a stateful Streamable HTTP session upstream, and this server answered over SSE or speaks 2026-07-28 (where a task is the server's choice: call it from a 2026-07-28 client that declares the tasks extension)",
        );
      const value = await work(client);
      kept = true;
      return value;
    } finally {
      if (!kept && client.transport instanceof StreamableHTTPClientTransport) await this.dialer.terminateOn(client.transport);
      // closes this side only: a kept session stays open upstream
      await client.close().catch(() => undefined);
    }
  }

  /** Runs `work` on an upstream session known by its id (an MCP task's), with no handshake: McpDialer.attach. */
  attach<T>(target: McpTarget, failure: ErrorCode, upstream: UpstreamSession, work: (client: Client) => Promise<T>): Promise<T> {
    return this.dialer.attach(target, failure, upstream, work);
  }

  /** Terminates an upstream session known by its id (DELETE): McpDialer.terminate. */
  terminate(target: McpTarget, upstream: UpstreamSession): Promise<void> {
    return this.dialer.terminate(target, upstream);
  }

  /** Terminates idle upstream sessions and those of expired governed sessions. */
  sweep(now = Date.now()): void {
    for (const entry of [...this.pool.values()]) {
      if (entry.expiresAt <= now || (entry.inUse === 0 && now - entry.lastUsed >= this.idleMs)) this.retire(entry);
    }
  }

  /** Sends a notification of the client's (its roots changed) on every upstream session opened here for its client session. */
  notifyClient(clientId: string, notification: { method: 'notifications/roots/list_changed' }): void {
    for (const entry of this.pool.values())
      if (entry.clientId === clientId && !entry.closed)
        void entry.client.then((client) => client.notification(notification)).catch(() => undefined);
  }

  /**
   * Terminates the upstream sessions opened for a gateway client session (it ended), and opens
   * none for it from now on (a call still running on it must not bring one back); the last
   * `remember` ended sessions are remembered.
   */
  endClient(clientId: string, remember: number): void {
    this.endedClients.add(clientId);
    if (this.endedClients.size > remember) this.endedClients.delete(this.endedClients.values().next().value as string);
    for (const entry of [...this.pool.values()]) if (entry.clientId === clientId) this.retire(entry);
  }

  /** Terminates every upstream session (shutdown). */
  async close(): Promise<void> {
    clearInterval(this.sweeper);
    for (const entry of [...this.pool.values()]) this.retire(entry);
    await Promise.all([...this.closing]);
  }
}
