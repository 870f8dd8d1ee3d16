/**
 * OAuth connections to upstream MCP servers: an SDK-built MCP server whose authorization server
 * is oidc-provider (oauth-upstream.ts), registered with `upstream_auth: {type: "oauth"}`. An
 * admin connects once (POST …/oauth/connect, sign-in and consent at the authorization server,
 * back to Warden's callback); agents then reach the server through the gateway and the REST
 * runtime holding only their own keys, while Warden sends the access token, refreshes it
 * before it expires or once the server refuses it, and says when only an admin can help.
 * Bad answers at the callback — an unknown or replayed state, an error, another issuer — are
 * refused and change nothing.
 */
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectClient } from '../mcp-gateway/support.ts';
import { type DashboardSession, dashboardLogin, useTestServer } from '../support/server.ts';
import { consent, type OAuthUpstream, startOAuthUpstream, UPSTREAM_SCOPE } from './oauth-upstream.ts';

const AGENT_KEY = 'ak_upstream_oauth_agent_key_0123456789';
const server = useTestServer({ egressAllowlist: ['127.0.0.1/32'] });
let upstream: OAuthUpstream;
let callback = '';
const clients: Client[] = [];

beforeAll(async () => {
  callback = `${server.origin}/oauth/upstream/callback`;
  upstream = await startOAuthUpstream(callback);
  const agent = await server.api('POST', '/agents', { body: { name: 'Bot', slug: 'bot', provider: 'local', api_key: AGENT_KEY } });
  expect(agent.status).toBe(201);
  const created = await server.api('POST', '/mcp-servers', {
    body: { name: 'Hosted', slug: 'hosted', transport_url: upstream.url, upstream_auth: { type: 'oauth' } },
  });
  expect(created.status).toBe(201);
});
afterAll(async () => {
  for (const client of clients) await client.close().catch(() => undefined);
  await upstream?.close();
});

const restCall = (slug: string, text: string) =>
  server.api('POST', '/runtime/mcp/call', {
    unchecked: true,
    headers: { 'x-warden-agent-key': AGENT_KEY },
    body: { server: slug, tool: 'whoami', arguments: { text }, input: { agent: 'bot' } },
  });
const textOf = (result: unknown) => ((result as { content: { text: string }[] }).content[0] as { text: string }).text;
const oauthOf = async (slug: string) => {
  const res = await server.api('GET', `/mcp-servers/${slug}` as '/mcp-servers/{id}', { unchecked: true });
  expect(res.status).toBe(200);
  return res.body.data.upstream_auth;
};
const connectStart = (slug: string) =>
  server.api('POST', `/mcp-servers/${slug}/oauth/connect` as '/mcp-servers/{id}/oauth/connect', { unchecked: true });
/** Warden's callback, as the browser follows it: the redirect it answers is returned, not followed. */
const land = (url: string) => fetch(url, { redirect: 'manual' });
const auditActions = async (action: string) => {
  const res = await server.api('GET', '/audit-logs', { unchecked: true, query: { action, limit: 50 } });
  return res.body.data as { action: string; resource: string; context: Record<string, unknown> }[];
};

let admin: DashboardSession | undefined;
/** The confirmation a callback sent the browser to (#/mcp-servers/oauth/confirm/<id>). */
const confirmationOf = (landed: Response) => /#\/mcp-servers\/oauth\/confirm\/([\w-]{43})$/.exec(landed.headers.get('location') ?? '')?.[1];
/** Lands on the callback, then confirms as a dashboard session of the workspace would: the server as connected. */
async function finish(callbackUrl: string) {
  const landed = await land(callbackUrl);
  expect(landed.status).toBe(303);
  const id = confirmationOf(landed);
  expect(id, landed.headers.get('location') ?? '').toBeDefined();
  admin ??= await dashboardLogin(server.origin, server.key);
  const confirmed = await admin.call('POST', `/mcp-server-oauth/confirmations/${id}`);
  expect(confirmed.status, JSON.stringify(confirmed.body)).toBe(200);
  return confirmed.body.data;
}

