/**
 * The one way to paginate: keyset pagination, newest first, on (timestamp column, id). The
 * cursor is opaque to clients (base64url of the last item's timestamp and id), stable under
 * concurrent inserts, and costs one index range scan whatever the page number.
 */
import { type SelectQueryBuilder, sql } from 'kysely';
import { ApiError } from '../shared/errors.ts';

export interface PageRequest {
  limit?: number;
  cursor?: string;
}

export interface Page<T> {
  data: T[];
  has_more: boolean;
  next_cursor: string | null;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** What encodeCursor writes: toISOString() of a date in years 1–9999 (PostgreSQL reads no other). */
const CURSOR_TIME = /^(?!0000)\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

/** Accepts only what encodeCursor wrote: anything else would reach the database's date parser. */
function decodeCursor(cursor: string): { at: string; id: string } {
  let decoded: unknown;
  try {
    decoded = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
  } catch {
    decoded = undefined;
  }
  if (Array.isArray(decoded) && decoded.length === 2) {
    const [at, id] = decoded as unknown[];
    const time = typeof at === 'string' && CURSOR_TIME.test(at) ? Date.parse(at) : Number.NaN;
    // The round trip refuses dates that do not exist (February 30).
    if (!Number.isNaN(time) && new Date(time).toISOString() === at && typeof id === 'string' && UUID.test(id))
      return { at: at as string, id };
  }
  throw new ApiError(
    'invalid_request',
    'query/cursor is not a cursor returned by this API: pass the next_cursor of the previous page as is',
  );
}

const encodeCursor = (at: Date, id: string) => Buffer.from(JSON.stringify([at.toISOString(), id])).toString('base64url');

/**
 * Runs `query` (already filtered and scoped to one workspace) one page at a time.
 * `column` is the timestamp column (qualified if the query joins) that, with `id`, orders the rows.
 */
export async function paginate<Row extends { id: string }, T>(
  // biome-ignore lint/suspicious/noExplicitAny: the query's tables vary; the row type is what matters.
  query: SelectQueryBuilder<any, any, Row>,
  column: string,
  request: PageRequest,
  toItem: (row: Row) => T,
): Promise<Page<T>> {
  const limit = request.limit ?? 20;
  let q = query;
  if (request.cursor) {
    const { at, id } = decodeCursor(request.cursor);
    q = q.where(sql<boolean>`(${sql.ref(column)}, ${sql.ref('id')}) < (${at}::timestamptz, ${id}::uuid)`);
  }
  const rows = await q
    .orderBy(sql.ref(column), 'desc')
    .orderBy(sql.ref('id'), 'desc')
    .limit(limit + 1)
    .execute();
  const hasMore = rows.length > limit;
  const items = hasMore ? rows.slice(0, limit) : rows;
  const last = items.at(-1) as (Row & Record<string, unknown>) | undefined;
  const key = column.slice(column.lastIndexOf('.') + 1); // 'audit_events.event_timestamp' → 'event_timestamp'
  return {
    data: items.map(toItem),
    has_more: hasMore,
    next_cursor: hasMore && last ? encodeCursor(new Date(last[key] as Date), last.id) : null,
  };
}

export const iso = (value: Date | string) => new Date(value).toISOString();
export const isoOrNull = (value: Date | string | null) => (value === null ? null : iso(value));
export const isUuid = (value: string) => UUID.test(value);

/** Postgres unique_violation, from pg and PGlite alike. */
export const isUniqueViolation = (error: unknown) => (error as { code?: string })?.code === '23505';
