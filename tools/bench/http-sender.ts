/**
 * The open loop's HTTP/1.1 sender: keep-alive connections over raw sockets, one request in
 * flight per connection, the same request bytes every time (serialised once), and a parser
 * that reads only what the loop needs from an answer: its status and where it ends.
 *
 * Why not undici: on the 2-core benchmark machine the load generator shares the cores with
 * the server under test, so whatever it costs is taken from the server, and undici's Pool
 * (promises, header objects and a body stream per answer) cost clearly more CPU per request
 * than this sender (docs/decisions/0008-bench-open-loop-sender.md). The sender is a measuring
 * instrument: no redirects, no retries, no pipelining; a connection error or a timeout fails
 * the request it carried.
 */
import { connect, type Socket } from 'node:net';

export type SendOutcome = { status: number } | { error: Error };

export interface RequestParts {
  origin: string;
  method: string;
  path: string;
  headers: Record<string, string>;
  body?: Buffer;
}

export interface HttpSenderOptions {
  origin: string;
  /** Connections opened at most; requests beyond wait for one to be free. */
  maxConnections: number;
  /** A request not answered within this time fails (and its connection is closed). */
  timeoutMs: number;
  /**
   * A connection idle longer than this is closed instead of reused (default 4 s): servers close
   * idle keep-alive connections (Node's after 5 s), and a request written into one the server
   * is closing fails with a reset.
   */
  idleTimeoutMs?: number;
}

const CRLF_CRLF = Buffer.from('\r\n\r\n');
const CRLF = Buffer.from('\r\n');

/** Builds the request once: headers given, Host and Content-Length added. */
export function serialiseRequest(options: RequestParts): Buffer {
  const url = new URL(options.origin);
  const lines = [`${options.method} ${options.path} HTTP/1.1`, `host: ${url.host}`];
  for (const [name, value] of Object.entries(options.headers)) {
    if (/[\r\n]/.test(name) || /[\r\n]/.test(value)) throw new Error(`header ${name}: no line breaks allowed`);
    const lower = name.toLowerCase();
    if (lower !== 'host' && lower !== 'content-length') lines.push(`${name}: ${value}`);
  }
  if (options.body !== undefined || options.method === 'POST') lines.push(`content-length: ${options.body?.length ?? 0}`);
  const head = Buffer.from(`${lines.join('\r\n')}\r\n\r\n`, 'latin1');
  return options.body ? Buffer.concat([head, options.body]) : head;
}

/** Where an answer's body ends, as its head says. */
type Framing = { kind: 'length'; remaining: number } | { kind: 'chunked' } | { kind: 'close' };

function headerValue(head: string, name: string): string | undefined {
  const at = head.indexOf(`\r\n${name}:`);
  if (at < 0) return undefined;
  const end = head.indexOf('\r\n', at + 2);
  return head.slice(at + name.length + 3, end < 0 ? undefined : end).trim();
}

/**
 * One keep-alive connection carrying one request at a time. `feed` consumes socket data and
 * reports each complete answer; its state is the answer being read.
 */
class Connection {
  private buffered: Buffer | undefined;
  private status = 0;
  private framing: Framing | undefined;
  private closeAfter = false;
  /** When the last answer ended (performance.now()), while idle. */
  idleSince = 0;
  /** The server ended its side: never reuse. */
  ended = false;
  private done: ((outcome: SendOutcome) => void) | undefined;
  /** Why the connection ended, when it ended on an error or a timeout. */
  private failure: Error | undefined;

  constructor(
    readonly socket: Socket,
    private readonly onIdle: (connection: Connection) => void,
    private readonly onGone: (connection: Connection) => void,
  ) {
    socket.setNoDelay(true);
    socket.on('data', (chunk: Buffer) => this.feed(chunk));
    socket.on('end', () => {
      this.ended = true;
    });
    socket.on('timeout', () => {
      this.failure = new Error('request timed out');
      socket.destroy();
    });
    socket.on('error', (error) => {
      this.failure ??= error;
    });
    socket.on('close', () => this.gone(this.failure ?? new Error('connection closed before the answer ended')));
  }

  send(request: Buffer, timeoutMs: number, done: (outcome: SendOutcome) => void): void {
    this.done = done;
    this.socket.setTimeout(timeoutMs);
    this.socket.write(request);
  }