/** Connects `slug` as an admin would: start, sign in and consent as `login`, land on Warden's callback, confirm. */
async function connect(slug: string, login = 'alice') {
  const started = await connectStart(slug);
  expect(started.status, JSON.stringify(started.body)).toBe(200);
  return finish(await consent(started.body.data.authorization_url, callback, login));
}
const lastToken = () =>
  upstream
    .authorizations()
    .filter(Boolean)
    .at(-1)
    ?.replace(/^Bearer /, '') ?? '';

describe('an MCP server with an OAuth connection', () => {
  it('shows the connection without tokens, not connected until an admin connects', async () => {
    expect(await oauthOf('hosted')).toEqual({
      type: 'oauth',
      header: 'authorization',
      hint: '…',
      authorization_server: null,
      client_id: null,
      scopes: [],
      status: 'not_connected',
      status_detail: null,
      connected_at: null,
      expires_at: null,
      agents: [],
    });
  });

  it('answers calls before the connection 502 upstream_authorization_required, sending nothing upstream', async () => {
    const before = upstream.authorizations().length;
    const res = await restCall('hosted', 'too early');
    expect(res.status).toBe(502);
    expect(res.body.error.code).toBe('upstream_authorization_required');
    expect(res.body.error.message).toContain('/mcp-servers/hosted/oauth/connect');
    expect(upstream.authorizations().length).toBe(before);
  });

  it('starts with PKCE S256, a state, the resource and the scopes the server publishes (RFC 9728)', async () => {
    const started = await connectStart('hosted');
    expect(started.status).toBe(200);
    const { authorization_url: url, redirect_uri: redirect, expires_at: expires } = started.body.data;
    expect(redirect).toBe(callback);
    const at = new URL(url);
    expect(at.origin).toBe(upstream.issuer);
    expect(at.searchParams.get('response_type')).toBe('code');
    expect(at.searchParams.get('code_challenge_method')).toBe('S256');
    expect(at.searchParams.get('code_challenge')).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(at.searchParams.get('state')).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(at.searchParams.get('resource')).toBe(upstream.url);
    expect(at.searchParams.get('scope')).toBe(UPSTREAM_SCOPE);
    expect(at.searchParams.get('redirect_uri')).toBe(callback);
    // Warden registered itself (RFC 7591): the client id is the provider's, its name says whose workspace asks
    expect(at.searchParams.get('client_id')).toBeTruthy();
    expect(upstream.clientNames().at(-1)).toMatch(/^Warden \(workspace .+\)$/);
    expect(Date.parse(expires) - Date.now()).toBeGreaterThan(9 * 60_000);
  });

  it('connects: the callback exchanges the code, a dashboard session of the workspace confirms, audited', async () => {
    const started = await connectStart('hosted');
    const landed = await land(await consent(started.body.data.authorization_url, callback));
    expect(landed.status).toBe(303);
    expect(landed.headers.get('cache-control')).toBe('no-store');
    const id = confirmationOf(landed) as string;
    // not connected until confirmed
    expect((await oauthOf('hosted')).status).toBe('not_connected');
    admin ??= await dashboardLogin(server.origin, server.key);
    const shown = await admin.call('GET', `/mcp-server-oauth/confirmations/${id}`);
    expect(shown.body.data).toMatchObject({ server: 'hosted', agent: null, authorization_server: upstream.issuer, started_by_you: false });
    expect((await admin.call('POST', `/mcp-server-oauth/confirmations/${id}`)).status).toBe(200);
    // once only
    expect((await admin.call('POST', `/mcp-server-oauth/confirmations/${id}`)).status).toBe(404);
    const oauth = await oauthOf('hosted');
    expect(oauth).toMatchObject({ type: 'oauth', status: 'connected', authorization_server: upstream.issuer, status_detail: null });
    expect(oauth.client_id).toBeTruthy();
    expect(Date.parse(oauth.expires_at) - Date.now()).toBeGreaterThan(200_000);
    const events = await auditActions('mcp_server.oauth_connected');
    expect(events.length).toBe(1);
    expect(JSON.stringify(events)).toContain(upstream.issuer);
  });

  it('is not connected by a person lured into consenting: another workspace’s session cannot confirm', async () => {
    const before = (await oauthOf('hosted')).connected_at;
    const started = await connectStart('hosted');
    const landed = await land(await consent(started.body.data.authorization_url, callback, 'mallory'));
    const id = confirmationOf(landed) as string;
    await server.admin('workspaces.create', { slug: 'elsewhere' });
    const key = (await server.admin('keys.create', { workspace: 'elsewhere', permissions: '*' })).key as string;
    const stranger = await dashboardLogin(server.origin, key);
    expect((await stranger.call('GET', `/mcp-server-oauth/confirmations/${id}`)).status).toBe(404);
    expect((await stranger.call('POST', `/mcp-server-oauth/confirmations/${id}`)).status).toBe(404);
    expect((await oauthOf('hosted')).connected_at).toBe(before);
    expect((await stranger.call('GET', '/mcp-server-oauth/confirmations/not-a-confirmation')).status).toBe(400);
  });

  it('is reached through the gateway and the REST runtime with Warden’s token; agents send only their keys', async () => {
    const before = upstream.authorizations().length;
    const client = await connectClient(`${server.url}/mcp/hosted`, { authorization: `Bearer ${AGENT_KEY}` });
    clients.push(client);
    expect(textOf(await client.callTool({ name: 'whoami', arguments: { text: 'via gateway' } }))).toBe('via gateway as alice');
    const rest = await restCall('hosted', 'via rest');
    expect(rest.status).toBe(200);
    expect(textOf(rest.body.data.execution)).toBe('via rest as alice');
    const seen = upstream.authorizations().slice(before);
    expect(seen.length).toBeGreaterThan(0);
    expect(seen.every((a) => /^Bearer eyJ[\w-]+\.[\w-]+\.[\w-]+$/.test(a ?? ''))).toBe(true);
    expect(seen.some((a) => a?.includes(AGENT_KEY))).toBe(false);
    // no token in what the API answers or the audit log keeps
    const token = lastToken();
    const answers = [
      await server.api('GET', '/mcp-servers?limit=100', { unchecked: true }),
      await server.api('GET', '/audit-logs', { unchecked: true, query: { limit: 100 } }),
    ];
    for (const answer of answers) expect(JSON.stringify(answer.body)).not.toContain(token.slice(-24));
  });

  it('refuses the same callback again (a state is used once), changing nothing', async () => {
    const started = await connectStart('hosted');
    const back = await consent(started.body.data.authorization_url, callback);
    await finish(back);
    const connectedAt = (await oauthOf('hosted')).connected_at;
    const again = await land(back);
    expect(again.status).toBe(400);
    expect(await again.text()).toContain('unknown, already used or expired');
    expect((await oauthOf('hosted')).connected_at).toBe(connectedAt);
  });

  it('refuses an unknown state and an answer without one: 400, nothing stored', async () => {
    for (const query of ['?state=forged&code=abc', '?code=abc', '']) {
      const res = await land(`${callback}${query}`);
      expect(res.status).toBe(400);
    }
    expect((await oauthOf('hosted')).status).toBe('connected');
  });

  it('refuses an error answer and an answer from another issuer (RFC 9207), keeping the connection', async () => {
    const denied = await connectStart('hosted');
    const state = new URL(denied.body.data.authorization_url).searchParams.get('state');
    const res = await land(`${callback}?error=access_denied&state=${state}`);
    expect(res.status).toBe(303);
    expect(res.headers.get('location')).toContain('/dashboard/#/mcp-servers/oauth/failed?server=hosted');
    expect(res.headers.get('location')).toContain('access_denied');

    const mixed = await connectStart('hosted');
    const back = new URL(await consent(mixed.body.data.authorization_url, callback));
    back.searchParams.set('iss', 'https://attacker.example');
    const refused = await land(back.href);
    expect(refused.headers.get('location')).toContain('/oauth/failed?');
    expect((await oauthOf('hosted')).status).toBe('connected');
    const failures = await auditActions('mcp_server.oauth_failed');
    expect(failures.length).toBe(2);
    expect(JSON.stringify(failures)).toContain('(iss)');
    expect((await restCall('hosted', 'still connected')).status).toBe(200);
  });

  it('refreshes a token halfway through a short life, with the rotated refresh token each time', async () => {
    upstream.setTokenTtl(2);
    await connect('hosted');
    const refreshes = () => upstream.grants().filter((g) => g === 'refresh_token').length;
    const before = refreshes();
    expect((await restCall('hosted', 'fresh')).status).toBe(200);
    const issued = lastToken();
    // a fresh token is sent as it is, however many requests a call makes
    expect(refreshes()).toBe(before);
    const tokens = [issued];
    for (const text of ['one', 'two']) {
      await new Promise((resolve) => setTimeout(resolve, 1_100));
      const res = await restCall('hosted', text);
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      tokens.push(lastToken());
    }
    // one refresh per half-life passed, the second with the refresh token the first was answered (a reuse would end the grant)
    expect(refreshes() - before).toBe(2);
    expect(new Set(tokens).size).toBe(3);
    expect((await oauthOf('hosted')).status).toBe('connected');
    upstream.setTokenTtl(300);
  });

  it('renews a token the server refuses (401) and sends the request again', async () => {
    expect((await restCall('hosted', 'warm')).status).toBe(200);
    const refused = lastToken();
    upstream.reject(refused);
    const refreshesBefore = upstream.grants().filter((g) => g === 'refresh_token').length;
    const res = await restCall('hosted', 'after a revocation');
    expect(res.status).toBe(200);
    expect(textOf(res.body.data.execution)).toBe('after a revocation as alice');
    expect(lastToken()).not.toBe(refused);
    expect(upstream.grants().filter((g) => g === 'refresh_token').length - refreshesBefore).toBe(1);
  });

  it('disconnects: the refresh token is revoked at the server, calls need a new connection', async () => {
    const revokedBefore = upstream.revocations();
    const res = await server.api('DELETE', '/mcp-servers/hosted/oauth/connection' as '/mcp-servers/{id}/oauth/connection', {
      unchecked: true,
    });
    expect(res.status).toBe(200);
    expect(res.body.data.upstream_auth).toMatchObject({ status: 'not_connected', connected_at: null, expires_at: null });
    expect(upstream.revocations()).toBeGreaterThan(revokedBefore);
    const call = await restCall('hosted', 'after disconnect');
    expect(call.status).toBe(502);
    expect(call.body.error.code).toBe('upstream_authorization_required');
    expect((await auditActions('mcp_server.oauth_disconnected')).length).toBe(1);
  });
});

