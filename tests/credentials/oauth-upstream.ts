/**
 * An upstream MCP server behind OAuth, as hosted ones are (GitHub's, Linear's…), for the
 * upstream OAuth connection tests: panva's oidc-provider (a certified implementation) is its
 * authorization server on loopback, with dynamic registration, authorization code with PKCE,
 * resource indicators issuing JWT access tokens, rotating refresh tokens and revocation; its
 * sign-in and consent are oidc-provider's development pages, driven here by `consent` with
 * plain HTTP and a cookie jar. The MCP server (the SDK's) verifies each token with jose against
 * the provider's keys — issuer, audience = its own URL, expiry, scope — publishes its Protected
 * Resource Metadata (RFC 9728), and records every Authorization header it was sent.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { createRemoteJWKSet, exportJWK, generateKeyPair, jwtVerify } from 'jose';
import Provider from 'oidc-provider';
import { z } from 'zod';

export const UPSTREAM_SCOPE = 'tools:call';

export interface OAuthUpstream {
  /** The MCP endpoint. */
  url: string;
  /** The authorization server's issuer. */
  issuer: string;
  /** A client registered by hand (for `client_id` configuration): its redirect URI is Warden's callback. */
  staticClient: { id: string; secret: string };
  /** Seconds the next access tokens live. */
  setTokenTtl: (seconds: number) => void;
  /** While true, the token endpoint answers every request 400 invalid_grant (the grant revoked at the server). */
  refuseTokens: (refuse: boolean) => void;
  /** Tokens the MCP server refuses from now on, as if revoked. */
  reject: (token: string) => void;
  /** The Authorization header of every request, in order (undefined when none). */
  authorizations: () => (string | undefined)[];
  /** Who each tool call was made as (the token's `sub`). */
  callers: () => string[];
  /** Token endpoint requests, by grant type. */
  grants: () => string[];
  /** Requests to the revocation endpoint (RFC 7009). */
  revocations: () => number;
  /** The names of the clients registered (RFC 7591), as the consent page shows them. */
  clientNames: () => string[];
  /** Every authorization code and refresh token the server issued (opaque: their value is their id). */
  issued: () => string[];
  close: () => Promise<void>;
}

const listen = async (server: Server) => {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
};

async function readJson(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  const text = Buffer.concat(chunks).toString('utf8');
  return text ? JSON.parse(text) : undefined;
}

