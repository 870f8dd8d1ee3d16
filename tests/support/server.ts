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
import { type ApiResponse, type DashboardRoute, type RequestOptions, type TypedApi, type V1Route, withQuery } from './api.ts';
import { assertDatabaseAllowed, freshDatabase } from './database.ts';
import { useFixture } from './fixture.ts';

export type { ApiResponse, RequestOptions } from './api.ts';

export interface TestServer extends RunningServer {
  /** A key of workspace `default` with every permission. */
  key: string;
  /** http://127.0.0.1:port, where /dashboard and /mcp live (`url` ends in /api/v1). */
  origin: string;
  /**
   * Calls the API (/api/v1) with the bootstrap key unless another key (or null for none) is
   * given; typed by the contract (see api.ts), or `unchecked: true`.
   */
  api: TypedApi<V1Route>;
  /** Runs `warden` admin commands in-process against this server's database. */
  admin: (command: string, args: Record<string, string | undefined>) => Promise<any>;
}

export async function startTestServer(overrides: Partial<Config> = {}): Promise<TestServer> {
  assertDatabaseAllowed();
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
    origin: new URL(server.url).origin,
    api: ((method: string, path: string, options: RequestOptions = {}) =>
      request(server.url, key, method, path, options)) as TypedApi<V1Route>,
    admin: (command, args) => runAdminCommand({ database: server.database, webhooks: server.webhooks }, command, args),
    close: async () => {
      await server.close();
      await pgdb?.drop();
    },
  };
}

/**
 * The preamble of a test file (or of a describe block) that needs a server: starts one before
 * its tests (`beforeAll`) and closes it after them (`afterAll`). The handle it answers at once
 * stands for that server while it runs, so tests use it as they would the server itself:
 *
 *   const server = useTestServer({ egressAllowlist: ['127.0.0.1/32'] });
 *   it('…', async () => { await server.api('GET', '/agents'); });
 *
 * `overrides` may be a function, called in the `beforeAll`, when the configuration depends on
 * something that an earlier `beforeAll` starts (a receiver's port, a proxy). Reading the handle
 * outside the tests and hooks (at collection time, or after `afterAll`) throws. See fixture.ts.
 */
export function useTestServer(overrides: Partial<Config> | (() => Partial<Config> | Promise<Partial<Config>>) = {}): TestServer {
  return useFixture(
    async () => startTestServer(typeof overrides === 'function' ? await overrides() : overrides),
    (server) => server.close(),
    'useTestServer()',
  );
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
  const res = await fetch(`${baseUrl}${withQuery(path, options.query)}`, { method, headers, body, signal });
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
  /** `warden_session=…`, as a Cookie header carries it. */
  cookie: string;
  /** The session's CSRF token (X-CSRF-Token). */
  csrf: string;
  /** Calls /dashboard/api with the session's cookie and CSRF token; typed by the dashboard contract (see api.ts). */
  api: TypedApi<DashboardRoute>;
  /** Untyped: `api(method, path, { body, unchecked: true })` says the same and is explicit about it. */
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
  const call = (method: string, path: string, options: RequestOptions = {}) =>
    request(`${origin}/dashboard/api`, '', method, path, {
      ...options,
      key: null,
      headers: { cookie: cookie as string, 'x-csrf-token': csrf, ...options.headers },
    });
  return {
    cookie: cookie as string,
    csrf,
    api: call as TypedApi<DashboardRoute>,
    call: (method, path, body) => call(method, path, { body }),
  };
}

/** `server.api` with another key by default (a call may still give its own `key`). */
export function withKey(server: TestServer, key: string): TypedApi<V1Route> {
  return ((method: string, path: string, options: RequestOptions = {}) =>
    server.api(method, path, { key, ...options, unchecked: true })) as TypedApi<V1Route>;
}

/** A key of a (new) workspace with the given permissions. */
export async function keyFor(server: TestServer, permissions: string, workspace = 'default'): Promise<string> {
  if (workspace !== 'default') {
    await server.admin('workspaces.create', { slug: workspace }).catch(() => undefined);
  }
  const created = await server.admin('keys.create', { workspace, permissions });
  return created.key;
}