describe('a connection the authorization server ends', () => {
  it('says an admin must connect again when a refresh is refused (invalid_grant), audited once', async () => {
    await connect('hosted');
    expect((await restCall('hosted', 'connected again')).status).toBe(200);
    upstream.refuseTokens(true);
    upstream.reject(lastToken());
    try {
      const res = await restCall('hosted', 'refused refresh');
      expect(res.status, JSON.stringify(res.body)).toBe(502);
      expect(res.body.error.code, JSON.stringify(res.body)).toBe('upstream_authorization_required');
      expect(res.body.error.code).toBe('upstream_authorization_required');
      expect(res.body.error.message).toContain('invalid_grant');
      const oauth = await oauthOf('hosted');
      expect(oauth.status).toBe('reauthorization_required');
      expect(oauth.status_detail).toContain('invalid_grant');
      expect((await restCall('hosted', 'again')).body.error?.code).toBe('upstream_authorization_required');
      expect((await auditActions('mcp_server.oauth_reauthorization_required')).length).toBe(1);
    } finally {
      upstream.refuseTokens(false);
    }
    await connect('hosted');
    expect((await oauthOf('hosted')).status).toBe('connected');
    expect((await restCall('hosted', 'reconnected')).status).toBe(200);
  });
});

describe('an agent’s own connection', () => {
  const OTHER_KEY = 'ak_upstream_oauth_other_agent_0123456789';
  const callAs = (agentKey: string, agent: string, text: string) =>
    server.api('POST', '/runtime/mcp/call', {
      unchecked: true,
      headers: { 'x-warden-agent-key': agentKey },
      body: { server: 'hosted', tool: 'whoami', arguments: { text }, input: { agent } },
    });
  const connectFor = async (agent: string, login: string) => {
    const started = await server.api('POST', '/mcp-servers/hosted/oauth/connect' as '/mcp-servers/{id}/oauth/connect', {
      unchecked: true,
      body: { agent },
    });
    expect(started.status, JSON.stringify(started.body)).toBe(200);
    return finish(await consent(started.body.data.authorization_url, callback, login));
  };

  it('acts upstream as whoever consented for that agent; other agents keep the workspace’s', async () => {
    const other = await server.api('POST', '/agents', { body: { name: 'Other', slug: 'other', provider: 'local', api_key: OTHER_KEY } });
    expect(other.status).toBe(201);
    expect((await oauthOf('hosted')).status).toBe('connected');
    await connectFor('other', 'dave');
    const oauth = await oauthOf('hosted');
    expect(oauth.agents).toEqual([expect.objectContaining({ agent: 'other', status: 'connected', status_detail: null })]);
    expect(oauth.status).toBe('connected');
    expect(textOf((await callAs(OTHER_KEY, 'other', 'own')).body.data.execution)).toBe('own as dave');
    expect(textOf((await callAs(AGENT_KEY, 'bot', 'shared')).body.data.execution)).toBe('shared as alice');
    const client = await connectClient(`${server.url}/mcp/hosted`, { authorization: `Bearer ${OTHER_KEY}` });
    clients.push(client);
    expect(textOf(await client.callTool({ name: 'whoami', arguments: { text: 'gateway' } }))).toBe('gateway as dave');
    const connected = await auditActions('mcp_server.oauth_connected');
    expect(connected.some((e) => e.context.agent === 'other')).toBe(true);
  });

  it('ends on its own: the agent then uses the workspace’s connection again', async () => {
    const res = await server.api('DELETE', '/mcp-servers/hosted/oauth/connection?agent=other' as '/mcp-servers/{id}/oauth/connection', {
      unchecked: true,
    });
    expect(res.status).toBe(200);
    expect(res.body.data.upstream_auth).toMatchObject({ status: 'connected', agents: [] });
    expect(textOf((await callAs(OTHER_KEY, 'other', 'back')).body.data.execution)).toBe('back as alice');
    const again = await server.api('DELETE', '/mcp-servers/hosted/oauth/connection?agent=other' as '/mcp-servers/{id}/oauth/connection', {
      unchecked: true,
    });
    expect(again.status).toBe(404);
  });

  it('completes two connects under way, each with the client it was started with', async () => {
    const forAgent = await server.api('POST', '/mcp-servers/hosted/oauth/connect' as '/mcp-servers/{id}/oauth/connect', {
      unchecked: true,
      body: { agent: 'other' },
    });
    // a second connect registers Warden again: the first flow keeps its own client
    const forWorkspace = await connectStart('hosted');
    const clientOf = (res: typeof forAgent) => new URL(res.body.data.authorization_url).searchParams.get('client_id');
    expect(clientOf(forAgent)).not.toBe(clientOf(forWorkspace));
    await finish(await consent(forAgent.body.data.authorization_url, callback, 'frank'));
    await finish(await consent(forWorkspace.body.data.authorization_url, callback, 'alice'));
    expect(textOf((await callAs(OTHER_KEY, 'other', 'own again')).body.data.execution)).toBe('own again as frank');
    expect(textOf((await callAs(AGENT_KEY, 'bot', 'shared again')).body.data.execution)).toBe('shared again as alice');
  });

  it('refuses an unknown agent: 403 agent_not_found, nothing stored', async () => {
    const res = await server.api('POST', '/mcp-servers/hosted/oauth/connect' as '/mcp-servers/{id}/oauth/connect', {
      unchecked: true,
      body: { agent: 'nobody' },
    });
    expect(res.status).toBe(403);
    expect(res.body.error.code).toBe('agent_not_found');
  });
});

