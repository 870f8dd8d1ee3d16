/**
 * The transport under the generated client: one fetch per attempt, each bounded by a timeout,
 * retried on 429/503 and network failures when that is safe.
 *
 * "Safe" means the retry cannot apply an action twice. Idempotent methods (GET, HEAD, PUT,
 * DELETE, OPTIONS) are retried as they are. A POST gets an `Idempotency-Key` (a random UUID,
 * unless the caller sent one), the same on every attempt, so the server answers a retry of an
 * applied POST with the first answer instead of running it again: POSTs are retried like GETs,
 * and also on 409 `idempotency_key_in_progress` (the first attempt is still running). PATCH,
 * which the server does not deduplicate, is retried only when the connection was never
 * established (refused, DNS failure, unreachable host), which a browser cannot tell apart from
 * other failures: there, it is never retried.
 */
import { parseRetryAfter, WardenError } from './errors.js';

export interface RetryOptions {
  /** Retries after the first attempt. Default 2; 0 disables retries. */
  maxRetries?: number;
  /** First backoff delay when the answer carries no `Retry-After`. Default 500 ms. */
  initialDelayMs?: number;
  /** Ceiling of the exponential backoff. Default 8 000 ms. */
  maxDelayMs?: number;
  /**
   * Longest `Retry-After` the SDK waits for. A longer one is not waited out: the call fails
   * at once with the 429/503 `WardenError` (its `retryAfter` says how long to wait).
   * Default 60 000 ms.
   */
  maxRetryAfterMs?: number;
}

export interface TransportSettings extends Required<RetryOptions> {
  /** Per attempt, until the whole answer is read; 0 disables. */
  timeoutMs: number;
  fetch: typeof fetch;
}

export const DEFAULT_RETRY: Required<RetryOptions> = {
  maxRetries: 2,
  initialDelayMs: 500,
  maxDelayMs: 8_000,
  maxRetryAfterMs: 60_000,
};

const IDEMPOTENT = new Set(['GET', 'HEAD', 'PUT', 'DELETE', 'OPTIONS']);
export const IDEMPOTENCY_KEY_HEADER = 'Idempotency-Key';
const IN_PROGRESS = 'idempotency_key_in_progress';
const RETRIED_STATUSES = new Set([429, 503]);
/** Failures that happen before any byte of the request reached the server. */
const NOT_CONNECTED = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH', 'UND_ERR_CONNECT_TIMEOUT']);
const NULL_BODY_STATUSES = new Set([101, 103, 204, 205, 304]);

/**
 * Whether `error` (a fetch rejection) proves the request never reached the server. Node's
 * fetch (undici) puts the system error code on `cause`, and an `AggregateError` there when
 * it tried several addresses; browsers give no detail, so this answers false there.
 */
export function neverReachedServer(error: unknown, depth = 0): boolean {
  if (depth > 5 || typeof error !== 'object' || error === null) return false;
  const { code, errors, cause } = error as { code?: unknown; errors?: unknown; cause?: unknown };
  if (Array.isArray(errors) && errors.length > 0) return errors.every((e) => neverReachedServer(e, depth + 1));
  if (typeof code === 'string' && NOT_CONNECTED.has(code)) return true;
  return neverReachedServer(cause, depth + 1);
}

/** Exponential backoff with equal jitter: a delay in [d/2, d], d = initial · 2^attempt, capped. */
export function backoffDelay(attempt: number, settings: Pick<TransportSettings, 'initialDelayMs' | 'maxDelayMs'>): number {
  const ceiling = Math.min(settings.maxDelayMs, settings.initialDelayMs * 2 ** attempt);
  return ceiling / 2 + Math.random() * (ceiling / 2);
}

