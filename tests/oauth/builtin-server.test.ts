/**
 * Warden's built-in authorization server, driven as a desktop MCP client drives it: the MCP
 * SDK's own client OAuth code (StreamableHTTPClientTransport with an authProvider) finds the
 * Protected Resource Metadata from the 401, the RFC 8414 metadata, registers (RFC 7591), runs
 * PKCE S256 while a headless Chromium signs in to the dashboard and consents, then lists and
 * calls tools as the chosen agent, governed and audited; its token never reaches the upstream.
 * Then rotation, audience, expiry and revocation, and bad input, each with the OAuth answer the
 * specifications give, checked here over HTTP.
 */
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { type Browser, chromium } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type CountingUpstream, startCountingUpstream } from '../mcp-gateway/support.ts';
import { dashboardLogin, keyFor, useTestServer } from '../support/server.ts';
import { MemoryOAuthProvider, pkce, startRecorder, startRedirectReceiver } from './support.ts';

const CHROMIUM = '/usr/bin/chromium';
const HAS_CHROMIUM = existsSync(CHROMIUM);
if (!HAS_CHROMIUM && process.env.CI === 'true') throw new Error(`${CHROMIUM} is missing: apt-get install -y chromium`);

const server = useTestServer({ egressAllowlist: ['127.0.0.1/32'] });
let upstream: CountingUpstream;
let recorder: Awaited<ReturnType<typeof startRecorder>>;
let receiver: Awaited<ReturnType<typeof startRedirectReceiver>>;
let browser: Browser | undefined;
let admin: string;
const clients: Client[] = [];

beforeAll(async () => {
  upstream = await startCountingUpstream();
  recorder = await startRecorder(upstream.url);
  receiver = await startRedirectReceiver();
  admin = await keyFor(server, 'admin,agents:read,agents:write,mcp_servers:write,audit:read', 'oauth');
  const api = (path: string, body: unknown) => server.api('POST', path as '/agents', { key: admin, body, unchecked: true });
  expect((await api('/mcp-servers', { name: 'tools', slug: 'tools', transport_url: recorder.url })).status).toBe(201);
  // a caller-chosen key: consent, not the key, makes the token act as the agent
  expect((await api('/agents', { name: 'Bot', slug: 'bot', provider: 'local', api_key: `ak_oauth_${Date.now()}` })).status).toBe(201);
  expect((await api('/agents', { name: 'Other', slug: 'other', provider: 'local' })).status).toBe(201);
  if (HAS_CHROMIUM)
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--no-first-run'],
    });
}, 60_000);
afterAll(async () => {
  for (const client of clients) await client.close().catch(() => undefined);
  await browser?.close();
  await recorder?.close();
  await receiver?.close();
  await upstream?.close();
});

const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');
const form = (fields: Record<string, string>) => ({
  method: 'POST',
  headers: { 'content-type': 'application/x-www-form-urlencoded' },
  body: new URLSearchParams(fields),
});
const mcpPost = (path: string, token: string) =>
  fetch(`${server.origin}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${token}` },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list', params: {} }),
  });