describe('a client registered by hand, at a named authorization server', () => {
  it('connects as that confidential client and calls', async () => {
    const created = await server.api('POST', '/mcp-servers', {
      unchecked: true,
      body: {
        name: 'Static',
        slug: 'static',
        transport_url: upstream.url,
        upstream_auth: {
          type: 'oauth',
          authorization_server: upstream.issuer,
          client_id: upstream.staticClient.id,
          client_secret: upstream.staticClient.secret,
          scopes: [UPSTREAM_SCOPE],
        },
      },
    });
    expect(created.status).toBe(201);
    expect(JSON.stringify(created.body)).not.toContain(upstream.staticClient.secret);
    expect(created.body.data.upstream_auth).toMatchObject({ client_id: upstream.staticClient.id, scopes: [UPSTREAM_SCOPE] });
    const started = await connectStart('static');
    expect(new URL(started.body.data.authorization_url).searchParams.get('client_id')).toBe(upstream.staticClient.id);
    await finish(await consent(started.body.data.authorization_url, callback, 'bob'));
    const res = await restCall('static', 'static client');
    expect(res.status).toBe(200);
    expect(textOf(res.body.data.execution)).toBe('static client as bob');
  });
});

describe('bad OAuth configuration', () => {
  it('refuses a client_secret without a client_id: 400, nothing stored', async () => {
    const before = (await server.api('GET', '/mcp-servers?limit=100')).body.data.length;
    const res = await server.api('POST', '/mcp-servers', {
      unchecked: true,
      body: { name: 'Half', transport_url: upstream.url, upstream_auth: { type: 'oauth', client_secret: 'abcdefghijkl' } },
    });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('invalid_request');
    expect((await server.api('GET', '/mcp-servers?limit=100')).body.data.length).toBe(before);
  });

  it('answers connect on a server without OAuth 409 conflict', async () => {
    await server.api('POST', '/mcp-servers', { body: { name: 'Plain', slug: 'plain', transport_url: upstream.url } });
    const res = await connectStart('plain');
    expect(res.status).toBe(409);
    expect(res.body.error.code).toBe('conflict');
  });

  it('answers 502 upstream_authorization_failed when no authorization server can be found', async () => {
    const created = await server.api('POST', '/mcp-servers', {
      unchecked: true,
      // the authorization server's own origin serves no MCP and no resource metadata; its path has no metadata
      body: {
        name: 'Lost',
        slug: 'lost',
        transport_url: `${upstream.issuer}/nowhere/mcp`,
        upstream_auth: { type: 'oauth', authorization_server: `${upstream.issuer}/nowhere` },
      },
    });
    expect(created.status).toBe(201);
    const res = await connectStart('lost');
    expect(res.status).toBe(502);
    expect(res.body.error.code).toBe('upstream_authorization_failed');
  });

  it('a new URL ends the connections: a token is for the server its owner consented to', async () => {
    expect((await restCall('static', 'before the move')).status).toBe(200);
    const revokedBefore = upstream.revocations();
    const moved = await server.api('PATCH', '/mcp-servers/static', { unchecked: true, body: { transport_url: `${upstream.url}?moved=1` } });
    expect(moved.status).toBe(200);
    expect(moved.body.data.upstream_auth).toMatchObject({ status: 'not_connected', agents: [] });
    // the ended connection's refresh token is revoked at its server, as a disconnect's is
    expect(upstream.revocations()).toBe(revokedBefore + 1);
    // nothing is called with the ended connection (the old upstream session may still be ended, in the background)
    const calls = upstream.callers().length;
    const res = await restCall('static', 'after the move');
    expect(res.body.error?.code).toBe('upstream_authorization_required');
    expect(upstream.callers().length).toBe(calls);
  });

  it('switching a server from OAuth to a secret forgets the connection', async () => {
    const res = await server.api('PATCH', '/mcp-servers/static', {
      unchecked: true,
      body: { upstream_auth: { type: 'bearer', secret: 'a-plain-token-0123456789' } },
    });
    expect(res.status).toBe(200);
    expect(res.body.data.upstream_auth).toEqual({ type: 'bearer', header: 'authorization', hint: '…6789' });
    expect((await connectStart('static')).status).toBe(409);
  });
});
