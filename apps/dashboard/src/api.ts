/**
 * The dashboard API client: same-origin fetch with the session cookie; the CSRF token from the
 * session is kept in memory only and sent as X-CSRF-Token on every request that is not a GET.
 */
import type { ApiErrorBody } from './types.ts';

export const API_BASE = '/dashboard/api';

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = 'ApiError';
  }
}

let csrfToken: string | null = null;
let onUnauthorized: (() => void) | null = null;

export function setCsrfToken(token: string | null): void {
  csrfToken = token;
}

/** Called when a request other than login answers 401 (session ended, key revoked). */
export function setUnauthorizedHandler(handler: () => void): void {
  onUnauthorized = handler;
}

export type Query = Record<string, string | number | null | undefined>;

export function withQuery(path: string, query: Query = {}): string {
  const params = new URLSearchParams();
  for (const [name, value] of Object.entries(query)) {
    if (value !== null && value !== undefined && value !== '') params.set(name, String(value));
  }
  const text = params.toString();
  return text ? `${path}?${text}` : path;
}

export async function api<T>(method: string, path: string, body?: unknown): Promise<T> {
  const headers: Record<string, string> = { accept: 'application/json' };
  if (method !== 'GET' && csrfToken) headers['x-csrf-token'] = csrfToken;
  if (body !== undefined) headers['content-type'] = 'application/json';
  let res: Response;
  try {
    res = await fetch(`${API_BASE}${path}`, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: 'same-origin',
      cache: 'no-store',
    });
  } catch (err) {
    throw new ApiError(0, 'network_error', `Could not reach the server (${(err as Error).message}).`);
  }
  const text = await res.text();
  let parsed: unknown;
  try {
    parsed = text ? JSON.parse(text) : undefined;
  } catch {
    parsed = undefined;
  }
  if (!res.ok) {
    const error = (parsed as Partial<ApiErrorBody> | undefined)?.error;
    const code = error?.code ?? `http_${res.status}`;
    const message = error?.message ?? (res.statusText || 'Request failed');
    if (res.status === 401 && !(method === 'POST' && path === '/session') && onUnauthorized) onUnauthorized();
    throw new ApiError(res.status, code, message);
  }
  return parsed as T;
}

/** A sentence for an error, in words: what happened and the stable code. */
export function describeError(err: unknown): string {
  if (err instanceof ApiError) {
    const hint = HINTS[err.code];
    return `${hint ? `${hint} ` : ''}${err.message} (${err.code}${err.status ? `, HTTP ${err.status}` : ''})`;
  }
  return err instanceof Error ? err.message : String(err);
}

const HINTS: Record<string, string> = {
  unauthorized: 'Not signed in, or the key is unknown or revoked.',
  insufficient_permission: 'This key lacks the permission for that.',
  csrf_token_invalid: 'This page lost its session token: reload it.',
  decision_note_required: 'A note is required to reject.',
  approval_already_decided: 'Someone already decided this approval.',
  rate_limited: 'Too many requests; wait a moment.',
  execution_target_denied: 'The URL is not allowed by the egress guard.',
};