  private feed(chunk: Buffer): void {
    let data = this.buffered ? Buffer.concat([this.buffered, chunk]) : chunk;
    this.buffered = undefined;
    for (;;) {
      if (!this.framing) {
        const end = data.indexOf(CRLF_CRLF);
        if (end < 0) break;
        const head = data.toString('latin1', 0, end).toLowerCase();
        this.status = Number(head.slice(9, 12));
        this.closeAfter = headerValue(head, 'connection') === 'close';
        const length = headerValue(head, 'content-length');
        // RFC 9112 §6.3: no body after 1xx, 204 and 304 whatever the headers say; then chunked
        // framing overrides Content-Length; without either the body ends with the connection.
        this.framing =
          this.status < 200 || this.status === 204 || this.status === 304
            ? { kind: 'length', remaining: 0 }
            : headerValue(head, 'transfer-encoding')?.includes('chunked') === true
              ? { kind: 'chunked' }
              : length !== undefined
                ? { kind: 'length', remaining: Number(length) }
                : { kind: 'close' };
        data = data.subarray(end + 4);
      }
      const framing = this.framing;
      if (framing.kind === 'close') return; // the answer ends when the connection does
      if (framing.kind === 'length') {
        const take = Math.min(framing.remaining, data.length);
        framing.remaining -= take;
        data = data.subarray(take);
        if (framing.remaining > 0) return;
      } else {
        // chunk: size CRLF data CRLF; the last chunk (size 0) is followed by trailers and CRLF
        const sizeEnd = data.indexOf(CRLF);
        if (sizeEnd < 0) break;
        const size = Number.parseInt(data.toString('latin1', 0, sizeEnd), 16);
        if (size > 0) {
          if (data.length < sizeEnd + 2 + size + 2) break;
          data = data.subarray(sizeEnd + 2 + size + 2);
          continue;
        }
        const trailersEnd = data.indexOf(CRLF_CRLF, sizeEnd);
        const bare = data.subarray(sizeEnd, sizeEnd + 4).equals(CRLF_CRLF) ? sizeEnd : trailersEnd;
        if (bare < 0) break;
        data = data.subarray(bare + 4);
      }
      this.answered();
      if (data.length === 0) return;
    }
    if (data.length > 0) this.buffered = Buffer.from(data);
  }

  private answered(): void {
    const done = this.done;
    this.framing = undefined;
    this.done = undefined;
    this.socket.setTimeout(0);
    if (!done) {
      // An answer nobody asked for: the connection's state is unknown, so it is not reused.
      this.socket.destroy();
      return;
    }
    done({ status: this.status });
    if (this.closeAfter) {
      this.socket.destroy();
    } else {
      this.idleSince = performance.now();
      this.onIdle(this);
    }
  }

  private gone(error: Error): void {
    const done = this.done;
    this.done = undefined;
    // A body delimited by the connection's end is complete only if it ended cleanly.
    if (this.framing?.kind === 'close' && !this.failure) done?.({ status: this.status });
    else done?.({ error });
    this.onGone(this);
  }
}

export class HttpSender {
  private readonly idle: Connection[] = [];
  private readonly open = new Set<Connection>();
  private readonly waiting: Array<{ request: Buffer; done: (outcome: SendOutcome) => void }> = [];
  private readonly host: string;
  private readonly port: number;
  private closing = false;

  constructor(private readonly options: HttpSenderOptions) {
    const url = new URL(options.origin);
    if (url.protocol !== 'http:') throw new Error('the sender speaks plain HTTP/1.1 only');
    this.host = url.hostname.replace(/^\[|\]$/g, '');
    this.port = Number(url.port || 80);
  }

  /**
   * Sends a request (serialiseRequest's bytes, for this origin); `done` is called once, with
   * the answer's status or the error.
   */
  send(request: Buffer, done: (outcome: SendOutcome) => void): void {
    if (this.closing) {
      done({ error: new Error('sender closed') });
      return;
    }
    const connection = this.reusable();
    if (connection) {
      connection.send(request, this.options.timeoutMs, done);
    } else {
      this.waiting.push({ request, done });
      if (this.open.size < this.options.maxConnections) this.connect();
    }
  }

  /** The most recently idle connection still safe to reuse; staler ones are closed. */
  private reusable(): Connection | undefined {
    const staleBefore = performance.now() - (this.options.idleTimeoutMs ?? 4_000);
    for (let connection = this.idle.pop(); connection; connection = this.idle.pop()) {
      if (!connection.ended && connection.idleSince >= staleBefore) return connection;
      this.open.delete(connection);
      connection.socket.destroy();
    }
    return undefined;
  }

  /** Connections open now (for tests and reports). */
  get connections(): number {
    return this.open.size;
  }

  async close(): Promise<void> {
    this.closing = true;
    for (const { done } of this.waiting.splice(0)) done({ error: new Error('sender closed') });
    const closed = [...this.open].map((c) => new Promise((resolve) => c.socket.once('close', resolve)));
    for (const connection of this.open) connection.socket.destroy();
    await Promise.all(closed);
  }

  private connect(): void {
    const socket = connect({ host: this.host, port: this.port });
    let connected = false;
    const connection = new Connection(
      socket,
      (c) => this.ready(c),
      (c) => this.lost(c, !connected),
    );
    this.open.add(connection);
    socket.setTimeout(this.options.timeoutMs);
    socket.once('connect', () => {
      connected = true;
      socket.setTimeout(0);
      this.ready(connection);
    });
  }

  private ready(connection: Connection): void {
    const next = this.waiting.shift();
    if (next) connection.send(next.request, this.options.timeoutMs, next.done);
    else this.idle.push(connection);
  }

  private lost(connection: Connection, neverConnected: boolean): void {
    this.open.delete(connection);
    const at = this.idle.indexOf(connection);
    if (at >= 0) this.idle.splice(at, 1);
    if (this.closing) return;
    // A connection that could not even be opened fails one waiting request (the server is
    // not there), so a dead server cannot keep the loop reconnecting for ever.
    if (neverConnected) this.waiting.shift()?.done({ error: new Error('could not connect') });
    if (this.waiting.length > 0 && this.open.size < this.options.maxConnections) this.connect();
  }
}
