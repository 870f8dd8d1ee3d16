/**
 * Polling (SEP-1699, revision 2025-11-25) passed on to the client: when the upstream closes its
 * stream of a client's `tools/call` mid-call and resumes it, Warden does the same to its client.
 * The call's POST stream gets a priming event (an event id and a `retry`) and is closed; the
 * call runs on; what it would have written is kept here, and the client's GET with that
 * `Last-Event-ID` gets it, then the rest as it comes, from any process (the origin holds the
 * address `poll:<key>` on McpClientSessions' relay). Only the client session and agent the call
 * belongs to may resume it.
 *
 * The relay may deliver a large message (a row) after a small one sent later, so every message
 * of a resumption carries its place (`seq`) and the resuming side writes them in that order. What
 * is kept is bounded: notifications past MAX_KEPT_BYTES are dropped, never the answer (one too
 * large is replaced by an error saying so); a stream is kept KEEP_MS after its answer, and at
 * most MAX_OPEN_MS in all.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import { isObject } from '../../shared/objects.ts';
import type { McpClientSessions } from '../execution/mcp-client-sessions.ts';

/** How long a client waits before it resumes (the priming event's `retry`). */
const RETRY_MS = 1_000;
/** How long a stream is kept once its answer is in, for a client that resumes late. */
const KEEP_MS = 5 * 60_000;
/** How long a stream is kept at most, answered or not (a call bounds itself well before). */
const MAX_OPEN_MS = 60 * 60_000;
/** What one stream keeps of its notifications at most; past it they are dropped (the answer never is). */
const MAX_KEPT_BYTES = 1 << 20;
/** The most an answer may take; a larger one is replaced by a JSON-RPC error saying so. */
const MAX_ANSWER_BYTES = 8 << 20;
/** How long a resuming GET waits for the process that holds the stream to answer. */
const RESUME_WAIT_MS = 5_000;
/** `poll_<key>_<n>`: the events of one polled stream, in order (0 is the priming event). */
const EVENT_ID = /^poll_([A-Za-z0-9_-]{22})_(\d{1,9})$/;

/** One SSE event, with its id. */
const sseEventWithId = (id: string, data: string) => `id: ${id}\ndata: ${data}\n\n`;

/** A call's stream once its client was told to poll: where the rest of what it writes goes. */
export interface PolledStream {
  /** The priming event to end the POST stream with. */
  priming: string;
  write: (message: string) => void;
  /** The call's answer (`id`: its JSON-RPC id): kept whatever its size, and the stream closed once it is read. */
  end: (message: string, id: string | number) => void;
}

/** What travels from the holder to a resuming GET, each with its place in the resumption. */
type Resumed = { seq: number } & ({ ok: true } | { refused: true } | { event: { id: string; data: string } } | { end: true });

interface Kept {
  sessionId: string;
  agentId: string;
  events: { id: string; data: string }[];
  bytes: number;
  ended: boolean;
  /** The resuming GET that gets what comes next: its relay address and the place of its next message. */
  resumer?: { reply: string; seq: number };
  /** Sends to resumers, one after another. */
  sending: Promise<void>;
  release: () => void;
  expires?: NodeJS.Timeout;
}

interface ResumeRequest {
  after: number;
  reply: string;
  sessionId: string;
  agentId: string;
}

export class PolledStreams {
  constructor(private readonly sessions: McpClientSessions) {}

  /** Keeps a call's stream for its client session's resuming GET. */
  open(sessionId: string, agentId: string): PolledStream {
    const key = randomBytes(16).toString('base64url');
    let next = 0;
    const kept: Kept = { sessionId, agentId, events: [], bytes: 0, ended: false, sending: Promise.resolve(), release: () => undefined };
    const drop = () => {
      clearTimeout(kept.expires);
      kept.release();
    };
    kept.release = this.sessions.receive(`poll:${key}`, (sent) => void this.resume(kept, sent));
    kept.expires = setTimeout(drop, MAX_OPEN_MS).unref();
    const add = (data: string) => {
      const event = { id: `poll_${key}_${++next}`, data };
      kept.events.push(event);
      this.forward(kept, { event });
    };
    return {
      priming: `id: poll_${key}_0\nretry: ${RETRY_MS}\ndata: \n\n`,
      write: (message) => {
        if (kept.ended || kept.bytes + message.length > MAX_KEPT_BYTES) return;
        kept.bytes += message.length;
        add(message);
      },
      end: (answer, id) => {
        if (kept.ended) return;
        add(
          answer.length <= MAX_ANSWER_BYTES
            ? answer
            : JSON.stringify({
                jsonrpc: '2.0',
                id,
                error: { code: -32603, message: 'The answer was too large to keep for a resuming client' },
              }),
        );
        kept.ended = true;
        this.forward(kept, { end: true });
        clearTimeout(kept.expires);
        kept.expires = setTimeout(drop, KEEP_MS).unref();
      },
    };
  }

