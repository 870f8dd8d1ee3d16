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
 *   A process that takes a session's stream address announces it, and any other holder lets go
 *   (one message, one stream). A question's id carries a MAC of the agent it was asked of, so an
 *   answer to an id Warden never gave that agent is dropped before it travels.
 */
import { createHmac, randomBytes, randomUUID, timingSafeEqual } from 'node:crypto';
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
/** The client capabilities Warden relays (and so declares upstream for a client that declared them), with the parts of each it keeps. */
const RELAYED = { sampling: ['context', 'tools'], elicitation: ['form', 'url'], roots: [] } as const;
/** Ids Warden asks a client's questions under: `warden-<uuid>-<MAC of the agent and the uuid>`. */
const QUESTION_ID = /^warden-([0-9a-f-]{36})-([A-Za-z0-9_-]{22})$/;
/** Ended client sessions this process remembers, so that a call still running on one opens no new upstream session for it. */
const REMEMBERED_ENDS = 10_000;

export interface ClientSession {
  id: string;
  workspaceId: string;
  agentId: string;
  /** The server's slug, '' for the aggregate endpoint. */
  endpoint: string;
  capabilities: ClientCapabilities;
  protocolVersion: string;
}

/** Of what a client declared at initialize, what Warden relays, in the protocol's shape only (nothing else the client sent is kept or declared). */
export function relayedCapabilities(declared: unknown): ClientCapabilities {
  if (!isObject(declared)) return {};
  const kept: Record<string, Record<string, unknown>> = {};
  for (const [name, parts] of Object.entries(RELAYED)) {
    const given = declared[name];
    if (!isObject(given)) continue;
    kept[name] = Object.fromEntries(parts.filter((part) => isObject(given[part])).map((part) => [part, {}]));
    if (name === 'roots' && given.listChanged === true) kept[name].listChanged = true;
  }
  return kept as ClientCapabilities;
}

type Receiver = (message: unknown) => void;
interface Held {
  receiver: Receiver;
  /** Called when another process takes the address (a stream's). */
  lost?: () => void;
}

export class McpClientSessions {
  private readonly cache = new Map<string, { session: ClientSession; touched: number }>();
  private readonly held = new Map<string, Held>();
  private readonly endedListeners = new Set<(id: string) => void>();
  private readonly sweeper: NodeJS.Timeout;
  /** This process, in what it announces (it skips its own announcements). */
  private readonly processId = randomUUID();
  /** While the channel is down, ends announced by others are missed: nothing is cached then. */
  private listening = false;

  constructor(
    private readonly db: Kysely<DB>,
    private readonly connector: McpConnector,
    /** The key of question ids' MACs: the same in every process (derived from the master key). */
    private readonly questionKey: Buffer,
    private readonly idleMs = DEFAULT_CLIENT_SESSION_IDLE_MS,
  ) {
    this.sweeper = setInterval(() => void this.sweep().catch(() => undefined), Math.min(idleMs, 60_000));
    this.sweeper.unref();
  }

  /** For `database.listen(RELAY_CHANNEL, …)`: what other processes send. */
  readonly handlers = {
    notify: (payload: string) => void this.received(payload).catch(() => undefined),
    state: (listening: boolean) => {
      this.listening = listening;
      // what was cached may have ended meanwhile, unannounced to this process
      this.cache.clear();
    },
  };

  /** A new id to ask `agentId`'s client a question under. */
  questionId(agentId: string): string {
    const id = randomUUID();
    return `warden-${id}-${this.mac(agentId, id)}`;
  }

  /** Whether `id` is one Warden gave `agentId`'s client a question under. */
  askedOf(id: string, agentId: string): boolean {
    const parts = QUESTION_ID.exec(id);
    if (!parts) return false;
    return timingSafeEqual(Buffer.from(parts[2] as string), Buffer.from(this.mac(agentId, parts[1] as string)));
  }

