/**
 * The HTTP proxy: performs an allowed request through the egress guard and hands the
 * upstream's answer back as data.
 * - Request headers: the caller's `execution.headers` only (Warden's own Authorization never
 *   travels), minus hop-by-hop headers, Host, Content-Length and X-Warden-*.
 * - Body: a JSON value is sent as application/json; null or absent sends none.
 * - Redirects are not followed: a 3xx comes back with its Location.
 * - The answer: status, headers (minus hop-by-hop), body as parsed JSON, text or base64 by
 *   content type, cut at 5 MiB (`truncated`), within `timeout_ms` (default 10 s, max 30 s).
 */
import type { HttpExecution, HttpExecutionResult } from '@warden/contract';
import { request } from 'undici';
import { describeNetworkError, type EgressGuard, findEgressDenied, InvalidTarget } from '../../egress/guard.ts';
import { ApiError } from '../../shared/errors.ts';

export const MAX_UPSTREAM_BODY = 5 * 1024 * 1024;
const DEFAULT_TIMEOUT_MS = 10_000;
const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-authenticate',
  'proxy-authorization',
  'proxy-connection',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
]);
const NEVER_SENT = new Set([...HOP_BY_HOP, 'host', 'content-length', 'expect']);

const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
const UNSAFE_VALUE = /[\r\n\0]/;

/**
 * The caller's headers minus what never travels: hop-by-hop headers (the fixed list and any
 * named in the caller's own Connection header, RFC 9110 §7.6.1), Host, Content-Length,
 * Expect and X-Warden-*. A malformed name or a value with CR, LF or NUL is the caller's
 * error (400 invalid_execution), refused before anything is sent.
 */
function outgoingHeaders(headers: Record<string, string> | undefined, hasBody: boolean): Record<string, string> {
  const declaredHopByHop = new Set(
    Object.entries(headers ?? {})
      .filter(([name]) => name.toLowerCase() === 'connection')
      .flatMap(([, value]) => value.split(',').map((token) => token.trim().toLowerCase())),
  );
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers ?? {})) {
    if (!TOKEN.test(name) || UNSAFE_VALUE.test(value)) {
      throw new ApiError('invalid_execution', `execution.headers: '${name.slice(0, 64)}' is not a valid header name and value`);
    }
    const lower = name.toLowerCase();
    if (!NEVER_SENT.has(lower) && !declaredHopByHop.has(lower) && !lower.startsWith('x-warden-')) out[lower] = value;
  }
  if (hasBody) out['content-type'] ??= 'application/json';
  return out;
}

function decodeBody(bytes: Buffer, contentType: string, truncated: boolean): Pick<HttpExecutionResult, 'body' | 'body_encoding'> {
  if (bytes.length === 0) return { body: null, body_encoding: 'none' };
  const type = contentType.toLowerCase();
  if (!truncated && /[/+]json\b/.test(type)) {
    try {
      return { body: JSON.parse(bytes.toString('utf8')), body_encoding: 'json' };
    } catch {
      // announced JSON but is not: hand it back as text
    }
  }
  if (type.startsWith('text/') || /[/+](json|xml)\b|javascript|x-www-form-urlencoded/.test(type))
    return { body: bytes.toString('utf8'), body_encoding: 'text' };
  return { body: bytes.toString('base64'), body_encoding: 'base64' };
}

export async function executeHttp(guard: EgressGuard, execution: HttpExecution): Promise<HttpExecutionResult> {
  let url: URL;
  try {
    url = guard.checkUrl(execution.url);
  } catch (error) {
    if (error instanceof InvalidTarget) throw new ApiError('invalid_execution_url', `execution.url: ${error.message}`);
    throw new ApiError('execution_target_denied', (error as Error).message);
  }
  const hasBody = execution.body !== undefined && execution.body !== null;
  const timeout = execution.timeout_ms ?? DEFAULT_TIMEOUT_MS;
  const headers = outgoingHeaders(execution.headers, hasBody);
  const started = performance.now();
  try {
    const res = await request(url, {
      method: execution.method,
      headers,
      body: hasBody ? JSON.stringify(execution.body) : undefined,
      dispatcher: guard.dispatcher,
      headersTimeout: timeout,
      bodyTimeout: timeout,
      signal: AbortSignal.timeout(timeout),
    });
    const chunks: Buffer[] = [];
    let size = 0;
    let truncated = false;
    for await (const chunk of res.body as AsyncIterable<Buffer>) {
      if (size + chunk.length > MAX_UPSTREAM_BODY) {
        chunks.push(chunk.subarray(0, MAX_UPSTREAM_BODY - size));
        truncated = true;
        res.body.destroy();
        break;
      }
      chunks.push(chunk);
      size += chunk.length;
    }
    const answered: Record<string, string> = {};
    for (const [name, value] of Object.entries(res.headers)) {
      if (value !== undefined && !HOP_BY_HOP.has(name)) answered[name] = Array.isArray(value) ? value.join(', ') : value;
    }
    return {
      mode: 'http_proxy',
      status: res.statusCode,
      headers: answered,
      ...decodeBody(Buffer.concat(chunks), answered['content-type'] ?? '', truncated),
      truncated,
      duration_ms: Math.round(performance.now() - started),
    };
  } catch (error) {
    const denied = findEgressDenied(error);
    if (denied) throw new ApiError('execution_target_denied', denied.message, { cause: error });
    const reason = (error as Error).name === 'TimeoutError' ? `no answer within ${timeout} ms` : describeNetworkError(error);
    throw new ApiError('execution_failed', `the upstream request failed: ${reason}`, { cause: error });
  }
}
