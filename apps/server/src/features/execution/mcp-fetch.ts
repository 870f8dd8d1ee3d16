/**
 * The fetch the SDK's Streamable HTTP client transport uses upstream, through the egress guard
 * (its URL check, and its dispatcher, which checks the addresses a name resolves to): undici's
 * `request`, cheaper per call than undici's WHATWG fetch. Redirects are not followed (the SDK
 * may follow one within the same origin, as with any fetch).
 *
 * A POST of a request answered with an SSE stream whose first message is that request's
 * response (what an SDK-built server sends for a call without progress) is handed to the SDK
 * as that one JSON message, as if the server had answered `application/json`: the SDK's SSE
 * path (a text decoder stream and an event parser stream over web streams, per call) cost more
 * of Warden's CPU than the call's decision (docs/decisions/0013-mcp-gateway.md). Anything else
 * on the stream first (a progress or log notification, a request of the server's, a response
 * to another id, a stream that ends or fails with no response, more than PEEK_LIMIT bytes
 * before a message) hands the SDK the stream itself, from its first byte: it then sees exactly
 * what the server sent, as it arrives. What follows the response on its stream is read and
 * dropped (the server should close the stream there; a `retry` or `id` field before it only
 * matters to a stream the SDK would resume, and a stream that answered is not resumed). Every
 * other answer is read whole (the SDK reads it whole too), except a GET's SSE stream (the
 * server's own messages) and the answer to a POST without a request, passed as they are.
 *
 * What the upstream sends is bounded per message (`maxMessageBytes`, WARDEN_MCP_MAX_MESSAGE_BYTES):
 * a JSON answer, and each event of an SSE stream, counted as the bytes arrive, before anything
 * is parsed. Past the limit the answer is no longer read (its request to the upstream is
 * aborted, which leaves the upstream session as it was) and the SDK is given, for a POST of a
 * request, a JSON-RPC error answering that request (`tooLargeOf` recognises it), so the call
 * fails at once rather than at its timeout; a GET's stream fails (the SDK's client reconnects it).
 */
import { randomUUID } from 'node:crypto';
import { STATUS_CODES } from 'node:http';
import type { Readable } from 'node:stream';
import type { EgressGuard } from '../../egress/guard.ts';
import { isObject } from '../../shared/objects.ts';

/** Default of WARDEN_MCP_MAX_MESSAGE_BYTES: one upstream message (a JSON answer, an SSE event) at most. */
export const DEFAULT_MAX_MESSAGE_BYTES = 4 * 1024 * 1024;

/** Statuses whose answer has no body (a Response refuses one). */
const NULL_BODY = new Set([204, 205, 304]);
/**
 * Bytes of an SSE answer read while looking for its first message, at most: past them, the
 * stream goes to the SDK's parser (a large result, or a stream of keep-alives, is not held).
 */
const PEEK_LIMIT = 256 * 1024;

/**
 * What the SDK's transport reads of an answer read whole: its status, headers and text (and
 * its JSON, when it was parsed already). A light object, not a Response (which builds a web
 * stream for its body on Node 20).
 */
function answered(status: number, headers: Headers, text: string, json: () => unknown = () => JSON.parse(text)): Response {
  const answer = {
    status,
    statusText: STATUS_CODES[status] ?? '',
    ok: status >= 200 && status < 300,
    redirected: false,
    type: 'basic',
    url: '',
    headers,
    body: null,
    bodyUsed: false,
    text: async () => text,
    json: async () => json(),
  };
  return answer as unknown as Response;
}

const mediaType = (headers: Headers) => (headers.get('content-type') ?? '').split(';')[0]?.trim().toLowerCase();

/** An upstream message past the limit: the error a call that received one fails with. */
export class UpstreamMessageTooLarge extends Error {
  constructor(readonly limit: number) {
    super(`its message exceeds ${limit} bytes, the most Warden reads of one (WARDEN_MCP_MAX_MESSAGE_BYTES)`);
  }
}

/**
 * The `data` key, and this process's value for it, of the JSON-RPC error given to the SDK in
 * place of an oversized answer: random, so an upstream cannot make its own error pass for one.
 */
