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

/** A header value as the revision sends it: plain printable ASCII, else the base64 sentinel. */
const headerValue = (value: string) =>
  /^[\x20-\x7e]*$/.test(value) && value.trim() === value ? value : `=?base64?${Buffer.from(value, 'utf8').toString('base64')}?=`;

/** The JSON-RPC answer with this id, from a JSON body or an event stream. */
function answerOf(text: string, contentType: string, id: string): Record<string, unknown> | undefined {
  const messages: unknown[] = [];
  if (contentType.startsWith('text/event-stream')) {
    for (const event of text.split(/\r?\n\r?\n/)) {
      const data = event
        .split(/\r?\n/)
        .filter((line) => line.startsWith('data:'))
        .map((line) => line.slice(5).replace(/^ /, ''))
        .join('\n');
      if (data) messages.push(JSON.parse(data));
    }
  } else messages.push(JSON.parse(text));
  return messages.find((message): message is Record<string, unknown> => isObject(message) && message.id === id);
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
  const answer = await fetch(url, {
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
  }).catch((error: unknown) => {
    if (timeout.aborted) throw new McpError(ErrorCode.RequestTimeout, `Request timed out after ${options.timeout} ms`);
    throw error;
  });
  const text = await answer.text();
  let message: Record<string, unknown> | undefined;
  try {
    message = answerOf(text, answer.headers.get('content-type') ?? '', id);
  } catch {
    message = undefined;
  }
  if (!message) throw new Error(`the server answered ${request.method} with HTTP ${answer.status} and no JSON-RPC answer`);
  if (isObject(message.error)) {
    const { code, message: text, data } = message.error;
    throw new McpError(typeof code === 'number' ? code : ErrorCode.InternalError, String(text ?? 'error'), data);
  }
  if (!isObject(message.result)) throw new Error(`the server answered ${request.method} with no result`);
  return message.result;
}
