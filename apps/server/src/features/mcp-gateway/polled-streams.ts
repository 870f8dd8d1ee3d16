/**
 * Polling (SEP-1699, revision 2025-11-25) passed on to the client: when the upstream closes its
 * stream of a client's `tools/call` mid-call and resumes it, Warden does the same to its client.
 * The call's POST stream gets a priming event (an event id and a `retry`) and is closed; the
 * call runs on; what it would have written is kept here, and the client's GET with that
 * `Last-Event-ID` gets it, then the rest as it comes, from any process (the origin holds the
 * address `poll:<key>` on McpClientSessions' relay). Only the client session and agent the call
 * belongs to may resume it; what is kept is bounded, and dropped a while after the answer.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import { isObject } from '../../shared/objects.ts';
import type { McpClientSessions } from '../execution/mcp-client-sessions.ts';

/** How long a client waits before it resumes (the priming event's `retry`). */
const RETRY_MS = 1_000;
/** How long a stream is kept once its answer is in, for a client that resumes late. */
const KEEP_MS = 5 * 60_000;
/** What one stream keeps at most; past it the stream is dropped (its answer can no longer be resumed). */
const MAX_KEPT_BYTES = 1 << 20;
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
  /** The call's answer: written, and the stream closed once it is read. */
  end: (message: string) => void;
}

interface Kept {
  sessionId: string;
  agentId: string;
  events: { id: string; data: string }[];
  bytes: number;
  ended: boolean;
  /** Where the resuming GET listens (its relay address), once there is one. */
  resumer?: string;
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
    const kept: Kept = { sessionId, agentId, events: [], bytes: 0, ended: false, release: () => undefined };
    const drop = () => {
      clearTimeout(kept.expires);
      kept.release();
    };
    const forward = (message: unknown) => {
      if (kept.resumer) void this.sessions.send(kept.resumer, message).catch(() => undefined);
    };
    kept.release = this.sessions.receive(`poll:${key}`, (sent) => this.resume(kept, sent));
    // nobody resumed: let go after a while all the same
    kept.expires = setTimeout(drop, KEEP_MS).unref();
    const add = (data: string) => {
      const event = { id: `poll_${key}_${++next}`, data };
      kept.bytes += data.length;
      if (kept.bytes > MAX_KEPT_BYTES) return drop();
      kept.events.push(event);
      forward(event);
    };
    return {
      priming: `id: poll_${key}_0\nretry: ${RETRY_MS}\ndata: \n\n`,
      write: add,
      end: (answer) => {
        add(answer);
        kept.ended = true;
        forward({ end: true });
        clearTimeout(kept.expires);
        kept.expires = setTimeout(drop, KEEP_MS).unref();
      },
    };
  }

  /** A resuming GET's request, where the stream is kept: its events after `after`, then the rest as they come. */
  private async resume(kept: Kept, sent: unknown): Promise<void> {
    const request = sent as ResumeRequest;
    if (!isObject(sent) || typeof request.reply !== 'string') return;
    if (request.sessionId !== kept.sessionId || request.agentId !== kept.agentId) {
      await this.sessions.send(request.reply, { refused: true }).catch(() => undefined);
      return;
    }
    // a client reconnecting again takes the stream over; live events wait until the replay has caught up
    kept.resumer = undefined;
    const send = (message: unknown) => this.sessions.send(request.reply, message).catch(() => undefined);
    await send({ ok: true });
    for (let sent = Math.max(0, Number(request.after) || 0); sent < kept.events.length; sent++) await send(kept.events[sent]);
    kept.resumer = request.reply;
    if (kept.ended) await send({ end: true });
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
      const stop = () => {
        clearTimeout(timer);
        release();
      };
      const timer = setTimeout(() => {
        stop();
        resolve(false);
      }, RESUME_WAIT_MS);
      const release = this.sessions.receive(reply, (message) => {
        const m = message as { ok?: boolean; refused?: boolean; end?: boolean; id?: string; data?: string };
        if (m.refused && !started) {
          stop();
          resolve(false);
        } else if (m.ok && !started) {
          started = true;
          clearTimeout(timer);
          res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
          res.flushHeaders();
          resolve(true);
        } else if (started && typeof m.id === 'string' && typeof m.data === 'string') res.write(sseEventWithId(m.id, m.data));
        else if (started && m.end) {
          stop();
          res.end();
        }
      });
      res.once('close', stop);
      const request: ResumeRequest = { after: Number(after), reply, sessionId, agentId };
      void this.sessions.send(`poll:${key}`, request).catch(() => undefined);
    });
  }
}
