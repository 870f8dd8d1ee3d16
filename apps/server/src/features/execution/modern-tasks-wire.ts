/**
 * The tasks extension of MCP 2026-07-28 (`io.modelcontextprotocol/tasks`, SEP-2663) as Warden
 * speaks it to an upstream. The v2 client (2.4.0) refuses a `resultType: "task"` and knows no
 * `tasks/*` method in the revision, so these requests are sent as the revision frames them,
 * one JSON-RPC POST each: the `_meta` envelope (revision, client info, the capabilities with the
 * extension declared), `Mcp-Method` and `Mcp-Name` (the tool's name, or the task's id, which the
 * extension routes by), over the session's own fetch (the egress guard, its read bound, the
 * server's credential).
 */
import { randomUUID } from 'node:crypto';
import { ErrorCode, McpError } from '@modelcontextprotocol/sdk/types.js';
import { TASKS_EXTENSION } from '../../shared/mcp-extensions.ts';
import { isObject } from '../../shared/objects.ts';

const REVISION = '2026-07-28';

/**
 * A header value as the revision sends it (as the v2 SDK's `encodeMcpParamValue` does): plain
 * when it is a safe ASCII field value, else the base64 sentinel — so also when it is empty, has
 * leading or trailing whitespace, or already looks like a sentinel.
 */
function headerValue(value: string): string {
  const plain =
    value.length > 0 &&
    value === value.trim() &&
    !(value.startsWith('=?base64?') && value.endsWith('?=')) &&
    /^[\t\x20-\x7e]*$/.test(value);
  return plain ? value : `=?base64?${Buffer.from(value, 'utf8').toString('base64')}?=`;
}

/** How much of an answer's stream is read at most, looking for the answer. */
const MAX_ANSWER_BYTES = 8 * 1024 * 1024;

/** A JSON-RPC message's data, or undefined for an event that is not JSON (a server may send others). */
function parsed(data: string): unknown {
  try {
    return JSON.parse(data);
  } catch {
    return undefined;
  }
}

/**
 * The JSON-RPC answer with this id: from a JSON body, or from an event stream read as it comes
 * and left as soon as the answer is there; never more than MAX_ANSWER_BYTES.
 */
async function answerOf(answer: Response, id: string): Promise<Record<string, unknown> | undefined> {
  const isAnswer = (message: unknown): message is Record<string, unknown> => isObject(message) && message.id === id;
  const reader = answer.body?.getReader();
  // the egress guard's fetch hands over a bounded JSON answer (or a stream's one message) as text
  if (!reader) {
    const message = parsed(await answer.text());
    return isAnswer(message) ? message : undefined;
  }
  const streamed = (answer.headers.get('content-type') ?? '').startsWith('text/event-stream');
  const decoder = new TextDecoder();
  let text = '';
  let read = 0;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (value) {
        read += value.byteLength;
        if (read > MAX_ANSWER_BYTES) throw new Error(`the answer is larger than ${MAX_ANSWER_BYTES} bytes`);
        text += decoder.decode(value, { stream: !done });
      }
      if (streamed) {
        // whole events only: each ends with an empty line (CRLF, LF or CR)
        const events = text.split(/\r\n\r\n|\n\n|\r\r/);
        text = done ? '' : (events.pop() ?? '');
        for (const event of events) {
          const data = event
            .split(/\r\n|\r|\n/)
            .filter((line) => line.startsWith('data:'))
            .map((line) => line.slice(5).replace(/^ /, ''))
            .join('\n');
          const message = data ? parsed(data) : undefined;
          if (isAnswer(message)) return message;
        }
      }
      if (done) break;
    }
  } finally {
    await reader.cancel().catch(() => undefined);
  }
  const message = streamed ? undefined : parsed(text);
  return isAnswer(message) ? message : undefined;
}

export interface TaskWireOptions {
  timeout: number;
  signal?: AbortSignal;
}

/**
 * Sends one request of the extension (`tools/call` declaring it, `tasks/get`, `tasks/update`,
 * `tasks/cancel`) and answers its result as the upstream sent it; a JSON-RPC error is thrown as
 * an McpError with the upstream's code, a transport failure as what fetch threw.
 */
export async function taskRequest(
  fetch: typeof globalThis.fetch,
  url: URL,
  capabilities: Record<string, unknown>,
  request: { method: string; name: string; params: Record<string, unknown> },
  options: TaskWireOptions,
): Promise<Record<string, unknown>> {
  const id = randomUUID();
  const declared = {
    ...capabilities,
    extensions: { ...(isObject(capabilities.extensions) ? capabilities.extensions : {}), [TASKS_EXTENSION]: {} },
  };
  const body = {
    jsonrpc: '2.0',
    id,
    method: request.method,
    params: {
      ...request.params,
      _meta: {
        'io.modelcontextprotocol/protocolVersion': REVISION,
        'io.modelcontextprotocol/clientInfo': { name: 'warden', version: '1.0.0' },
        'io.modelcontextprotocol/clientCapabilities': declared,
      },
    },
  };
  const timeout = AbortSignal.timeout(options.timeout);
  const answered = await fetch(url, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      'mcp-protocol-version': REVISION,
      'mcp-method': request.method,
      'mcp-name': headerValue(request.name),
    },
    body: JSON.stringify(body),
    signal: options.signal ? AbortSignal.any([options.signal, timeout]) : timeout,
  })
    .then((answer) => answerOf(answer, id).then((message) => ({ answer, message })))
    .catch((error: unknown) => {
      if (timeout.aborted) throw new McpError(ErrorCode.RequestTimeout, `Request timed out after ${options.timeout} ms`);
      throw error;
    });
  const { message } = answered;
  if (!message) throw new Error(`the server answered ${request.method} with HTTP ${answered.answer.status} and no JSON-RPC answer`);
  if (isObject(message.error)) {
    const { code, message: text, data } = message.error;
    throw new McpError(typeof code === 'number' ? code : ErrorCode.InternalError, String(text ?? 'error'), data);
  }
  if (!isObject(message.result)) throw new Error(`the server answered ${request.method} with no result`);
  return message.result;
}
