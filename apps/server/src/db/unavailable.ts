/**
 * Is this error the database being unreachable (a connection-level failure), rather than a
 * fault of the request or of the code? Those are answered 503 `service_unavailable` with
 * Retry-After: the request may succeed once the database is back, and nothing was allowed.
 *
 * Recognised, anywhere in the error's `cause` chain (and in an AggregateError's `errors`):
 * - socket errors of the driver's connection: ECONNREFUSED, ECONNRESET, ETIMEDOUT, EPIPE,
 *   EHOSTUNREACH, ENETUNREACH, ECONNABORTED, ENOTFOUND, EAI_AGAIN;
 * - pg's and pg-pool's own messages for a lost or unobtainable connection ("Connection
 *   terminated…", "…not queryable", "timeout exceeded when trying to connect");
 * - PostgreSQL SQLSTATEs: class 08 (connection exception), 57P01 admin_shutdown, 57P02
 *   crash_shutdown, 57P03 cannot_connect_now, 53300 too_many_connections.
 *
 * Anything else (a constraint violation, a syntax error, a bug) stays a 500.
 */

const SOCKET_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ECONNABORTED',
  'ENOTFOUND',
  'EAI_AGAIN',
]);
const SQLSTATES = new Set(['57P01', '57P02', '57P03', '53300']);
const MESSAGES = [
  /^Connection terminated/, // pg: unexpectedly / due to connection timeout / (ending)
  /is not queryable$/, // pg: a client whose connection failed or was closed
  /^timeout exceeded when trying to connect$/, // pg-pool: connectionTimeoutMillis while waiting for a client
];

function matches(error: { code?: unknown; message?: unknown }): boolean {
  const code = typeof error.code === 'string' ? error.code : '';
  if (SOCKET_CODES.has(code) || SQLSTATES.has(code) || /^08[0-9A-Z]{3}$/.test(code)) return true;
  const message = typeof error.message === 'string' ? error.message : '';
  return MESSAGES.some((pattern) => pattern.test(message));
}

export function isDatabaseUnavailable(error: unknown): boolean {
  const seen = new Set<unknown>();
  const pending: unknown[] = [error];
  while (pending.length > 0 && seen.size < 16) {
    const current = pending.pop();
    if (typeof current !== 'object' || current === null || seen.has(current)) continue;
    seen.add(current);
    if (matches(current as { code?: unknown; message?: unknown })) return true;
    pending.push((current as { cause?: unknown }).cause);
    if (current instanceof AggregateError) pending.push(...current.errors);
  }
  return false;
}
