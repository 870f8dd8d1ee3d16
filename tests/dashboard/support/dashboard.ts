/**
 * What the dashboard API test files share (dashboard-api.*.test.ts): raw calls without a session,
 * logins, and workspaces with keys, bound to the file's server. Receivers and Standard Webhooks
 * verification come from ../../webhooks/support/delivery.ts.
 */

import { type ApiResponse, type DashboardSession, dashboardLogin, request, type TestServer } from '../../support/server.ts';
import type { Answer } from '../../webhooks/support/delivery.ts';

export const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** How the dashboard tests' receivers answer every delivery. */
export const thanks = (): Answer => ({ status: 200, body: 'thanks' });

export const sessionCookieOf = (res: Response) => res.headers.getSetCookie().find((c) => c.startsWith('warden_session='));

/** The helpers bound to `server` (a `useTestServer()` handle). */
export function dashboardHelpers(server: TestServer) {
  /** POST /dashboard/api/session, raw. */
  const postSession = (apiKey: string) =>
    fetch(`${server.origin}/dashboard/api/session`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ api_key: apiKey }),
    });

  /**
   * Calls the dashboard API with exactly the given headers (no key, no cookie unless given):
   * untyped, for the requests a session would not send (no cookie, no or a wrong CSRF token).
   */
  const dashboardCall = (
    method: string,
    path: string,
    options: { body?: unknown; headers?: Record<string, string> } = {},
  ): Promise<ApiResponse> => request(`${server.origin}/dashboard/api`, '', method, path, { key: null, ...options });

  /** A session of `apiKey` (its cookie, its CSRF token and `api`, typed by the dashboard contract). */
  const login = (apiKey: string): Promise<DashboardSession> => dashboardLogin(server.origin, apiKey);

  let workspaceCount = 0;
  /** A new workspace and a key of it with the given permissions. */
  async function freshWorkspace(permissions = '*') {
    const slug = `dash-${++workspaceCount}`;
    const workspace = await server.admin('workspaces.create', { slug });
    const key = await server.admin('keys.create', { workspace: slug, permissions });
    return { slug, id: workspace.id as string, key: key.key as string, keyId: key.id as string };
  }

  const newKey = async (workspace: string, permissions: string) =>
    server.admin('keys.create', { workspace, permissions }) as Promise<{ key: string; id: string }>;

  return { postSession, dashboardCall, login, freshWorkspace, newKey };
}