const TOO_LARGE_KEY = 'dev.agentwarden/message_too_large';
const TOO_LARGE_MARK = randomUUID();

/** The JSON-RPC error answer standing for an upstream answer to `requestId` past `limit`. */
function tooLargeAnswer(requestId: string | number, limit: number): string {
  const error = new UpstreamMessageTooLarge(limit);
  return JSON.stringify({
    jsonrpc: '2.0',
    id: requestId,
    error: { code: -32603, message: error.message, data: { [TOO_LARGE_KEY]: TOO_LARGE_MARK, limit } },
  });
}

/** The UpstreamMessageTooLarge an SDK error stands for (the error tooLargeAnswer made), if any. */
export function tooLargeOf(error: unknown): UpstreamMessageTooLarge | undefined {
  if (error instanceof UpstreamMessageTooLarge) return error;
  const data = isObject(error) && isObject(error.data) ? error.data : undefined;
  return data?.[TOO_LARGE_KEY] === TOO_LARGE_MARK && typeof data.limit === 'number' ? new UpstreamMessageTooLarge(data.limit) : undefined;
}

/** Stops reading a body and aborts its request (undici then emits an abort error, expected here). */
function abandon(body: Readable): void {
  body.on('error', () => undefined);
  body.destroy();
}

/**
 * A body read whole, or undefined when it is more than `limit` bytes (declared, or as it
 * arrives): then it is no longer read, and its request is aborted.
 */
async function readBounded(body: Readable, limit: number, declared: string | null): Promise<string | undefined> {
  if (declared !== null && Number(declared) > limit) {
    abandon(body);
    return undefined;
  }
  const chunks: Buffer[] = [];
  let bytes = 0;
  try {
    for await (const chunk of body as AsyncIterable<Buffer>) {
      bytes += chunk.length;
      if (bytes > limit) {
        abandon(body);
        return undefined;
      }
      chunks.push(chunk);
    }
  } finally {
    if (!body.readableEnded) abandon(body);
  }
  return chunks.length === 1 ? (chunks[0] as Buffer).toString('utf8') : Buffer.concat(chunks).toString('utf8');
}

export function guardedFetch(guard: EgressGuard, maxMessageBytes = DEFAULT_MAX_MESSAGE_BYTES): typeof fetch {
  const peekLimit = Math.min(PEEK_LIMIT, maxMessageBytes);
  return async (input, init = {}) => {
    const url = guard.checkUrl(input instanceof Request ? input.url : String(input));
    const headers: Record<string, string> = {};
    new Headers(init.headers).forEach((value, name) => {
      headers[name] = value;
    });
    const method = init.method ?? 'GET';
    const answer = await guard.dispatcher.request({
      origin: url.origin,
      path: `${url.pathname}${url.search}`,
      method: method as 'GET',
      headers,
      body: init.body as string | undefined,
      signal: init.signal ?? undefined,
    });
    const status = answer.statusCode;
    const responseHeaders = new Headers();
    for (const [name, value] of Object.entries(answer.headers)) {
      if (value === undefined) continue;
      for (const one of Array.isArray(value) ? value : [value]) responseHeaders.append(name, one);
    }
    if (NULL_BODY.has(status)) {
      answer.body.resume();
      return new Response(null, { status, headers: responseHeaders });
    }
    const success = status >= 200 && status < 300;
    if (mediaType(responseHeaders) !== 'text/event-stream') {
      const text = await readBounded(answer.body, maxMessageBytes, responseHeaders.get('content-length'));
      if (text !== undefined) return answered(status, responseHeaders, text);
      const requestId = method === 'POST' && success ? requestIdOf(init.body) : undefined;
      if (requestId === undefined) return answered(status, responseHeaders, new UpstreamMessageTooLarge(maxMessageBytes).message);
      // its other headers kept: the SDK reads the session id of every answer
      responseHeaders.set('content-type', 'application/json');
      responseHeaders.delete('content-length');
      return answered(status, responseHeaders, tooLargeAnswer(requestId, maxMessageBytes));
    }
    const requestId = method === 'POST' && success ? requestIdOf(init.body) : undefined;
    const events = new SseEventBytes(maxMessageBytes, requestId);
    if (requestId === undefined) return new Response(webStream(answer.body, events), { status, headers: responseHeaders });
    const first = await firstMessage(answer.body, requestId, peekLimit, events);
    if (first instanceof ReadableStream) return new Response(first, { status, headers: responseHeaders });
    responseHeaders.set('content-type', 'application/json');
    return answered(status, responseHeaders, first.data, () => first.message);
  };
}

