/**
 * The MCP gateway's client sessions (`Mcp-Session-Id`) and the channel its relay uses between
 * server processes (docs/decisions/0013-mcp-gateway.md, point 11).
 *
 * - A session is opened by a client's `initialize` and kept in `mcp_client_sessions`, so any
 *   process serves its requests: it belongs to one agent and one endpoint, and holds the client
 *   capabilities Warden may declare upstream for it. Each process caches what it read; ending a
 *   session (DELETE, or the idle sweep) tells every process, which drops it and terminates the
 *   upstream sessions it had opened for it.
 * - The relay's messages go to an address (`question:<id>`, `stream:<session>`) held by one
 *   process: delivered in this process when it holds the address, else NOTIFYed on
 *   RELAY_CHANNEL (inline up to NOTIFY's payload limit, else through a row), and taken by the
 *   process that holds it. Nobody holding it: the message is dropped (a stored one is swept).
 */
import { randomBytes } from 'node:crypto';
import type { ClientCapabilities } from '@modelcontextprotocol/sdk/types.js';
import type { Kysely } from 'kysely';
import type { DB } from '../../db/schema.ts';
import { isObject } from '../../shared/objects.ts';
import {
  deleteClientSession,
  deleteIdleClientSessions,
  deleteOldRelayRows,
  deleteSessionsBeyond,
  findClientSession,
  insertClientSession,
  notifyRelay,
  publishRelayRow,
  takeRelayRow,
  touchClientSession,
} from './mcp-client-sessions.repository.ts';
import type { McpConnector } from './mcp-connector.ts';

export const RELAY_CHANNEL = 'warden_mcp_relay';
/** What a session's id looks like: `wms_` and 256 random bits (base64url); anything else is no session of Warden's. */
const SESSION_ID = /^wms_[A-Za-z0-9_-]{43}$/;
/** Sessions unseen this long are ended by the sweep (WARDEN_MCP_CLIENT_SESSION_IDLE_MS). */
export const DEFAULT_CLIENT_SESSION_IDLE_MS = 24 * 3600_000;
/** How often a session's last use is written at most (each request would otherwise write). */
const TOUCH_EVERY_MS = 60_000;
/** Live sessions an agent keeps at most: opening one more ends its least recently seen (a client that initializes in a loop). */
export const MAX_SESSIONS_PER_AGENT = 100;
/** Sessions kept in a process's cache at most. */
const CACHED = 10_000;
/** NOTIFY payloads are limited to 8000 bytes; a larger message travels as a row. */
const INLINE_BYTES = 7_000;
/** A stored message nobody took is swept after this. */
const RELAY_ROW_KEEP_MS = 15 * 60_000;
const SWEEP_BATCH = 500;

const ROOTS_CHANGED = { method: 'notifications/roots/list_changed' } as const;
/** The client capabilities Warden relays, and so declares upstream for a client that declared them. */
const RELAYED = ['sampling', 'elicitation', 'roots'] as const;

export interface ClientSession {
  id: string;
  workspaceId: string;
  agentId: string;
  /** The server's slug, '' for the aggregate endpoint. */
  endpoint: string;
  capabilities: ClientCapabilities;
  protocolVersion: string;
}

/** Of what a client declared at initialize, what Warden relays. */
export function relayedCapabilities(declared: unknown): ClientCapabilities {
  if (!isObject(declared)) return {};
  return Object.fromEntries(RELAYED.filter((name) => isObject(declared[name])).map((name) => [name, declared[name]]));
}

type Receiver = (message: unknown) => void;

export class McpClientSessions {
  private readonly cache = new Map<string, { session: ClientSession; touched: number }>();
  private readonly receivers = new Map<string, Receiver>();
  private readonly endedListeners = new Set<(id: string) => void>();
  private readonly sweeper: NodeJS.Timeout;

  constructor(
    private readonly db: Kysely<DB>,
    private readonly connector: McpConnector,
    private readonly idleMs = DEFAULT_CLIENT_SESSION_IDLE_MS,
  ) {
    this.sweeper = setInterval(() => void this.sweep().catch(() => undefined), Math.min(idleMs, 60_000));
    this.sweeper.unref();
  }

  /** For `database.listen(RELAY_CHANNEL, …)`: what other processes send. */
  readonly handlers = {
    notify: (payload: string) => void this.received(payload).catch(() => undefined),
    state: (_listening: boolean) => undefined,
  };

  close(): void {
    clearInterval(this.sweeper);
  }

