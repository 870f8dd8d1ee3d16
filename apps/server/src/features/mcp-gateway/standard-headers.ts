/**
 * MCP's standard request headers (revision 2026-07-28, SEP-2243) are part of the act: a load
 * balancer, a WAF or a rate limiter in front of Warden may route or decide on `Mcp-Method` and
 * `Mcp-Name`, while Warden decides on the body. So a request whose headers say anything other
 * than its body is refused (HTTP 400, JSON-RPC -32020 HeaderMismatch) before anything is decided
 * or sent, whatever revision it speaks. A modern request (one that claims 2026-07-28 or later)
 * must carry them; a legacy one may leave them out.
 */
import { isObject } from '../../shared/objects.ts';

export const HEADER_MISMATCH = -32020;

/** Where `Mcp-Name` comes from in the body, per method. */
const NAME_SOURCE: Record<string, string> = {
  'tools/call': 'name',
  'prompts/get': 'name',
  'resources/read': 'uri',
  'tasks/get': 'taskId',
  'tasks/update': 'taskId',
  'tasks/cancel': 'taskId',
};
const VERSION_META = 'io.modelcontextprotocol/protocolVersion';
const SENTINEL = /^=\?base64\?([A-Za-z0-9+/]*={0,2})\?=$/;

/** The first revision whose requests must carry the standard headers. */
const MODERN = '2026-07-28';

export interface HeaderMismatch {
  message: string;
  mismatch: { header: string; body: string };
}

export type Headers = Record<string, string | string[] | undefined>;

/** A header's one value (undefined: absent), or null when it was sent more than once. */
export function single(headers: Headers, name: string): string | null | undefined {
  const value = headers[name];
  return Array.isArray(value) ? (value.length === 1 ? (value[0] as string) : null) : value;
}

/** A header value as sent: plain, or the base64 sentinel for what is not plain ASCII (null: a malformed sentinel). */
export function decoded(value: string): string | null {
  const sentinel = SENTINEL.exec(value);
  if (!sentinel) return value;
  const bytes = Buffer.from(sentinel[1] as string, 'base64');
  // canonical base64 and UTF-8 only: anything else could decode two ways
  if (bytes.toString('base64') !== sentinel[1]) return null;
  const text = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
  try {
    return text.decode(bytes);
  } catch {
    return null;
  }
}

/** What is shown of a value the client sent: enough to see the difference, never a large echo. */
const shown = (value: string) => (value.length > 200 ? `${value.slice(0, 200)}…` : value);

export const mismatch = (header: string, body: string, why: string): HeaderMismatch => ({
  message: `Bad Request: the request headers and body disagree: ${why}`,
  mismatch: { header: shown(header), body: shown(body) },
});

/** Why a POSTed message's standard headers disagree with its body, or null when they agree (or none is sent). */
export function headerMismatch(headers: Headers, body: unknown): HeaderMismatch | null {
  const method = single(headers, 'mcp-method');
  const name = single(headers, 'mcp-name');
  const version = single(headers, 'mcp-protocol-version');
  if (method === null || name === null || version === null)
    return mismatch('', '', 'Mcp-Method, Mcp-Name and MCP-Protocol-Version are each sent once');
  const request = isObject(body) && typeof body.method === 'string' && 'id' in body ? body : undefined;
  const modern = typeof version === 'string' && version >= MODERN;
  if (method === undefined && name === undefined && !modern) return null;
  // a batch names several acts: one header cannot say which
  if (Array.isArray(body)) return mismatch(method ?? name ?? '', '', 'a batch cannot carry Mcp-Method or Mcp-Name');
  if (!request) {
    // a notification or a response: only what is sent is compared
    if (method !== undefined && (!isObject(body) || body.method !== method))
      return mismatch(method, String(isObject(body) ? (body.method ?? '') : ''), 'Mcp-Method names another method than the body');
    return null;
  }
  const bodyMethod = request.method as string;
  if (method === undefined) return mismatch('', bodyMethod, `the body names method ${bodyMethod} but no Mcp-Method header is sent`);
  if (method !== bodyMethod)
    return mismatch(method, bodyMethod, `the body names method ${bodyMethod} but the Mcp-Method header names ${method}`);
  const params = isObject(request.params) ? request.params : {};
  const meta = isObject(params._meta) ? params._meta : {};
  if (version !== undefined && typeof meta[VERSION_META] === 'string' && meta[VERSION_META] !== version)
    return mismatch(version, meta[VERSION_META] as string, 'MCP-Protocol-Version differs from the protocol version in _meta');
  const source = NAME_SOURCE[bodyMethod];
  if (source === undefined) {
    if (name !== undefined) return mismatch(name, '', `${bodyMethod} names nothing, but an Mcp-Name header is sent`);
    return null;
  }
  const named = params[source];
  if (name === undefined) {
    if (modern && named !== undefined) return mismatch('', String(named), `${bodyMethod} needs the Mcp-Name header (its params.${source})`);
    return null;
  }
  const sent = decoded(name);
  if (sent === null) return mismatch(name, String(named ?? ''), 'Mcp-Name carries a malformed base64 sentinel');
  if (sent !== named) return mismatch(sent, String(named ?? ''), `Mcp-Name differs from the body's params.${source}`);
  return null;
}