/** The id of the JSON-RPC request a POST carries; undefined for a notification, a response or a batch. */
function requestIdOf(body: unknown): string | number | undefined {
  if (typeof body !== 'string') return undefined;
  try {
    const message: unknown = JSON.parse(body);
    if (!isObject(message) || !('method' in message)) return undefined;
    return typeof message.id === 'string' || typeof message.id === 'number' ? message.id : undefined;
  } catch {
    return undefined;
  }
}

/** What a Node stream did while it was read: its chunks, and how it ended (if it did). */
interface Read {
  chunks: Buffer[];
  ended: boolean;
  error?: unknown;
}

/**
 * Reads an SSE stream up to its first event with data: the event's data when it is the JSON-RPC
 * response to `requestId` (the rest of the stream is drained), otherwise the whole stream as a
 * web stream, from its first byte. Events without data (priming events, keep-alives), comments
 * and events of another type than `message` are skipped, as the SDK skips them.
 */
function firstMessage(
  body: Readable,
  requestId: string | number,
  peekLimit: number,
  events: SseEventBytes,
): Promise<FirstResponse | ReadableStream<Uint8Array>> {
  return new Promise((resolve) => {
    const read: Read = { chunks: [], ended: false };
    const decoder = new TextDecoder();
    let bytes = 0;
    let text = '';
    /** Where in `text` a line end may still be (before it, the unfinished line has none). */
    let unscanned = 0;
    /** The last line ended with a CR at the end of a chunk: an LF starting the next one belongs to it. */
    let afterCr = false;
    let data: string[] = [];
    let type = '';
    const settle = (outcome: FirstResponse | undefined) => {
      body.pause();
      body.off('data', onData);
      body.off('end', onEnd);
      body.off('error', onError);
      if (outcome === undefined) return resolve(webStream(body, events, read));
      // the response is all the SDK waits for: what follows it is read and dropped
      body.on('error', () => undefined);
      body.resume();
      resolve(outcome);
    };
    const onData = (chunk: Buffer) => {
      read.chunks.push(chunk);
      bytes += chunk.length;
      if (bytes > peekLimit) return settle(undefined);
      text += decoder.decode(chunk, { stream: true });
      if (afterCr && text.length > 0) {
        if (text.charCodeAt(0) === 10) text = text.slice(1);
        afterCr = false;
      }
      for (let start = 0; ; ) {
        const end = lineEnd(text, Math.max(start, unscanned));
        if (end === undefined) {
          text = text.slice(start);
          unscanned = text.length;
          return;
        }
        afterCr = end.next === text.length && text.charCodeAt(end.at) === 13;
        const line = text.slice(start, end.at);
        start = end.next;
        if (line === '') {
          const message = data.join('\n');
          if (message !== '' && (type === '' || type === 'message')) return settle(responseTo(requestId, message));
          data = [];
          type = '';
          continue;
        }
        const colon = line.indexOf(':');
        if (colon === 0) continue;
        const field = colon < 0 ? line : line.slice(0, colon);
        const value = colon < 0 ? '' : line.slice(colon + (line[colon + 1] === ' ' ? 2 : 1));
        if (field === 'data') data.push(value);
        else if (field === 'event') type = value;
      }
    };
    const onEnd = () => {
      read.ended = true;
      settle(undefined);
    };
    const onError = (error: unknown) => {
      read.ended = true;
      read.error = error;
      settle(undefined);
    };
    body.on('data', onData);
    body.once('end', onEnd);
    body.once('error', onError);
  });
}

/**
 * Where the first line end at or after `from` is (CR LF, LF or CR) and the next line begins;
 * undefined when there is none yet. A CR that ends the text ends its line at once (its LF, if
 * one comes, is dropped from the next chunk): a stream that pauses there is not waited for.
 */
