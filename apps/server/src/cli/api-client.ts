/**
 * The CLI's way to a running Warden's v1 API (`--url`, the key in WARDEN_API_KEY): JSON in and
 * out, a refusal as ApiRefusal naming the status and the API's error code, lists read page by
 * page; a 429 is waited out as its Retry-After says (at most 30 s, 6 tries).
 */
import { UsageError } from './cli-errors.ts';

const RATE_LIMIT_RETRIES = 6;
const MAX_RETRY_WAIT_S = 30;

/** The API answered with an error (or not with JSON). */
export class ApiRefusal extends Error {}

interface Answer {
  data?: unknown;
  next_cursor?: string | null;
  error?: { code: string; message: string };
}

export interface ApiClient {
  get<T>(path: string, query?: Record<string, string>): Promise<T>;
  post<T>(path: string, body: unknown): Promise<T>;
  /** Every item of a cursor-paginated list, in the API's order, reading at most `max` items. */
  list<T>(path: string, query?: Record<string, string>, max?: number): AsyncGenerator<T>;
}

export function apiClient(command: string, url: string | undefined): ApiClient {
  if (!url) throw new UsageError(`${command} needs --url, the API of a running Warden (http://host:8080/api/v1)`);
  const key = process.env.WARDEN_API_KEY;
  if (!key) throw new UsageError(`${command} reads the API key from WARDEN_API_KEY`);
  const base = url.replace(/\/+$/, '');
  /** The answer's body, refused unless the status is 2xx and it has `data`. */
  const request = async (method: string, path: string, body?: unknown) => {
    let response: Response;
    for (let attempt = 1; ; attempt++) {
      response = await fetch(`${base}${path}`, {
        method,
        headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      // rate limited (a long read of the audit log): waits as told, a few times
      if (response.status !== 429 || attempt >= RATE_LIMIT_RETRIES) break;
      const wait = Math.min(Number(response.headers.get('retry-after')) || 1, MAX_RETRY_WAIT_S);
      await response.body?.cancel();
      await new Promise((done) => setTimeout(done, wait * 1000));
    }
    const answer = (await response.json().catch(() => null)) as Answer | null;
    if (!response.ok || answer === null || answer.data === undefined) {
      const why = answer?.error ? ` ${answer.error.code}: ${answer.error.message}` : '';
      throw new ApiRefusal(`${url} refused ${method} ${path.split('?')[0]} (${response.status}${why})`);
    }
    return answer;
  };
  const withQuery = (path: string, query: Record<string, string>) => {
    const search = new URLSearchParams(query).toString();
    return search ? `${path}?${search}` : path;
  };
  return {
    get: async (path, query = {}) => (await request('GET', withQuery(path, query))).data as never,
    post: async (path, body) => (await request('POST', path, body)).data as never,
    async *list<T>(path: string, query: Record<string, string> = {}, max = Number.POSITIVE_INFINITY) {
      let cursor: string | null | undefined = null;
      let read = 0;
      do {
        const page = await request('GET', withQuery(path, { ...query, limit: '100', ...(cursor ? { cursor } : {}) }));
        for (const item of page.data as T[]) {
          if (read++ >= max) return;
          yield item;
        }
        cursor = page.next_cursor;
      } while (cursor);
    },
  };
}