function sleep(ms: number, signal: AbortSignal | null): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/** A random UUID v4; `crypto.randomUUID` is missing outside secure browser contexts. */
export function randomKey(): string {
  if (typeof crypto.randomUUID === 'function') return crypto.randomUUID();
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = ((b[6] ?? 0) & 0x0f) | 0x40;
  b[8] = ((b[8] ?? 0) & 0x3f) | 0x80;
  const hex = Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/** Whether a buffered 409 says that the first request under its Idempotency-Key still runs. */
async function stillInProgress(response: Response): Promise<boolean> {
  if (response.status !== 409) return false;
  try {
    const body = (await response.clone().json()) as { error?: { code?: unknown } };
    return body?.error?.code === IN_PROGRESS;
  } catch {
    return false;
  }
}

/** One attempt: the caller's signal and the timeout both abort it; the whole body is read. */
async function attempt(request: Request, headers: Headers, body: ArrayBuffer | undefined, settings: TransportSettings): Promise<Response> {
  const controller = new AbortController();
  const callerSignal = request.signal;
  const onCallerAbort = () => controller.abort(callerSignal.reason);
  if (callerSignal.aborted) onCallerAbort();
  else callerSignal.addEventListener('abort', onCallerAbort, { once: true });
  // An abort reason is an Error, as fetch's own are: tracing that records it (OpenTelemetry's
  // undici instrumentation) threw an uncaught TypeError on a Symbol and ended the process.
  const timeout = new DOMException(`no complete answer within ${settings.timeoutMs} ms`, 'TimeoutError');
  const timer = settings.timeoutMs > 0 ? setTimeout(() => controller.abort(timeout), settings.timeoutMs) : undefined;
  try {
    const response = await settings.fetch(request.url, {
      method: request.method,
      headers,
      body,
      redirect: request.redirect,
      signal: controller.signal,
    });
    // Reading the body inside the attempt puts it under the same timeout, and lets a retry
    // decision see the complete answer.
    const buffer = NULL_BODY_STATUSES.has(response.status) ? null : await response.arrayBuffer();
    return new Response(buffer, { status: response.status, statusText: response.statusText, headers: response.headers });
  } catch (error) {
    if (controller.signal.reason === timeout && !callerSignal.aborted) {
      throw new WardenError({
        status: 0,
        code: 'timeout',
        message: `${request.method} ${request.url} got no complete answer within ${settings.timeoutMs} ms`,
        cause: error,
      });
    }
    if (callerSignal.aborted) throw callerSignal.reason ?? error;
    const detail = error instanceof Error ? `${error.message}${causeText(error.cause)}` : String(error);
    throw new WardenError({
      status: 0,
      code: 'network_error',
      message: `${request.method} ${request.url} failed: ${detail}`,
      cause: error,
    });
  } finally {
    clearTimeout(timer);
    callerSignal.removeEventListener('abort', onCallerAbort);
  }
}

function causeText(cause: unknown): string {
  if (typeof cause !== 'object' || cause === null) return '';
  const { code, message } = cause as { code?: unknown; message?: unknown };
  const text = typeof code === 'string' ? code : typeof message === 'string' ? message : '';
  return text ? ` (${text})` : '';
}

/**
 * A `fetch` for the generated client. Answers with the last response (2xx or not: the client
 * turns non-2xx into a `WardenError`) or throws a `WardenError` when no answer arrived.
 * A caller's abort is rethrown as is (an `AbortError`), never retried.
 */
export function createTransport(settings: TransportSettings): typeof fetch {
  return async (input: RequestInfo | URL, init?: RequestInit): Promise<Response> => {
    const request = input instanceof Request && init === undefined ? input : new Request(input, init);
    const body = request.body === null ? undefined : await request.arrayBuffer();
    const method = request.method.toUpperCase();
    const headers = new Headers(request.headers);
    // One key for every attempt of this call: a retry is then the same request to the server.
    if (method === 'POST' && settings.maxRetries > 0 && !headers.has(IDEMPOTENCY_KEY_HEADER))
      headers.set(IDEMPOTENCY_KEY_HEADER, randomKey());
    const keyed = method === 'POST' && headers.has(IDEMPOTENCY_KEY_HEADER);
    const idempotent = IDEMPOTENT.has(method) || keyed;
    for (let retry = 0; ; retry++) {
      const canRetry = retry < settings.maxRetries;
      let response: Response;
      try {
        response = await attempt(request, headers, body, settings);
      } catch (error) {
        const retryable =
          error instanceof WardenError && (idempotent || (error.code === 'network_error' && neverReachedServer(error.cause)));
        if (!canRetry || !retryable) throw error;
        await sleep(backoffDelay(retry, settings), request.signal);
        continue;
      }
      if (canRetry && keyed && (await stillInProgress(response))) {
        await sleep(backoffDelay(retry, settings), request.signal);
        continue;
      }
      if (!canRetry || !idempotent || !RETRIED_STATUSES.has(response.status)) return response;
      const retryAfter = parseRetryAfter(response.headers.get('retry-after'));
      if (retryAfter !== undefined && retryAfter > settings.maxRetryAfterMs) return response;
      await sleep(retryAfter ?? backoffDelay(retry, settings), request.signal);
    }
  };
}
