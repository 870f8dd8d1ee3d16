/** What a handler knows of the request it answers, once the HTTP layer has authenticated it. */
import type { Permission } from '@warden/contract';

export interface AuthContext {
  workspaceId: string;
  keyId: string;
  keyName: string;
  permissions: ReadonlySet<Permission>;
  rateLimitPerMinute: number;
  /** The workspace's policy-set version, read with the key: compiled policy sets are cached by it. */
  policyVersion: number;
  /** The workspace's agents version, read with the key: agent lookups are cached by it. */
  agentsVersion: number;
  /** The workspace's MCP servers version, read with the key: the registry of MCP servers is cached by it. */
  mcpServersVersion: number;
  /** The dashboard session that authenticated the request (its id, never its token); absent for a bearer key. */
  sessionId?: string;
  /** The slug of the one agent an OAuth access token acts as (features/oauth); absent for keys. */
  agent?: string;
}

/** The browser side of a dashboard session, for the handlers that open and close sessions. */
export interface SessionCookie {
  /** The session token the browser sent, if any. */
  readonly token: string | undefined;
  /** The CSRF token of the session that authenticated the request ('' when none did). */
  readonly csrf: string;
  /** The client's address (failed logins are counted per address). */
  readonly clientAddress: string;
  /** Sets the session cookie on the answer, or clears it (null). */
  set(token: string | null): void;
}

export interface RequestContext {
  requestId: string;
  /** The caller's key. For the one public operation (health) it holds no workspace and no permission. */
  auth: AuthContext;
  /** The origin clients reach Warden at (WARDEN_PUBLIC_URL, else the request's own): for URLs a browser is sent back to. */
  origin: string;
  /** X-Warden-Agent-Key, on operations that accept it. */
  agentKey: string | undefined;
  /** The session cookie, on the dashboard API (its login and logout handlers set it). */
  session?: SessionCookie;
}

/**
 * Who changes a workspace's configuration, as the change's audit event names it (source
 * `configuration`, in `user`): `key:<key id>` for an API key, `dashboard:<session id>` for a
 * dashboard session, `cli` for the admin commands.
 */
export interface Actor {
  readonly user: string;
  /** The request that made the change, when it came over HTTP. */
  readonly requestId?: string;
}

/** The actor of an authenticated request: its dashboard session, else its key. */
export const actorOf = (ctx: RequestContext): Actor => ({
  user: ctx.auth.sessionId ? `dashboard:${ctx.auth.sessionId}` : `key:${ctx.auth.keyId}`,
  requestId: ctx.requestId,
});

/** The admin commands (`warden …`, in the CLI process or through the admin channel). */
export const CLI_ACTOR: Actor = Object.freeze({ user: 'cli' });

export const ANONYMOUS: AuthContext = {
  workspaceId: '00000000-0000-0000-0000-000000000000',
  keyId: '',
  keyName: 'anonymous',
  permissions: new Set(),
  rateLimitPerMinute: 0,
  policyVersion: 0,
  agentsVersion: 0,
  mcpServersVersion: 0,
};