const challenge = (res: Response) =>
  Object.fromEntries([...(res.headers.get('www-authenticate') ?? '').matchAll(/([a-z_]+)="([^"]*)"/g)].map((m) => [m[1], m[2]]));
const auditOf = async (action: string) =>
  (await server.api('GET', '/audit-logs', { key: admin, query: { action, limit: 20 }, unchecked: true })).body.data as {
    agent: string | null;
    result: string;
    user: string | null;
    context: Record<string, unknown>;
  }[];
const count = async (table: 'oauth_tokens' | 'oauth_authorizations' | 'oauth_grants' | 'oauth_codes') =>
  Number(
    (
      await server.database.db
        .selectFrom(table)
        .select((eb) => eb.fn.countAll().as('n'))
        .executeTakeFirstOrThrow()
    ).n,
  );

/** What the SDK client ends with: its provider (client registration, tokens). */
let desktop: MemoryOAuthProvider;

describe.skipIf(!HAS_CHROMIUM)('the whole flow, with the MCP SDK client and a browser', () => {
  it('discovers, registers, runs PKCE through dashboard sign-in and consent, then lists and calls tools as the agent', async () => {
    const endpoint = new URL(`${server.url}/mcp/tools`);
    desktop = new MemoryOAuthProvider(receiver.url);
    const first = new Client({ name: 'oauth-desktop', version: '1.0.0' });
    const transport = new StreamableHTTPClientTransport(endpoint, { authProvider: desktop });
    await expect(first.connect(transport)).rejects.toThrow(UnauthorizedError);
    // the SDK registered itself (RFC 7591) and built an authorization URL with PKCE S256 for this resource
    expect(desktop.client?.client_id).toMatch(/./);
    const authorize = desktop.authorizationUrl as URL;
    expect(`${authorize.origin}${authorize.pathname}`).toBe(`${server.origin}/authorize`);
    expect(authorize.searchParams.get('code_challenge_method')).toBe('S256');
    expect(authorize.searchParams.get('resource')).toBe(endpoint.href);

    const page = await (browser as Browser).newPage();
    try {
      await page.goto(authorize.href);
      await page.getByTestId('login-key').fill(admin);
      await page.getByTestId('login-submit').click();
      await page.getByTestId('consent-card').waitFor();
      expect(await page.getByTestId('consent-client').textContent()).toBe('Test Desktop Client');
      expect(await page.getByTestId('consent-resource').textContent()).toBe(endpoint.href);
      expect(await page.getByTestId('consent-servers').textContent()).toBe('tools');
      expect(await page.getByTestId('consent-scopes').textContent()).toBe('mcp');
      await page.getByTestId('consent-agent').selectOption({ label: 'Bot (bot)' });
      await page.getByTestId('consent-allow').click();
      await page.waitForURL((url) => url.href.startsWith(receiver.url));
    } finally {
      await page.close();
    }
    // the page's own later requests (its favicon) come in too: the one with the code is the redirect
    const back = receiver.received.findLast((q) => q.has('code') || q.has('error')) as URLSearchParams;
    expect(back.get('state')).toBe(authorize.searchParams.get('state'));
    expect(back.get('iss')).toBe(server.origin);
    await transport.finishAuth(back.get('code') as string);
    expect(desktop.saved?.access_token).toMatch(/^wat_/);
    expect(desktop.saved?.refresh_token).toMatch(/./);

    const client = new Client({ name: 'oauth-desktop', version: '1.0.0' });
    clients.push(client);
    await client.connect(new StreamableHTTPClientTransport(endpoint, { authProvider: desktop }));
    expect((await client.listTools()).tools.map((t) => t.name)).toContain('echo');
    const result = await client.callTool({ name: 'echo', arguments: { text: 'by oauth' } });
    expect(result.content).toEqual([{ type: 'text', text: 'by oauth' }]);
    expect(upstream.calls()).toContain('echo:{"text":"by oauth"}');

    // governed and audited as the agent consented to; the grant is a configuration event
    expect((await auditOf('mcp.call')).some((e) => e.agent === 'bot' && e.result === 'allowed')).toBe(true);
    const granted = await auditOf('oauth_grant.created');
    expect(granted).toHaveLength(1);
    expect(granted[0]?.context).toMatchObject({
      agent: 'bot',
      client_name: 'Test Desktop Client',
      resource: endpoint.href,
      scopes: ['mcp'],
    });
    expect(granted[0]?.user).toMatch(/^dashboard:/);
    // the client's token never went upstream; nor is any token in the audit log
    expect(recorder.authorizations.length).toBeGreaterThan(0);
    expect(recorder.authorizations.every((a) => a === undefined)).toBe(true);
    const everything = JSON.stringify(
      (await server.api('GET', '/audit-logs', { key: admin, query: { limit: 100 }, unchecked: true })).body,
    );
    expect(everything).not.toContain(desktop.saved?.access_token);
    expect(everything).not.toContain(desktop.saved?.refresh_token);
  }, 120_000);

  it('rotates refresh tokens: the new pair works (a used one presented again: the scripted client below)', async () => {
    const old = desktop.saved?.refresh_token as string;
    const clientId = desktop.client?.client_id as string;
    const res = await fetch(`${server.origin}/token`, form({ grant_type: 'refresh_token', refresh_token: old, client_id: clientId }));
    expect(res.status).toBe(200);
    const fresh = await res.json();
    expect(fresh.refresh_token).not.toBe(old);
    expect(fresh.access_token).not.toBe(desktop.saved?.access_token);
    expect((await mcpPost('/api/v1/mcp/tools', fresh.access_token)).status).toBe(200);
    desktop.saved = fresh;
  });

  it('refuses the token at another endpoint (audience), and once expired, with invalid_token', async () => {
    const token = desktop.saved?.access_token as string;
    const elsewhere = await mcpPost('/api/v1/mcp', token);
    expect(elsewhere.status).toBe(401);
    expect(challenge(elsewhere)).toMatchObject({
      error: 'invalid_token',
      resource_metadata: `${server.origin}/.well-known/oauth-protected-resource/api/v1/mcp`,
    });
    // an hour passes for this token
    await server.database.db
      .updateTable('oauth_tokens')
      .set({ expires_at: new Date(Date.now() - 1000) })
      .where('token_hash', '=', sha256(token))
      .execute();
    const expired = await mcpPost('/api/v1/mcp/tools', token);
    expect(expired.status).toBe(401);
    expect(challenge(expired).error).toBe('invalid_token');
    expect((await expired.json()).error.message).toMatch(/expired/);
  });

  it('lists the grant and revokes it through the API: its tokens stop at once, audited', async () => {
    const listed = await server.api('GET', '/oauth-grants', { key: admin, unchecked: true });
    expect(listed.status).toBe(200);
    expect(listed.body.data).toHaveLength(1);
    const grant = listed.body.data[0];
    expect(grant).toMatchObject({ agent: 'bot', client_name: 'Test Desktop Client', scopes: ['mcp'], revoked_at: null });
    // a registered client: when it registered tells it from another of the same name (with its id)
    expect(grant.client_registered_at).toMatch(/^\d{4}-\d{2}-\d{2}T/);
    expect(Date.parse(grant.client_registered_at)).toBeLessThanOrEqual(Date.parse(grant.created_at));
    expect(JSON.stringify(listed.body)).not.toContain('wat_');
    const refresh = await fetch(
      `${server.origin}/token`,
      form({
        grant_type: 'refresh_token',
        refresh_token: desktop.saved?.refresh_token as string,
        client_id: desktop.client?.client_id as string,
      }),
    );
    const live = (await refresh.json()).access_token as string;
    expect((await mcpPost('/api/v1/mcp/tools', live)).status).toBe(200);

    const revoked = await server.api('DELETE', `/oauth-grants/${grant.id}` as '/oauth-grants/{id}', { key: admin, unchecked: true });
    expect(revoked.status).toBe(200);
    expect(revoked.body.data.revoked_at).not.toBeNull();
    const after = await mcpPost('/api/v1/mcp/tools', live);
    expect(after.status).toBe(401);
    expect(challenge(after).error).toBe('invalid_token');
    expect((await auditOf('oauth_grant.revoked'))[0]).toMatchObject({ context: { agent: 'bot', client_name: 'Test Desktop Client' } });
    expect((await server.api('DELETE', `/oauth-grants/${grant.id}` as '/oauth-grants/{id}', { key: admin, unchecked: true })).status).toBe(
      404,
    );
  });
});

describe('bad input', () => {
  let clientId: string;
  const redirectUri = 'http://127.0.0.1:9/callback';
  const resource = () => `${server.origin}/api/v1/mcp/tools`;
  const authorizeUrl = (fields: Record<string, string>) =>
    `${server.origin}/authorize?${new URLSearchParams({ response_type: 'code', client_id: clientId, redirect_uri: redirectUri, code_challenge_method: 'S256', state: 'xyz', resource: resource(), ...fields })}`;

  /** A code as the consent page would get one: authorize, then the dashboard API's consent. */
  async function code(challengeValue: string): Promise<string> {
    const res = await fetch(authorizeUrl({ code_challenge: challengeValue }), { redirect: 'manual' });
    expect(res.status).toBe(302);
    const id = (res.headers.get('location') as string).split('/').at(-1) as string;
    const session = await dashboardLogin(server.origin, admin);
    const agents = (await session.call('GET', `/oauth/authorizations/${id}`)).body.data.agents as { id: string; slug: string }[];
    const decided = await session.call('POST', `/oauth/authorizations/${id}`, {
      approve: true,
      agent_id: agents.find((a) => a.slug === 'other')?.id,
    });
    expect(decided.status).toBe(200);
    return new URL(decided.body.data.redirect_to).searchParams.get('code') as string;
  }
  const exchange = (codeValue: string, verifier: string) =>
    fetch(
      `${server.origin}/token`,
      form({ grant_type: 'authorization_code', code: codeValue, code_verifier: verifier, client_id: clientId, redirect_uri: redirectUri }),
    );

  beforeAll(async () => {
    const res = await fetch(`${server.origin}/register`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ client_name: 'Scripted', redirect_uris: [redirectUri], token_endpoint_auth_method: 'none' }),
    });
    expect(res.status).toBe(201);
    clientId = (await res.json()).client_id;
  });

  it('a redirect URI not registered: 400 invalid_request, nothing stored, the browser not sent there', async () => {
    const before = await count('oauth_authorizations');
    const res = await fetch(authorizeUrl({ code_challenge: pkce().challenge, redirect_uri: 'http://127.0.0.1:9/elsewhere' }), {
      redirect: 'manual',
    });
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({ error: 'invalid_request' });
    expect(await count('oauth_authorizations')).toBe(before);
  });

  it('an unknown client: 400 invalid_client; a resource of another server: invalid_target to the client', async () => {
    const unknown = await fetch(authorizeUrl({ code_challenge: pkce().challenge, client_id: 'nobody' }), { redirect: 'manual' });
    expect(unknown.status).toBe(400);
    expect((await unknown.json()).error).toBe('invalid_client');
    const before = await count('oauth_authorizations');
    const foreign = await fetch(authorizeUrl({ code_challenge: pkce().challenge, resource: 'https://other.example/api/v1/mcp' }), {
      redirect: 'manual',
    });
    expect(foreign.status).toBe(302);
    const location = new URL(foreign.headers.get('location') as string);
    expect(location.searchParams.get('error')).toBe('invalid_target');
    expect(await count('oauth_authorizations')).toBe(before);
  });

  it('a PKCE verifier that does not match: invalid_grant and no token; a replayed code: invalid_grant', async () => {
    const pair = pkce();
    const codeValue = await code(pair.challenge);
    const tokensBefore = await count('oauth_tokens');
    const wrong = await exchange(codeValue, pkce().verifier);
    expect(wrong.status).toBe(400);
    expect((await wrong.json()).error).toBe('invalid_grant');
    expect(await count('oauth_tokens')).toBe(tokensBefore);
    const right = await exchange(codeValue, pair.verifier);
    expect(right.status).toBe(200);
    expect(await count('oauth_tokens')).toBe(tokensBefore + 2);
    const replay = await exchange(codeValue, pair.verifier);
    expect(replay.status).toBe(400);
    expect((await replay.json()).error).toBe('invalid_grant');
    expect(await count('oauth_tokens')).toBe(tokensBefore + 2);
  });

  it.skipIf(!HAS_CHROMIUM)(
    "a grant revoked on the dashboard's Connected clients page: its token stops at once",
    async () => {
      const pair = pkce();
      const tokens = await (await exchange(await code(pair.challenge), pair.verifier)).json();
      expect((await mcpPost('/api/v1/mcp/tools', tokens.access_token)).status).toBe(200);
      const page = await (browser as Browser).newPage();
      try {
        await page.goto(`${server.origin}/dashboard/#/oauth-grants`);
        await page.getByTestId('login-key').fill(admin);
        await page.getByTestId('login-submit').click();
        const row = page.getByTestId('grant-row').filter({ hasText: 'other' }).filter({ hasText: 'Active' }).first();
        await row.waitFor();
        expect(await row.getByTestId('grant-client').textContent()).toBe('Scripted');
        await row.getByTestId('grant-revoke').click();
        await row.getByTestId('grant-revoke-confirm').click();
        await page.getByTestId('grants-notice').filter({ hasText: 'revoked' }).waitFor();
      } finally {
        await page.close();
      }
      const after = await mcpPost('/api/v1/mcp/tools', tokens.access_token);
      expect(after.status).toBe(401);
      expect(challenge(after).error).toBe('invalid_token');
      expect(
        (await auditOf('oauth_grant.revoked')).some((e) => e.context.agent === 'other' && (e.user ?? '').startsWith('dashboard:')),
      ).toBe(true);
    },
    60_000,
  );

  it('a refresh token used twice was copied: invalid_grant, and the grant is revoked with its newest tokens, audited', async () => {
    const pair = pkce();
    const first = await (await exchange(await code(pair.challenge), pair.verifier)).json();
    const refresh = (token: string) =>
      fetch(`${server.origin}/token`, form({ grant_type: 'refresh_token', refresh_token: token, client_id: clientId }));
    const rotated = await refresh(first.refresh_token);
    expect(rotated.status).toBe(200);
    const second = await rotated.json();
    expect((await mcpPost('/api/v1/mcp/tools', second.access_token)).status).toBe(200);
    // the first refresh token again: whoever holds it copied it
    const reused = await refresh(first.refresh_token);
    expect(reused.status).toBe(400);
    expect(await reused.json()).toMatchObject({
      error: 'invalid_grant',
      error_description: expect.stringMatching(/already used.*revoked/),
    });
    // the legitimate holder's tokens stop too: the grant is gone
    const after = await mcpPost('/api/v1/mcp/tools', second.access_token);
    expect(after.status).toBe(401);
    expect(challenge(after).error).toBe('invalid_token');
    expect((await refresh(second.refresh_token)).status).toBe(400);
    expect(
      (await auditOf('oauth_grant.revoked')).some(
        (e) => e.context.reason === 'refresh_token_reused' && e.context.client_id === clientId && e.user === `oauth-client:${clientId}`,
      ),
    ).toBe(true);
    // a token never issued is refused as before, and revokes nothing
    const grants = (await server.database.db.selectFrom('oauth_grants').select('id').where('revoked_at', 'is', null).execute()).length;
    expect((await refresh('wrt_never_issued')).status).toBe(400);
    expect((await server.database.db.selectFrom('oauth_grants').select('id').where('revoked_at', 'is', null).execute()).length).toBe(
      grants,
    );
  });

  it('a denial sends the client access_denied and grants nothing', async () => {
    const grants = await count('oauth_grants');
    const res = await fetch(authorizeUrl({ code_challenge: pkce().challenge }), { redirect: 'manual' });
    const id = (res.headers.get('location') as string).split('/').at(-1) as string;
    const session = await dashboardLogin(server.origin, admin);
    const denied = await session.call('POST', `/oauth/authorizations/${id}`, { approve: false });
    expect(new URL(denied.body.data.redirect_to).searchParams.get('error')).toBe('access_denied');
    expect(await count('oauth_grants')).toBe(grants);
    expect((await session.call('POST', `/oauth/authorizations/${id}`, { approve: false })).status).toBe(404);
  });

  it('a malformed or unknown token: 401 invalid_token', async () => {
    for (const token of ['wat_unknown', 'not.a.jwt', 'eyJhbGciOiJIUzI1NiJ9.eyJpc3MiOiJ4In0.c2ln']) {
      const res = await mcpPost('/api/v1/mcp/tools', token);
      expect(res.status, token).toBe(401);
      expect(challenge(res).error).toBe('invalid_token');
    }
  });
});