export async function startOAuthUpstream(wardenCallback: string): Promise<OAuthUpstream> {
  const idp = createServer();
  const issuer = await listen(idp);
  const mcp = createServer();
  const origin = await listen(mcp);
  const url = `${origin}/mcp`;
  let ttl = 300;
  const grants: string[] = [];
  let revocations = 0;
  const { privateKey } = await generateKeyPair('ES256', { extractable: true });
  const staticClient = { id: 'warden-static', secret: 'warden-static-secret-0123456789abcdef' };
  const provider = new Provider(issuer, {
    clients: [
      {
        client_id: staticClient.id,
        client_secret: staticClient.secret,
        redirect_uris: [wardenCallback],
        grant_types: ['authorization_code', 'refresh_token'],
        response_types: ['code'],
        token_endpoint_auth_method: 'client_secret_basic',
      },
    ],
    jwks: { keys: [{ ...(await exportJWK(privateKey)), kid: 'upstream-1', alg: 'ES256', use: 'sig' }] },
    scopes: [UPSTREAM_SCOPE, 'offline_access'],
    // its one key is an EC key: clients (registered ones too) get ES256 ID tokens
    clientDefaults: { id_token_signed_response_alg: 'ES256' },
    issueRefreshToken: async (_ctx: unknown, client: { grantTypeAllowed: (g: string) => boolean }) =>
      client.grantTypeAllowed('refresh_token'),
    features: {
      devInteractions: { enabled: true },
      registration: { enabled: true },
      revocation: { enabled: true },
      resourceIndicators: {
        enabled: true,
        defaultResource: () => url,
        useGrantedResource: () => true,
        getResourceServerInfo: (_ctx: unknown, resource: string) => {
          if (resource !== url) throw new Error(`unknown resource ${resource}`);
          return { scope: UPSTREAM_SCOPE, audience: url, accessTokenTTL: ttl, accessTokenFormat: 'jwt', jwt: { sign: { alg: 'ES256' } } };
        },
      },
    },
  } as never);
  const events = provider as unknown as { on: (event: string, listener: (ctx: never) => void) => void };
  events.on('grant.success', (ctx: { oidc: { params: { grant_type: string } } }) => grants.push(ctx.oidc.params.grant_type));
  const issued: string[] = [];
  const clientNames: string[] = [];
  events.on('registration_create.success', (ctx: { oidc: { client: { clientName: string } } }) =>
    clientNames.push(ctx.oidc.client.clientName),
  );
  for (const kind of ['authorization_code.saved', 'refresh_token.saved'])
    events.on(kind, (token: { jti: string }) => issued.push(token.jti));
  let refusing = false;
  const handle = provider.callback();
  idp.on('request', (req, res) => {
    // counted by its path (the provider also destroys refresh tokens as it rotates them)
    if (req.method === 'POST' && req.url === '/token/revocation') revocations += 1;
    if (refusing && req.method === 'POST' && req.url === '/token') {
      req.resume();
      res.writeHead(400, { 'content-type': 'application/json' }).end('{"error":"invalid_grant","error_description":"grant revoked"}');
      return;
    }
    handle(req, res);
  });

  const keys = createRemoteJWKSet(new URL(`${issuer}/jwks`));
  const authorizations: (string | undefined)[] = [];
  const rejected = new Set<string>();
  const callers: string[] = [];
  const transports = new Map<string, StreamableHTTPServerTransport>();
  const metadataPath = '/.well-known/oauth-protected-resource/mcp';
  const challenge = `Bearer resource_metadata="${origin}${metadataPath}", scope="${UPSTREAM_SCOPE}"`;
  mcp.on('request', async (req, res) => {
    if (req.url === metadataPath) {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ resource: url, authorization_servers: [issuer], scopes_supported: [UPSTREAM_SCOPE] }));
      return;
    }
    authorizations.push(req.headers.authorization);
    const token = /^Bearer (.+)$/.exec(req.headers.authorization ?? '')?.[1];
    let subject: string;
    try {
      if (!token || rejected.has(token)) throw new Error('no token');
      const { payload } = await jwtVerify(token, keys, { issuer, audience: url });
      if (
        !String(payload.scope ?? '')
          .split(' ')
          .includes(UPSTREAM_SCOPE)
      )
        throw new Error('scope');
      subject = String(payload.sub);
    } catch {
      req.resume();
      res.writeHead(401, { 'content-type': 'application/json', 'www-authenticate': challenge }).end('{"error":"invalid_token"}');
      return;
    }
    try {
      const sessionId = req.headers['mcp-session-id'] as string | undefined;
      const body = req.method === 'POST' ? await readJson(req) : undefined;
      let transport = sessionId ? transports.get(sessionId) : undefined;
      if (!transport) {
        const server = new McpServer({ name: 'oauth-upstream', version: '1.0.0' });
        server.registerTool('whoami', { description: 'Names the caller', inputSchema: { text: z.string() } }, async ({ text }, extra) => {
          const caller = String(extra.requestInfo?.headers['x-caller'] ?? subject);
          callers.push(caller);
          return { content: [{ type: 'text', text: `${text} as ${caller}` }] };
        });
        const created = new StreamableHTTPServerTransport({
          sessionIdGenerator: () => randomUUID(),
          onsessioninitialized: (id) => {
            transports.set(id, created);
          },
        });
        created.onclose = () => {
          if (created.sessionId) transports.delete(created.sessionId);
        };
        await server.connect(created);
        transport = created;
      }
      // the caller a token names, for the tool to report (each request may carry a newer token)
      req.headers['x-caller'] = subject;
      await transport.handleRequest(req, res, body);
    } catch (error) {
      if (!res.headersSent) res.writeHead(500).end(String(error));
    }
  });

  return {
    url,
    issuer,
    staticClient,
    setTokenTtl: (seconds) => {
      ttl = seconds;
    },
    refuseTokens: (refuse) => {
      refusing = refuse;
    },
    reject: (token) => rejected.add(token),
    authorizations: () => [...authorizations],
    callers: () => [...callers],
    grants: () => [...grants],
    revocations: () => revocations,
    issued: () => [...issued],
    clientNames: () => [...clientNames],
    close: async () => {
      for (const transport of transports.values()) await transport.close().catch(() => undefined);
      for (const http of [mcp, idp]) {
        http.closeAllConnections();
        await new Promise<void>((resolve) => http.close(() => resolve()));
      }
    },
  };
}

/**
 * Signs in as `login` and consents on the authorization server's pages, from the authorization
 * URL Warden answered to the redirect back to Warden (returned, not followed), as a browser would:
 * following redirects, keeping cookies, submitting each form.
 */
export async function consent(authorizationUrl: string, callbackPrefix: string, login = 'alice'): Promise<string> {
  const jar = new Map<string, string>();
  let url = authorizationUrl;
  let body: URLSearchParams | undefined;
  for (let step = 0; step < 12; step++) {
    const res = await fetch(url, {
      method: body ? 'POST' : 'GET',
      redirect: 'manual',
      headers: {
        cookie: [...jar].map(([k, v]) => `${k}=${v}`).join('; '),
        ...(body ? { 'content-type': 'application/x-www-form-urlencoded' } : {}),
      },
      body,
    });
    for (const cookie of res.headers.getSetCookie()) {
      const [pair = ''] = cookie.split(';');
      const at = pair.indexOf('=');
      jar.set(pair.slice(0, at), pair.slice(at + 1));
    }
    const location = res.headers.get('location');
    if (res.status >= 300 && res.status < 400 && location) {
      const next = new URL(location, url).href;
      if (next.startsWith(callbackPrefix)) return next;
      url = next;
      body = undefined;
      continue;
    }
    const html = await res.text();
    const action = /action="([^"]+)"/.exec(html)?.[1];
    const prompt = /name="prompt" value="(\w+)"/.exec(html)?.[1];
    if (!action || !prompt) throw new Error(`unexpected page at ${url} (${res.status}): ${html.slice(0, 300)}`);
    url = new URL(action, url).href;
    body = new URLSearchParams(prompt === 'login' ? { prompt, login, password: 'any' } : { prompt });
  }
  throw new Error('the authorization server did not send the browser back');
}
