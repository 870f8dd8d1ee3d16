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
 */
import { STATUS_CODES } from 'node:http';
import type { Readable } from 'node:stream';
import type { EgressGuard } from '../../egress/guard.ts';
import { isObject } from '../../shared/objects.ts';

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

export function guardedFetch(guard: EgressGuard): typeof fetch {
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
    if (mediaType(responseHeaders) !== 'text/event-stream') return answered(status, responseHeaders, await answer.body.text());
    const requestId = method === 'POST' && status >= 200 && status < 300 ? requestIdOf(init.body) : undefined;
    if (requestId === undefined) return new Response(webStream(answer.body), { status, headers: responseHeaders });
    const first = await firstMessage(answer.body, requestId);
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
function firstMessage(body: Readable, requestId: string | number): Promise<FirstResponse | ReadableStream<Uint8Array>> {
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
      if (outcome === undefined) return resolve(webStream(body, read));
      // the response is all the SDK waits for: what follows it is read and dropped
      body.on('error', () => undefined);
      body.resume();
      resolve(outcome);
    };
    const onData = (chunk: Buffer) => {
      read.chunks.push(chunk);
      bytes += chunk.length;
      if (bytes > PEEK_LIMIT) return settle(undefined);
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
 * A Node stream as a web ReadableStream, with backpressure, after what was already read of it
 * (`before`: its chunks, and whether it ended). Not Readable.toWeb: on Node 20 it enqueues data
 * that arrives after the reader cancelled, an uncaught exception.
 */
export function webStream(body: Readable, before: Read = { chunks: [], ended: false }): ReadableStream<Uint8Array> {
  let finished = false;
  return new ReadableStream<Uint8Array>({
    start(controller) {
      for (const chunk of before.chunks) controller.enqueue(chunk);
      if (before.ended) {
        // an error is raised once what came before it is read (raising it now would drop it)
        if (before.error === undefined) controller.close();
        return;
      }
      body.on('data', (chunk: Buffer) => {
        if (finished) return;
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
      body.resume();
    },
    cancel() {
      finished = true;
      body.destroy();
    },
  });
}
