/**
 * The HTTP proxy: performs an allowed request through the egress guard and hands the
 * upstream's answer back as data. It sends the facts the policy decided on, nothing else:
 * their method, URL and headers (acts/http-form.ts: the caller's `execution.headers` only,
 * so Warden's own Authorization never travels, minus hop-by-hop headers, Host, Content-Length
 * and X-Warden-*), and their body, a JSON value sent as application/json (none when null).
 * - Redirects are not followed: a 3xx comes back with its Location.
 * - The answer: status, headers (minus hop-by-hop), body as parsed JSON, text or base64 by
 *   content type, cut at 5 MiB (`truncated`), within `timeout_ms` (default 10 s, max 30 s).
 */
import type { HttpExecutionResult } from '@warden/contract';
import { request } from 'undici';
import { describeNetworkError, type EgressGuard, findEgressDenied, InvalidTarget } from '../../egress/guard.ts';
import { ApiError } from '../../shared/errors.ts';
import type { HttpFacts } from '../acts/act.ts';
import { HOP_BY_HOP_HEADERS } from '../acts/http-form.ts';

export const MAX_UPSTREAM_BODY = 5 * 1024 * 1024;
const DEFAULT_TIMEOUT_MS = 10_000;

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

/**
 * `injected`: the brokered credential's header (execution.service.ts), added as the request
 * leaves, never part of the facts (which are recorded and shown).
 */
export async function executeHttp(
  guard: EgressGuard,
  facts: HttpFacts,
  timeoutMs?: number,
  injected: Record<string, string> = {},
): Promise<HttpExecutionResult> {
  let url: URL;
  try {
    url = guard.checkUrl(facts.url);
  } catch (error) {
    if (error instanceof InvalidTarget) throw new ApiError('invalid_execution_url', `execution.url: ${error.message}`);
    throw new ApiError('execution_target_denied', (error as Error).message);
  }
  const timeout = timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const started = performance.now();
  try {
    const res = await request(url, {
      method: facts.method,
      headers: { ...facts.headers, ...injected },
      body: facts.body === null ? undefined : JSON.stringify(facts.body),
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
      if (value !== undefined && !HOP_BY_HOP_HEADERS.has(name)) answered[name] = Array.isArray(value) ? value.join(', ') : value;
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
