/**
 * The gateway's most common request, answered without the SDK's server: one `tools/call`, no
 * task, no progress asked for, from a client that speaks the transport as the SDK's clients do
 * (one `Content-Type: application/json`, a Host, an Accept of both types, a protocol version
 * the SDK takes).
 * Building an SDK `Server` and transport for each such request (with its web Request and
 * Response) cost Warden more CPU per call than the call's decision
 * (docs/decisions/0013-mcp-gateway.md). Everything else — and anything about a request that is
 * not exactly this — goes to the SDK's server, which then answers it (its errors included), so
 * the SDK stays the one reading of the protocol.
 *
 * The answer is what the SDK's stateless JSON transport answers the same request: HTTP 200,
 * `Content-Type: application/json`, `{ result, jsonrpc, id }`, or the JSON-RPC error its
 * Protocol makes of a handler's error.
 */
import type { IncomingMessage } from 'node:http';
import { ErrorCode, RELATED_TASK_META_KEY, SUPPORTED_PROTOCOL_VERSIONS } from '@modelcontextprotocol/sdk/types.js';
import { takesTasks } from '../../shared/mcp-extensions.ts';
import { isObject } from '../../shared/objects.ts';

/** A tools/call the gateway answers itself: its JSON-RPC id, the name called, its arguments and `_meta`. */
export interface PlainToolCall {
  id: string | number;
  name: string;
  args: Record<string, unknown>;
  meta?: Record<string, unknown>;
}

const MESSAGE_KEYS = new Set(['jsonrpc', 'id', 'method', 'params']);

/** Content-Type headers among a request's raw headers (Node keeps the first of several; the SDK reads them all). */
const contentTypes = (raw: string[]) => {
  let count = 0;
  for (let i = 0; i < raw.length; i += 2) if (raw[i]?.toLowerCase() === 'content-type') count++;
  return count;
};

/** The request's tools/call when it is one the gateway answers itself; undefined for anything else. */
export function plainToolCall(req: Pick<IncomingMessage, 'headers' | 'rawHeaders'>, body: unknown): PlainToolCall | undefined {
  const version = req.headers['mcp-protocol-version'];
  if (version !== undefined && (typeof version !== 'string' || !SUPPORTED_PROTOCOL_VERSIONS.includes(version))) return undefined;
  return plainCall(req, body);
}

const MODERN = '2026-07-28';
const ENVELOPE = {
  version: 'io.modelcontextprotocol/protocolVersion',
  capabilities: 'io.modelcontextprotocol/clientCapabilities',
  info: 'io.modelcontextprotocol/clientInfo',
};
const ENVELOPE_KEYS = new Set(Object.values(ENVELOPE));

/**
 * The same for revision 2026-07-28 (the v2 SDK's wire otherwise, modern.ts): its header and
 * `_meta` name the revision, the envelope holds nothing but the revision, the client's
 * capabilities and its info (a log level, a trace context or a progress token go to the SDK).
 * `capabilities`: what the client declared in its envelope.
 */
export function modernPlainToolCall(
  req: Pick<IncomingMessage, 'headers' | 'rawHeaders'>,
  body: unknown,
): (PlainToolCall & { capabilities: Record<string, unknown> }) | undefined {
  if (req.headers['mcp-protocol-version'] !== MODERN || req.headers['mcp-method'] !== 'tools/call') return undefined;
  const call = plainCall(req, body);
  const meta = call?.meta;
  if (!call || !meta || meta[ENVELOPE.version] !== MODERN || !isObject(meta[ENVELOPE.capabilities])) return undefined;
  if (Object.keys(meta).some((key) => !ENVELOPE_KEYS.has(key))) return undefined;
  // a client that takes tasks may be answered one (task-extension.ts)
  if (takesTasks(meta[ENVELOPE.capabilities])) return undefined;
  // a retry of input rounds (inputResponses, requestState) is the SDK's to parse
  if (Object.keys((body as { params: object }).params).some((key) => !PLAIN_PARAMS.has(key))) return undefined;
  const { meta: _envelope, ...plain } = call;
  return { ...plain, capabilities: meta[ENVELOPE.capabilities] as Record<string, unknown> };
}

const PLAIN_PARAMS = new Set(['name', 'arguments', '_meta']);

/** The transport and message checks both eras' plain calls share. */
function plainCall(req: Pick<IncomingMessage, 'headers' | 'rawHeaders'>, body: unknown): PlainToolCall | undefined {
  const { headers } = req;
  const accept = headers.accept ?? '';
  if (
    headers['content-type'] !== 'application/json' ||
    contentTypes(req.rawHeaders) !== 1 ||
    !headers.host ||
    !accept.includes('application/json') ||
    !accept.includes('text/event-stream')
  )
    return undefined;
  if (!isObject(body) || body.jsonrpc !== '2.0' || body.method !== 'tools/call') return undefined;
  if (Object.keys(body).some((key) => !MESSAGE_KEYS.has(key))) return undefined;
  const { id, params } = body;
  if (!(typeof id === 'string' || Number.isSafeInteger(id)) || !isObject(params)) return undefined;
  const { name, arguments: args, _meta: meta } = params;
  if (typeof name !== 'string' || 'task' in params) return undefined;
  if (args !== undefined && !isObject(args)) return undefined;
  if (meta !== undefined && (!isObject(meta) || 'progressToken' in meta || RELATED_TASK_META_KEY in meta)) return undefined;
  return { id: id as string | number, name, args: args ?? {}, ...(meta ? { meta } : {}) };
}

/** The JSON-RPC answer to the call, as the SDK's Protocol makes it of a handler's result or error. */
export function toolCallAnswer(id: string | number, outcome: { result: unknown } | { error: unknown }): string {
  if ('result' in outcome) return JSON.stringify({ result: outcome.result, jsonrpc: '2.0', id });
  const error = (outcome.error ?? {}) as { code?: unknown; message?: string; data?: unknown };
  return JSON.stringify({
    jsonrpc: '2.0',
    id,
    error: {
      code: Number.isSafeInteger(error.code) ? error.code : ErrorCode.InternalError,
      message: error.message ?? 'Internal error',
      ...(error.data !== undefined && { data: error.data }),
    },
  });
}
