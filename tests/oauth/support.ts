/**
 * For the OAuth tests: an MCP SDK client OAuth provider kept in memory (what a desktop client
 * keeps on disk), a loopback redirect receiver, an upstream recorder that notes the
 * Authorization header of every request it relays, and PKCE pairs computed here (RFC 7636),
 * not by Warden's code.
 */
import { createHash, randomBytes } from 'node:crypto';
import { createServer, request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { OAuthClientProvider } from '@modelcontextprotocol/sdk/client/auth.js';
import type { OAuthClientInformationMixed, OAuthClientMetadata, OAuthTokens } from '@modelcontextprotocol/sdk/shared/auth.js';

export class MemoryOAuthProvider implements OAuthClientProvider {
  client: OAuthClientInformationMixed | undefined;
  saved: OAuthTokens | undefined;
  verifier = '';
  authorizationUrl: URL | undefined;

  constructor(
    readonly redirectUrl: string,
    private readonly name = 'Test Desktop Client',
    /** The https URL of the client's metadata document, for servers that take one instead of registration. */
    readonly clientMetadataUrl?: string,
  ) {}

  get clientMetadata(): OAuthClientMetadata {
    return {
      client_name: this.name,
      redirect_uris: [this.redirectUrl],
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      token_endpoint_auth_method: 'none',
    };
  }
  clientInformation() {
    return this.client;
  }
  saveClientInformation(info: OAuthClientInformationMixed) {
    this.client = info;
  }
  tokens() {
    return this.saved;
  }
  saveTokens(tokens: OAuthTokens) {
    this.saved = tokens;
  }
  redirectToAuthorization(url: URL) {
    this.authorizationUrl = url;
  }
  saveCodeVerifier(verifier: string) {
    this.verifier = verifier;
  }
  codeVerifier() {
    return this.verifier;
  }
}

/** A loopback page the authorization server sends the browser back to; it keeps each query it got. */
export async function startRedirectReceiver(): Promise<{ url: string; received: URLSearchParams[]; close: () => Promise<void> }> {
  const received: URLSearchParams[] = [];
  const http: Server = createServer((req, res) => {
    received.push(new URL(req.url ?? '/', 'http://127.0.0.1').searchParams);
    res.writeHead(200, { 'content-type': 'text/plain' }).end('You can close this window.');
  });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(http.address() as AddressInfo).port}/callback`,
    received,
    close: () => new Promise((resolve) => http.close(() => resolve())),
  };
}

/** Relays every request to `target`, noting the Authorization header each one carried (undefined when none). */
export async function startRecorder(
  target: string,
): Promise<{ url: string; authorizations: (string | undefined)[]; close: () => Promise<void> }> {
  const authorizations: (string | undefined)[] = [];
  const upstream = new URL(target);
  const http: Server = createServer((req, res) => {
    authorizations.push(req.headers.authorization);
    const relay = request(
      {
        host: upstream.hostname,
        port: upstream.port,
        path: upstream.pathname,
        method: req.method,
        headers: { ...req.headers, host: upstream.host },
      },
      (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      },
    );
    relay.on('error', () => res.writeHead(502).end());
    req.pipe(relay);
  });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(http.address() as AddressInfo).port}/mcp`,
    authorizations,
    close: () =>
      new Promise((resolve) => {
        http.closeAllConnections();
        http.close(() => resolve());
      }),
  };
}

/** A PKCE pair (RFC 7636 S256). */
export function pkce(): { verifier: string; challenge: string } {
  const verifier = randomBytes(32).toString('base64url');
  return { verifier, challenge: createHash('sha256').update(verifier).digest('base64url') };
}