  /** Sends `message` to the stream's resumer, if it has one, after whatever was sent it before. */
  private forward(kept: Kept, message: { event: { id: string; data: string } } | { end: true }): void {
    const resumer = kept.resumer;
    if (!resumer) return;
    const sent: Resumed = { seq: resumer.seq++, ...message };
    kept.sending = kept.sending.then(() => this.sessions.send(resumer.reply, sent).catch(() => undefined));
  }

  /** A resuming GET's request, where the stream is kept: its events after `after`, then the rest as they come. */
  private async resume(kept: Kept, sent: unknown): Promise<void> {
    const request = sent as ResumeRequest;
    if (!isObject(sent) || typeof request.reply !== 'string') return;
    if (request.sessionId !== kept.sessionId || request.agentId !== kept.agentId) {
      await this.sessions.send(request.reply, { seq: 0, refused: true } satisfies Resumed).catch(() => undefined);
      return;
    }
    // a client reconnecting again takes the stream over: the GET it left is ended
    if (kept.resumer) this.forward(kept, { end: true });
    const resumer = { reply: request.reply, seq: 1 };
    // the replay is queued before anything added from now on: the order is the events'
    const replay = kept.events.slice(Math.max(0, Number(request.after) || 0));
    const ended = kept.ended;
    const messages: Resumed[] = [
      { seq: 0, ok: true },
      ...replay.map((event) => ({ seq: resumer.seq++, event })),
      ...(ended ? [{ seq: resumer.seq++, end: true as const }] : []),
    ];
    kept.resumer = ended ? undefined : resumer;
    kept.sending = kept.sending.then(async () => {
      for (const message of messages) await this.sessions.send(request.reply, message).catch(() => undefined);
    });
  }

  /**
   * Answers a GET that resumes a polled stream (`lastEventId`) on `res`: true once the stream's
   * holder answered, false when no stream of this session has that id (nothing is written then).
   */
  resumeOn(lastEventId: string, sessionId: string, agentId: string, res: ServerResponse): Promise<boolean> {
    const [, key, after] = EVENT_ID.exec(lastEventId) ?? [];
    if (!key || after === undefined) return Promise.resolve(false);
    const reply = `polled:${randomUUID()}`;
    return new Promise((resolve) => {
      let started = false;
      let next = 0;
      const early = new Map<number, Resumed>();
      const stop = () => {
        clearTimeout(timer);
        release();
      };
      const timer = setTimeout(() => {
        stop();
        resolve(false);
      }, RESUME_WAIT_MS);
      /** One message, in its place. */
      const take = (message: Resumed) => {
        if ('refused' in message) {
          stop();
          resolve(false);
        } else if ('ok' in message) {
          started = true;
          clearTimeout(timer);
          res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
          res.flushHeaders();
          resolve(true);
        } else if (started && 'event' in message) res.write(sseEventWithId(message.event.id, message.event.data));
        else if ('end' in message) {
          stop();
          res.end();
        }
      };
      // the relay may hand over a later message first (a large one travels as a row): written in order
      const release = this.sessions.receive(reply, (sent) => {
        const message = sent as Resumed;
        if (!isObject(sent) || typeof message.seq !== 'number' || message.seq < next) return;
        early.set(message.seq, message);
        for (let due = early.get(next); due; due = early.get(next)) {
          early.delete(next);
          next += 1;
          take(due);
        }
      });
      res.once('close', stop);
      const request: ResumeRequest = { after: Number(after), reply, sessionId, agentId };
      void this.sessions.send(`poll:${key}`, request).catch(() => undefined);
    });
  }
}
