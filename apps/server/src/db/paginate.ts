/**
 * The one way to paginate: keyset pagination, newest first, on (timestamp column, id). The
 * cursor is opaque to clients (base64url of the last item's timestamp and id), stable under
 * concurrent inserts, and costs one index range scan whatever the page number.
 */
import { type Expression, type Kysely, type SelectQueryBuilder, type SqlBool, sql } from 'kysely';
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

/** `query` narrowed to the rows after `cursor` (none: from the newest). */
// biome-ignore lint/suspicious/noExplicitAny: the query's tables vary; the row type is what matters.
function after<Q extends SelectQueryBuilder<any, any, any>>(query: Q, column: string, cursor: string | undefined): Q {
  if (!cursor) return query;
  const { at, id } = decodeCursor(cursor);
  return query.where(sql<boolean>`(${sql.ref(column)}, ${sql.ref('id')}) < (${at}::timestamptz, ${id}::uuid)`) as Q;
}

/** The cursor that continues after `row` ('audit_events.event_timestamp' is read as `event_timestamp`). */
const cursorAt = (row: { id: string }, column: string) =>
  encodeCursor(new Date((row as Record<string, unknown>)[column.slice(column.lastIndexOf('.') + 1)] as Date), row.id);

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
  const rows = await after(query, column, request.cursor)
    .orderBy(sql.ref(column), 'desc')
    .orderBy(sql.ref('id'), 'desc')
    .limit(limit + 1)
    .execute();
  const hasMore = rows.length > limit;
  const items = hasMore ? rows.slice(0, limit) : rows;
  const last = items.at(-1);
  return { data: items.map(toItem), has_more: hasMore, next_cursor: hasMore && last ? cursorAt(last, column) : null };
}

/** What a bounded search looks for, and how many rows one page may read to find it. */
export interface Search {
  matches: Expression<SqlBool>;
  scanRows: number;
}

/**
 * A page of the rows of `query` that `search.matches`, reading at most `search.scanRows` rows
 * (newest first, from the cursor): a condition no index serves costs the same on any history.
 * When the rows read run out before the page is full, the page is answered as it is (even
 * empty) with `has_more` and a cursor at the last row read, so the next page searches on
 * from there. The same cursors as `paginate`.
 */
export async function paginateSearch<Row extends { id: string }, T>(
  db: Kysely<unknown>,
  // biome-ignore lint/suspicious/noExplicitAny: the query's tables vary; the row type is what matters.
  query: SelectQueryBuilder<any, any, Row>,
  column: string,
  request: PageRequest,
  toItem: (row: Row) => T,
  search: Search,
): Promise<Page<T>> {
  const limit = request.limit ?? 20;
  const read = after(query, column, request.cursor)
    .select([
      sql<boolean>`coalesce(${search.matches}, false)`.as('search_match'),
      sql<string>`row_number() over (order by ${sql.ref(column)} desc, ${sql.ref('id')} desc)`.as('search_read'),
    ])
    .orderBy(sql.ref(column), 'desc')
    .orderBy(sql.ref('id'), 'desc')
    .limit(search.scanRows);
  // Streams: the outer LIMIT stops the scan at the page's last match or at the last row it may read.
  const rows = (await db
    .selectFrom(read.as('scanned'))
    .selectAll()
    .where(sql<boolean>`search_match or search_read = ${search.scanRows}`)
    .orderBy(sql.ref('search_read'))
    .limit(limit + 2)
    .execute()) as unknown as (Row & { search_match: boolean; search_read: string | number })[];
  const matched = rows.filter((row) => row.search_match);
  if (matched.length > limit) {
    const items = matched.slice(0, limit);
    return { data: items.map(toItem), has_more: true, next_cursor: cursorAt(items[limit - 1] as Row, column) };
  }
  const lastRead = rows.find((row) => Number(row.search_read) === search.scanRows);
  return {
    data: matched.map(toItem),
    has_more: lastRead !== undefined,
    next_cursor: lastRead ? cursorAt(lastRead, column) : null,
  };
}

export const iso = (value: Date | string) => new Date(value).toISOString();
export const isoOrNull = (value: Date | string | null) => (value === null ? null : iso(value));
export const isUuid = (value: string) => UUID.test(value);

/** Postgres unique_violation, from pg and PGlite alike. */
export const isUniqueViolation = (error: unknown) => (error as { code?: string })?.code === '23505';

/** The constraint (or unique index) a violation names, from pg and PGlite alike. */
export const violatedConstraint = (error: unknown) => (error as { constraint?: string })?.constraint;
