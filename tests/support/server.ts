/**
 * A real Warden for one test file: real HTTP on a loopback port, on a fresh database —
 * embedded PGlite in memory, or, when DATABASE_URL is set, a uniquely named database on
 * that PostgreSQL server, dropped afterwards.
 */
import { randomBytes } from 'node:crypto';
import { expect } from 'vitest';
import type { Config } from '../../apps/server/src/config.ts';
import { createLogger } from '../../apps/server/src/logger.ts';
import { type RunningServer, startServer } from '../../apps/server/src/server.ts';
import { freshDatabase } from './database.ts';

export interface TestServer extends RunningServer {
  /** A key of workspace `default` with every permission. */
  key: string;
  /** Calls the API with the bootstrap key unless another key (or null for none) is given. */
  api: (method: string, path: string, options?: RequestOptions) => Promise<ApiResponse>;
  /** Runs `warden` admin commands in-process against this server's database. */
  admin: (command: string, args: Record<string, string | undefined>) => Promise<any>;
}

export interface RequestOptions {
  body?: unknown;
  key?: string | null;
  headers?: Record<string, string>;
  /** A raw body, sent as is (with its own content type in headers). */
  raw?: string;
  /** Abort the call after this long (for servers a test kills or stops). */
  timeoutMs?: number;
}

export interface ApiResponse {
  status: number;
  body: any;
  headers: Headers;
}

export async function startTestServer(overrides: Partial<Config> = {}): Promise<TestServer> {
  const key = `wk_test_${randomBytes(24).toString('base64url')}`;
  const baseUrl = process.env.DATABASE_URL;
  const pgdb = baseUrl ? await freshDatabase(baseUrl) : undefined;
  const server = await startServer(
    {
      port: 0,
      host: '127.0.0.1',
      databaseUrl: pgdb?.url,
      dataDir: 'memory://',
      bootstrapKey: key,
      validateResponses: true,
      // fast background work, so tests see sealing and deliveries within milliseconds
      auditSealIntervalMs: 100,
      webhookPollMs: 50,
      webhookRetrySchedule: '0,100ms,200ms',
      webhookTimeoutMs: 2_000,
      ...overrides,
    },
    createLogger(process.env.WARDEN_TEST_LOGS !== 'true'),
  );
  const { runAdminCommand } = await import('../../apps/server/src/admin/commands.ts');
  return {
    ...server,
    key,
    api: (method, path, options = {}) => request(server.url, key, method, path, options),
    admin: (command, args) => runAdminCommand({ database: server.database, webhooks: server.webhooks }, command, args),
    close: async () => {
      await server.close();
      await pgdb?.drop();
    },
  };
}

export async function request(
  baseUrl: string,
  defaultKey: string,
  method: string,
  path: string,
  options: RequestOptions = {},
): Promise<ApiResponse> {
  const headers: Record<string, string> = { ...options.headers };
  const key = options.key === undefined ? defaultKey : options.key;
  if (key !== null) headers.authorization = `Bearer ${key}`;
  let body: string | undefined;
  if (options.raw !== undefined) body = options.raw;
  else if (options.body !== undefined) {
    body = JSON.stringify(options.body);
    headers['content-type'] ??= 'application/json';
  }
  const signal = options.timeoutMs === undefined ? undefined : AbortSignal.timeout(options.timeoutMs);
  const res = await fetch(`${baseUrl}${path}`, { method, headers, body, signal });
  const text = await res.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    // not JSON: keep the text, tests assert on it
  }
  return { status: res.status, body: parsed, headers: res.headers };
}

/** A dashboard session (cookie and CSRF token) logged in with an API key. */
export interface DashboardSession {
  call: (method: string, path: string, body?: unknown) => Promise<ApiResponse>;
}

/** POST /dashboard/api/session with `apiKey` at `origin` (http://host:port); fails the test unless it answers 200 with a session cookie. */
export async function dashboardLogin(origin: string, apiKey: string): Promise<DashboardSession> {
  const res = await fetch(`${origin}/dashboard/api/session`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ api_key: apiKey }),
  });
  expect(res.status).toBe(200);
  const cookie = res.headers
    .getSetCookie()
    .map((c) => c.split(';')[0] as string)
    .find((c) => c.startsWith('warden_session='));
  expect(cookie).toBeDefined();
  const csrf = ((await res.json()) as { data: { csrf_token: string } }).data.csrf_token;
  return {
    call: (method, path, body) =>
      request(`${origin}/dashboard/api`, '', method, path, {
        key: null,
        body,
        headers: { cookie: cookie as string, 'x-csrf-token': csrf },
      }),
  };
}

/** A key of a (new) workspace with the given permissions. */
export async function keyFor(server: TestServer, permissions: string, workspace = 'default'): Promise<string> {
  if (workspace !== 'default') {
    await server.admin('workspaces.create', { slug: workspace }).catch(() => undefined);
  }
  const created = await server.admin('keys.create', { workspace, permissions });
  return created.key;
}