function lineEnd(text: string, from: number): { at: number; next: number } | undefined {
  for (let i = from; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 10) return { at: i, next: i + 1 };
    if (c === 13) return { at: i, next: text.charCodeAt(i + 1) === 10 ? i + 2 : i + 1 };
  }
  return undefined;
}

/** An SSE event's data that is one JSON-RPC response, and the response. */
interface FirstResponse {
  data: string;
  message: object;
}

/** The data and its message when it is the JSON-RPC response to `requestId` (a result or an error object, no method). */
function responseTo(requestId: string | number, data: string): FirstResponse | undefined {
  try {
    const message: unknown = JSON.parse(data);
    if (!isObject(message) || message.jsonrpc !== '2.0' || message.id !== requestId || 'method' in message) return undefined;
    return isObject(message.result) !== isObject(message.error) ? { data, message } : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Counts the bytes of an SSE stream's current event (its lines up to the blank line that ends
 * it, line ends included), chunk by chunk as they arrive, with no decoding.
 */
class SseEventBytes {
  private size = 0;
  private lineStart = true;
  private afterCr = false;

  constructor(
    readonly limit: number,
    /** The request whose answer the stream carries (a POST's), undefined for a GET's stream. */
    readonly requestId: string | number | undefined,
  ) {}

  /** False once the current event has grown past the limit. */
  fits(chunk: Uint8Array): boolean {
    let { size, lineStart, afterCr } = this;
    for (let i = 0; i < chunk.length; i++) {
      const c = chunk[i];
      if (c === 10 || c === 13) {
        // the LF of a CR LF belongs to the line end the CR made
        if (c === 10 && afterCr) {
          afterCr = false;
          continue;
        }
        afterCr = c === 13;
        if (lineStart) size = 0;
        else {
          lineStart = true;
          size += 1;
        }
        continue;
      }
      afterCr = false;
      lineStart = false;
      if (++size > this.limit) return false;
    }
    this.size = size;
    this.lineStart = lineStart;
    this.afterCr = afterCr;
    return true;
  }
}

/**
 * A Node stream as a web ReadableStream, with backpressure, after what was already read of it
 * (`before`: its chunks, and whether it ended). Not Readable.toWeb: on Node 20 it enqueues data
 * that arrives after the reader cancelled, an uncaught exception. An event past `events`' limit
 * ends it: the stream is no longer read, and a POST's ends with an error answering its request
 * (after a blank line, so that what was passed of the event is dropped as a malformed one),
 * a GET's fails.
 */
export function webStream(body: Readable, events: SseEventBytes, before: Read = { chunks: [], ended: false }): ReadableStream<Uint8Array> {
  let finished = false;
  const overflow = (controller: ReadableStreamDefaultController<Uint8Array>) => {
    finished = true;
    abandon(body);
    if (events.requestId === undefined) return controller.error(new UpstreamMessageTooLarge(events.limit));
    controller.enqueue(Buffer.from(`\n\nevent: message\ndata: ${tooLargeAnswer(events.requestId, events.limit)}\n\n`));
    controller.close();
  };
  return new ReadableStream<Uint8Array>({
    start(controller) {
      for (const chunk of before.chunks) {
        if (!events.fits(chunk)) return overflow(controller);
        controller.enqueue(chunk);
      }
      if (before.ended) {
        // an error is raised once what came before it is read (raising it now would drop it)
        if (before.error === undefined) controller.close();
        return;
      }
      body.on('data', (chunk: Buffer) => {
        if (finished) return;
        if (!events.fits(chunk)) return overflow(controller);
        controller.enqueue(chunk);
        if ((controller.desiredSize ?? 1) <= 0) body.pause();
      });
      body.once('end', () => {
        if (finished) return;
        finished = true;
        controller.close();
      });
      body.once('error', (error) => {
        if (finished) return;
        finished = true;
        controller.error(error);
      });
    },
    pull(controller) {
      if (before.ended) {
        if (before.error !== undefined && !finished) {
          finished = true;
          controller.error(before.error);
        }
        return;
      }
      if (!finished) body.resume();
    },
    cancel() {
      finished = true;
      body.destroy();
    },
  });
}
