/** The shape of every cursor-paginated list answer. */
export interface Page<T> {
  data: Array<T>;
  has_more: boolean;
  next_cursor: string | null;
}

/**
 * Yields every item of a cursor-paginated list, fetching the next page only when the items
 * of the current one are consumed. `fetchPage` receives `undefined` first (or the cursor to
 * resume from), then each page's `next_cursor`. Breaking out of the loop stops fetching.
 */
export async function* paginate<T>(
  fetchPage: (cursor: string | undefined) => Promise<Page<T>>,
  startCursor?: string,
): AsyncGenerator<T, void, undefined> {
  let cursor = startCursor;
  for (;;) {
    const page = await fetchPage(cursor);
    yield* page.data;
    if (!page.has_more || page.next_cursor === null) return;
    // A cursor that does not move would loop forever; that is a server fault, not the end.
    if (page.next_cursor === cursor) throw new Error(`pagination: the server returned the same cursor twice (${cursor})`);
    cursor = page.next_cursor;
  }
}