  private mac(agentId: string, id: string): string {
    return createHmac('sha256', this.questionKey).update(`${agentId}\u0000${id}`).digest().subarray(0, 16).toString('base64url');
  }

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
        // a row gone without this process hearing of it (a missed announcement) ends here too
        void touchClientSession(this.db, id)
          .then((touched) => (touched ? undefined : this.ended(id)))
          .catch(() => undefined);
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
    if (this.listening) this.remember(session, now);
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
    await this.announce({ ended: id });
  }

  /**
   * The client's roots changed: every upstream session opened for its session, in any process,
   * is told (a notification changes nothing upstream; what the upstream then asks is decided).
   */
  async rootsChanged(id: string): Promise<void> {
    this.connector.notifyClient(id, ROOTS_CHANGED);
    await this.announce({ rootsChanged: id });
  }

  /** Called with the id of every session that ends (here or in another process). */
  onEnded(listener: (id: string) => void): void {
    this.endedListeners.add(listener);
  }

  /**
   * Receives the messages sent to `address` while this process holds it; the returned function
   * lets go. With `lost`, the address is taken from any other process holding it (which is told
   * by its own `lost`).
   */
  receive(address: string, receiver: Receiver, lost?: () => void): () => void {
    const entry: Held = { receiver, lost };
    this.held.set(address, entry);
    if (lost) void this.announce({ claimed: address }).catch(() => undefined);
    return () => {
      if (this.held.get(address) === entry) this.held.delete(address);
    };
  }

  /** Tells every other process (this one skips what it announced). */
  private announce(
    note: { ended: string } | { rootsChanged: string } | { claimed: string } | { topic: string; body: unknown },
  ): Promise<unknown> {
    return notifyRelay(this.db, RELAY_CHANNEL, JSON.stringify({ ...note, by: this.processId }));
  }

  private readonly broadcastListeners = new Map<string, (body: unknown) => void>();

  /** Tells `body` to the `onBroadcast(topic)` listener of every other process (small: one NOTIFY payload). */
  broadcast(topic: string, body: unknown): Promise<unknown> {
    return this.announce({ topic, body });
  }

  /** Hears what other processes broadcast under `topic` (one listener per topic). */
  onBroadcast(topic: string, listener: (body: unknown) => void): void {
    this.broadcastListeners.set(topic, listener);
  }

  /** Sends `message` to whichever process holds `address` (this one first). */
  async send(address: string, message: unknown): Promise<void> {
    const local = this.held.get(address)?.receiver;
    if (local) return local(message);
    const payload = JSON.stringify({ to: address, body: message });
    if (Buffer.byteLength(payload) <= INLINE_BYTES) await notifyRelay(this.db, RELAY_CHANNEL, payload);
    else await publishRelayRow(this.db, RELAY_CHANNEL, address, message);
  }

  private async received(payload: string): Promise<void> {
    const note = JSON.parse(payload) as Partial<Record<'to' | 'ended' | 'rootsChanged' | 'claimed' | 'topic' | 'by', string>> & {
      body?: unknown;
      row?: number;
    };
    if (note.by === this.processId) return;
    if (typeof note.ended === 'string') return this.ended(note.ended);
    if (typeof note.rootsChanged === 'string') return this.connector.notifyClient(note.rootsChanged, ROOTS_CHANGED);
    if (typeof note.topic === 'string') return this.broadcastListeners.get(note.topic)?.(note.body);
    if (typeof note.claimed === 'string') {
      const taken = this.held.get(note.claimed);
      if (taken?.lost) {
        this.held.delete(note.claimed);
        taken.lost();
      }
      return;
    }
    const receiver = typeof note.to === 'string' ? this.held.get(note.to)?.receiver : undefined;
    if (!receiver) return;
    if (typeof note.row === 'number') {
      const body = await takeRelayRow(this.db, note.row);
      if (body !== undefined) receiver(body);
    } else receiver(note.body);
  }

  private ended(id: string): void {
    this.cache.delete(id);
    this.connector.endClient(id, REMEMBERED_ENDS);
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