  /** Opens a session for the agent on `endpoint` with what its client declared. */
  async open(at: Omit<ClientSession, 'id' | 'capabilities'>, declared: unknown): Promise<ClientSession> {
    const session: ClientSession = {
      ...at,
      id: `wms_${randomBytes(32).toString('base64url')}`,
      capabilities: relayedCapabilities(declared),
    };
    await insertClientSession(this.db, {
      id: session.id,
      workspace_id: session.workspaceId,
      agent_id: session.agentId,
      endpoint: session.endpoint,
      capabilities: session.capabilities,
      protocol_version: session.protocolVersion,
    });
    this.remember(session, Date.now());
    for (const id of await deleteSessionsBeyond(this.db, session.workspaceId, session.agentId, MAX_SESSIONS_PER_AGENT))
      await this.announceEnd(id);
    return session;
  }

  /** The session `id`, if it exists (not whose it is: the caller checks that). */
  async find(id: string): Promise<ClientSession | null> {
    if (!SESSION_ID.test(id)) return null;
    const now = Date.now();
    const cached = this.cache.get(id);
    if (cached) {
      if (now - cached.touched >= TOUCH_EVERY_MS) {
        cached.touched = now;
        void touchClientSession(this.db, id).catch(() => undefined);
      }
      return cached.session;
    }
    const row = await findClientSession(this.db, id);
    if (!row) return null;
    const session: ClientSession = {
      id: row.id,
      workspaceId: row.workspace_id,
      agentId: row.agent_id,
      endpoint: row.endpoint,
      capabilities: relayedCapabilities(row.capabilities),
      protocolVersion: row.protocol_version,
    };
    this.remember(session, now);
    return session;
  }

  /** Ends the session everywhere; false when it did not exist. */
  async end(id: string): Promise<boolean> {
    const existed = await deleteClientSession(this.db, id);
    await this.announceEnd(id);
    return existed;
  }

  /** A session whose row is gone ends here and in every other process. */
  private async announceEnd(id: string): Promise<void> {
    this.ended(id);
    await notifyRelay(this.db, RELAY_CHANNEL, JSON.stringify({ ended: id }));
  }

  /**
   * The client's roots changed: every upstream session opened for its session, in any process,
   * is told (a notification changes nothing upstream; what the upstream then asks is decided).
   */
  async rootsChanged(id: string): Promise<void> {
    this.connector.notifyClient(id, ROOTS_CHANGED);
    await notifyRelay(this.db, RELAY_CHANNEL, JSON.stringify({ rootsChanged: id }));
  }

  /** Called with the id of every session that ends (here or in another process). */
  onEnded(listener: (id: string) => void): void {
    this.endedListeners.add(listener);
  }

  /** Receives the messages sent to `address` while this process holds it; the returned function lets go. */
  receive(address: string, receiver: Receiver): () => void {
    this.receivers.set(address, receiver);
    return () => {
      if (this.receivers.get(address) === receiver) this.receivers.delete(address);
    };
  }

  /** Whether this process holds `address`. */
  holds(address: string): boolean {
    return this.receivers.has(address);
  }

  /** Sends `message` to whichever process holds `address` (this one first). */
  async send(address: string, message: unknown): Promise<void> {
    const local = this.receivers.get(address);
    if (local) return local(message);
    const payload = JSON.stringify({ to: address, body: message });
    if (Buffer.byteLength(payload) <= INLINE_BYTES) await notifyRelay(this.db, RELAY_CHANNEL, payload);
    else await publishRelayRow(this.db, RELAY_CHANNEL, address, message);
  }

  private async received(payload: string): Promise<void> {
    const note = JSON.parse(payload) as { to?: string; body?: unknown; row?: number; ended?: string; rootsChanged?: string };
    if (typeof note.ended === 'string') return this.ended(note.ended);
    if (typeof note.rootsChanged === 'string') return this.connector.notifyClient(note.rootsChanged, ROOTS_CHANGED);
    const receiver = typeof note.to === 'string' ? this.receivers.get(note.to) : undefined;
    if (!receiver) return;
    if (typeof note.row === 'number') {
      const body = await takeRelayRow(this.db, note.row);
      if (body !== undefined) receiver(body);
    } else receiver(note.body);
  }

  private ended(id: string): void {
    this.cache.delete(id);
    this.connector.endClient(id);
    for (const listener of this.endedListeners) listener(id);
  }

  private remember(session: ClientSession, touched: number): void {
    if (this.cache.size >= CACHED) this.cache.delete(this.cache.keys().next().value as string);
    this.cache.set(session.id, { session, touched });
  }

  /** Ends idle sessions (one process each: a row is deleted once) and drops stored messages nobody took. */
  async sweep(now = Date.now()): Promise<void> {
    const idle = await deleteIdleClientSessions(this.db, new Date(now - this.idleMs), SWEEP_BATCH);
    for (const id of idle) await this.announceEnd(id);
    await deleteOldRelayRows(this.db, new Date(now - RELAY_ROW_KEEP_MS));
  }
}
