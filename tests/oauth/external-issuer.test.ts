/**
 * Access tokens of the organisation's authorization server: panva's oidc-provider (a certified
 * OpenID provider) runs here on a loopback port and issues JWT access tokens by client
 * credentials with a resource indicator (RFC 8707); Warden is configured with its issuer URL
 * only. An unmodified MCP SDK client then lists and calls tools with such a token, as the agent
 * its claim names; wrong audience, expiry, missing scope, a foreign issuer, a bad signature and
 * a malformed token are refused as RFC 6750 says.
 */
import { createServer, request as httpRequest, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { exportJWK, generateKeyPair, SignJWT } from 'jose';
import Provider from 'oidc-provider';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type CountingUpstream, connectClient, startCountingUpstream } from '../mcp-gateway/support.ts';
import { keyFor, useTestServer } from '../support/server.ts';

let idp: Server;
let issuer = '';
/** Client id → the agent its tokens act as (a claim the IdP adds, as an organisation would map it). */
const AGENT_OF: Record<string, string> = { 'bot-client': 'bot', 'short-client': 'bot', 'ghost-client': 'ghost' };

async function startIdp(): Promise<string> {
  const { privateKey } = await generateKeyPair('ES256', { extractable: true });
  const jwk = { ...(await exportJWK(privateKey)), kid: 'idp-1', alg: 'ES256', use: 'sig' };
  idp = createServer();
  await new Promise<void>((resolve) => idp.listen(0, '127.0.0.1', resolve));
  issuer = `http://127.0.0.1:${(idp.address() as AddressInfo).port}`;
  const client = (client_id: string) => ({
    client_id,
    client_secret: `${client_id}-secret-0123456789abcdef`,
    grant_types: ['client_credentials'],
    redirect_uris: [],
    response_types: [],
    scope: 'mcp other',
    id_token_signed_response_alg: 'ES256',
  });
  const provider = new Provider(issuer, {
    clients: Object.keys(AGENT_OF).map(client),
    jwks: { keys: [jwk] },
    scopes: ['mcp', 'other'],
    features: {
      devInteractions: { enabled: false },
      clientCredentials: { enabled: true },
      resourceIndicators: {
        enabled: true,
        defaultResource: () => undefined,
        useGrantedResource: () => true,
        getResourceServerInfo: (_ctx: unknown, resource: string, c: { clientId: string }) => ({
          scope: 'mcp other',
          audience: resource,
          accessTokenFormat: 'jwt',
          accessTokenTTL: c.clientId === 'short-client' ? 1 : 300,
          jwt: { sign: { alg: 'ES256' } },
        }),
      },
    },
    extraTokenClaims: (_ctx: unknown, token: { clientId?: string }) => ({ warden_agent: AGENT_OF[token.clientId ?? ''] }),
  } as never);
  idp.on('request', provider.callback());
  return issuer;
}

/** A token from the IdP's token endpoint, by client credentials, for `resource` with `scope`. */
async function idpToken(clientId: string, resource: string, scope = 'mcp'): Promise<string> {
  const res = await fetch(`${issuer}/token`, {
    method: 'POST',
    headers: {
      'content-type': 'application/x-www-form-urlencoded',
      authorization: `Basic ${Buffer.from(`${clientId}:${clientId}-secret-0123456789abcdef`).toString('base64')}`,
    },
    body: new URLSearchParams({ grant_type: 'client_credentials', resource, scope }),
  });
  const body = await res.json();
  expect(res.status, JSON.stringify(body)).toBe(200);
  return body.access_token;
}

/** A loopback port free now, so that WARDEN_PUBLIC_URL can name the server before it listens. */
async function freePort(): Promise<number> {
  const probe = createServer();
  await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
  const { port } = probe.address() as AddressInfo;
  await new Promise((resolve) => probe.close(resolve));
  return port;
}

