import type { ErrorCode } from './generated/types.gen.js';

/**
 * `code` of a {@link WardenError}: one of the API's error codes, or one of two codes the SDK
 * uses when no HTTP answer arrived:
 * - `network_error` (`status` 0): the request could not be sent or its answer could not be
 *   read (connection refused, DNS failure, reset, TLS error…). `cause` holds the original error.
 * - `timeout` (`status` 0): no complete answer within `timeoutMs`.
 */
export type WardenErrorCode = ErrorCode | 'network_error' | 'timeout';

/**
 * When an error answer carries no `{error:{code}}` body (a proxy's HTML page, a degraded
 * health check), the code is derived from the status so that `code` is always set.
 */
const CODE_BY_STATUS: Record<number, ErrorCode> = {
  400: 'invalid_request',
  401: 'unauthorized',
  403: 'insufficient_permission',
  404: 'not_found',
  405: 'method_not_allowed',
  409: 'conflict',
  413: 'payload_too_large',
  415: 'unsupported_media_type',
  429: 'rate_limited',
  501: 'not_implemented',
  503: 'service_unavailable',
};

function isErrorBody(body: unknown): body is { error: { code: ErrorCode; message?: unknown } } {
  if (typeof body !== 'object' || body === null) return false;
  const error = (body as { error?: unknown }).error;
  return typeof error === 'object' && error !== null && typeof (error as { code?: unknown }).code === 'string';
}

export interface WardenErrorInit {
  status: number;
  code: WardenErrorCode;
  message: string;
  requestId?: string | undefined;
  headers?: Headers;
  body?: unknown;
  cause?: unknown;
}

/**
 * The one error the SDK throws for a failed call.
 *
 * - Any non-2xx answer: `status` is the HTTP status, `code` the API's machine code
 *   (`error.code` of the body), `message` its human-readable text, `requestId` the
 *   `X-Request-Id` to quote to support, `headers` and `body` the raw answer.
 * - No answer: `status` 0 with `code` `network_error` or `timeout`; `cause` is the
 *   underlying error. `headers` is empty and `body` undefined.
 *
 * Branch on `code`, never on `message` (messages are not stable).
 */
export class WardenError extends Error {
  override readonly name = 'WardenError';
  /** HTTP status, or 0 when no answer arrived (`network_error`, `timeout`). */
  readonly status: number;
  readonly code: WardenErrorCode;
  /** `X-Request-Id` of the answer, when there was one. */
  readonly requestId: string | undefined;
  readonly headers: Headers;
  /** The parsed JSON body (or text) of the answer; `undefined` when none arrived. */
  readonly body: unknown;

  constructor(init: WardenErrorInit) {
    super(init.message, init.cause === undefined ? undefined : { cause: init.cause });
    this.status = init.status;
    this.code = init.code;
    this.requestId = init.requestId;
    this.headers = init.headers ?? new Headers();
    this.body = init.body;
  }

  /** `Retry-After` in seconds (sent with 429 `rate_limited`), when the answer carried one. */
  get retryAfter(): number | undefined {
    const ms = parseRetryAfter(this.headers.get('retry-after'));
    return ms === undefined ? undefined : ms / 1000;
  }

  /** Builds the error for a non-2xx answer whose body has already been read. */
  static fromResponse(response: Response, body: unknown): WardenError {
    const status = response.status;
    const envelope = isErrorBody(body) ? body.error : undefined;
    const code = envelope?.code ?? CODE_BY_STATUS[status] ?? (status >= 500 ? 'internal_error' : 'invalid_request');
    const message =
      typeof envelope?.message === 'string' ? envelope.message : `HTTP ${status}${response.statusText ? ` ${response.statusText}` : ''}`;
    return new WardenError({
      status,
      code,
      message,
      requestId: response.headers.get('x-request-id') ?? undefined,
      headers: response.headers,
      body,
    });
  }
}

export function isWardenError(value: unknown): value is WardenError {
  return value instanceof WardenError;
}

/** `Retry-After` as milliseconds: delta-seconds or an HTTP date; `undefined` when absent or invalid. */
export function parseRetryAfter(value: string | null, now: number = Date.now()): number | undefined {
  if (value === null) return undefined;
  const text = value.trim();
  if (/^\d+(\.\d+)?$/.test(text)) return Math.round(Number(text) * 1000);
  const date = Date.parse(text);
  if (Number.isNaN(date)) return undefined;
  return Math.max(0, date - now);
}