// external tokens need the audience from configuration (issue 46, row 4): WARDEN_PUBLIC_URL names this server
const server = useTestServer(async () => {
  const port = await freePort();
  return {
    port,
    publicUrl: `http://127.0.0.1:${port}`,
    egressAllowlist: ['127.0.0.1/32'],
    oauthIssuer: await startIdp(),
    oauthWorkspace: 'corp',
    oauthAgentClaim: 'warden_agent',
  };
});
/** The same IdP trusted by a Warden without WARDEN_PUBLIC_URL. */
const unnamed = useTestServer(async () => ({ egressAllowlist: ['127.0.0.1/32'], oauthIssuer: issuer, oauthWorkspace: 'corp' }));
let upstream: CountingUpstream;
let key: string;

beforeAll(async () => {
  upstream = await startCountingUpstream();
  key = await keyFor(server, 'runtime:execute,mcp_servers:write,agents:write,audit:read', 'corp');
  const api = (path: string, body: unknown) => server.api('POST', path as '/agents', { key, body, unchecked: true });
  expect((await api('/mcp-servers', { name: 'tools', slug: 'tools', transport_url: upstream.url })).status).toBe(201);
  // the agent has a key of its own: the token stands in for it
  expect((await api('/agents', { name: 'Bot', slug: 'bot', provider: 'local', api_key: `ak_corp_${Date.now()}` })).status).toBe(201);
});
afterAll(async () => {
  await upstream?.close();
  await new Promise((resolve) => idp?.close(resolve));
});

const post = (path: string, token: string) =>
  fetch(`${server.origin}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${token}` },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list', params: {} }),
  });

function challenge(res: Response): Record<string, string> {
  const header = res.headers.get('www-authenticate') ?? '';
  expect(header).toMatch(/^Bearer /);
  return Object.fromEntries([...header.matchAll(/([a-z_]+)="([^"]*)"/g)].map((m) => [m[1], m[2]]));
}

describe("the organisation's authorization server", () => {
  it('is named in the Protected Resource Metadata beside the built-in one', async () => {
    const metadata = await (await fetch(`${server.origin}/.well-known/oauth-protected-resource/api/v1/mcp/tools`)).json();
    expect(metadata.authorization_servers).toEqual([server.origin, issuer]);
  });

  it('issues tokens an unmodified MCP client lists and calls tools with, as the agent its claim names, audited', async () => {
    const token = await idpToken('bot-client', `${server.origin}/api/v1/mcp/tools`);
    const client = await connectClient(`${server.url}/mcp/tools`, { authorization: `Bearer ${token}` });
    try {
      expect((await client.listTools()).tools.map((t) => t.name)).toContain('echo');
      const result = await client.callTool({ name: 'echo', arguments: { text: 'from the idp' } });
      expect(result.content).toEqual([{ type: 'text', text: 'from the idp' }]);
    } finally {
      await client.close();
    }
    expect(upstream.calls()).toContain('echo:{"text":"from the idp"}');
    const audit = await server.api('GET', '/audit-logs', { key, query: { action: 'mcp.call', limit: 10 }, unchecked: true });
    expect(audit.body.data.some((e: { agent: string; result: string }) => e.agent === 'bot' && e.result === 'allowed')).toBe(true);
  });

  it('refuses a token for another resource (RFC 8707 audience) with invalid_token', async () => {
    const token = await idpToken('bot-client', `${server.origin}/api/v1/mcp/other`);
    for (const path of ['/api/v1/mcp/tools', '/api/v1/mcp']) {
      const res = await post(path, token);
      expect(res.status).toBe(401);
      expect(challenge(res)).toMatchObject({
        error: 'invalid_token',
        resource_metadata: `${server.origin}/.well-known/oauth-protected-resource${path}`,
      });
      expect((await res.json()).error.message).toMatch(/not for this resource/);
    }
  });

  it('refuses an expired token with invalid_token', async () => {
    const token = await idpToken('short-client', `${server.origin}/api/v1/mcp/tools`);
    await new Promise((resolve) => setTimeout(resolve, 2_100));
    const res = await post('/api/v1/mcp/tools', token);
    expect(res.status).toBe(401);
    expect(challenge(res).error).toBe('invalid_token');
    expect((await res.json()).error.message).toMatch(/expired/);
  });

  it('answers a token without the scope mcp 403 insufficient_scope, naming the scope', async () => {
    const token = await idpToken('bot-client', `${server.origin}/api/v1/mcp/tools`, 'other');
    const res = await post('/api/v1/mcp/tools', token);
    expect(res.status).toBe(403);
    expect(challenge(res)).toMatchObject({ error: 'insufficient_scope', scope: 'mcp' });
    expect((await res.json()).error.data.code).toBe('insufficient_scope');
  });

  it('refuses a token of an unknown issuer, a forged signature and a malformed token with invalid_token', async () => {
    const { privateKey } = await generateKeyPair('ES256');
    const resource = `${server.origin}/api/v1/mcp/tools`;
    const sign = (iss: string) =>
      new SignJWT({ scope: 'mcp', warden_agent: 'bot' })
        .setProtectedHeader({ alg: 'ES256', kid: 'idp-1' })
        .setIssuer(iss)
        .setAudience(resource)
        .setExpirationTime('5m')
        .sign(privateKey);
    const cases: [string, RegExp][] = [
      [await sign('http://127.0.0.1:1/unknown'), /authorization server Warden does not accept/],
      [await sign(issuer), /signature does not verify/],
      ['eyJhbGciOiJub25lIn0.eyJpc3MiOiJ4In0.', /does not accept/],
      ['abc.def.ghi', /malformed/],
      ['wat_not-a-token', /./],
    ];
    for (const [token, message] of cases) {
      const res = await post('/api/v1/mcp/tools', token);
      expect(res.status, token).toBe(401);
      expect(challenge(res).error).toBe('invalid_token');
      expect((await res.json()).error.message).toMatch(message);
    }
  });

  it('refuses a token naming an agent the workspace does not have', async () => {
    const token = await idpToken('ghost-client', `${server.origin}/api/v1/mcp/tools`);
    const res = await post('/api/v1/mcp/tools', token);
    expect(res.status).toBe(403);
    expect((await res.json()).error.data.code).toBe('agent_not_found');
  });

  it('takes the audience from configuration, never from the Host header: a token for another deployment is refused (row 4)', async () => {
    const other = 'http://warden.other.example';
    const token = await idpToken('bot-client', `${other}/api/v1/mcp/tools`);
    const { port } = new URL(server.origin);
    const answer = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = httpRequest(
        {
          host: '127.0.0.1',
          port,
          path: '/api/v1/mcp/tools',
          method: 'POST',
          headers: {
            host: 'warden.other.example',
            'content-type': 'application/json',
            accept: 'application/json, text/event-stream',
            authorization: `Bearer ${token}`,
          },
        },
        (res) => {
          let body = '';
          res.on('data', (chunk) => {
            body += chunk;
          });
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
        },
      );
      req.on('error', reject);
      req.end(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list', params: {} }));
    });
    expect(answer.status).toBe(401);
    expect(answer.body).toMatch(/not for this resource/);
  });

  it('refuses every token of the IdP, with the fix in the message, while WARDEN_PUBLIC_URL is unset (row 4)', async () => {
    const token = await idpToken('bot-client', `${unnamed.origin}/api/v1/mcp/tools`);
    const res = await fetch(`${unnamed.origin}/api/v1/mcp/tools`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${token}` },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list', params: {} }),
    });
    expect(res.status).toBe(401);
    expect(challenge(res).error).toBe('invalid_token');
    expect((await res.json()).error.message).toMatch(/WARDEN_PUBLIC_URL/);
    // nor does its metadata name the IdP
    const metadata = await (await fetch(`${unnamed.origin}/.well-known/oauth-protected-resource/api/v1/mcp/tools`)).json();
    expect(metadata.authorization_servers).toEqual([unnamed.origin]);
  });
});
