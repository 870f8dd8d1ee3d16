/**
 * Dynamic client registration (RFC 7591) takes only redirect URIs a client can own (RFC 8252,
 * OAuth 2.1), and a body that is not JSON is the client's error (issue 46, row 8); the built-in
 * authorization server names itself by configuration, never by a Host header (row 4).
 */
import { request as httpRequest } from 'node:http';
import { describe, expect, it } from 'vitest';
import { useTestServer } from '../support/server.ts';

const server = useTestServer();

const register = (body: string, contentType = 'application/json') =>
  fetch(`${server.origin}/register`, { method: 'POST', headers: { 'content-type': contentType }, body });
const client = (redirectUris: string[]) =>
  JSON.stringify({ client_name: 'Probe', redirect_uris: redirectUris, token_endpoint_auth_method: 'none' });

describe('POST /register (row 8)', () => {
  it.each([
    'http://evil.example.com/cb',
    'http://10.0.0.5/cb',
    'javascript:alert(1)',
    'data:text/html,hi',
    'file:///etc/passwd',
    'https://app.example.com/cb#fragment',
  ])('refuses the redirect URI %s with 400 invalid_client_metadata', async (uri) => {
    const res = await register(client(['https://ok.example.com/cb', uri]));
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({
      error: 'invalid_client_metadata',
      error_description: expect.stringContaining('redirect_uris'),
    });
  });

  it.each([
    'https://app.example.com/callback',
    'http://127.0.0.1:33418/callback',
    'http://[::1]/cb',
    'http://localhost:6274/oauth/callback',
    'com.example.app:/oauth2redirect',
    'cursor://anysphere.cursor-retrieval/oauth/callback',
  ])('registers the redirect URI %s', async (uri) => {
    const res = await register(client([uri]));
    expect(res.status).toBe(201);
    expect((await res.json()).redirect_uris).toEqual([uri]);
  });

  it('answers a body that is not JSON with 400 invalid_client_metadata, not a server error', async () => {
    for (const body of ['{"redirect_uris": [', 'not json at all']) {
      const res = await register(body);
      expect(res.status, body).toBe(400);
      expect(await res.json()).toMatchObject({ error: 'invalid_client_metadata' });
    }
  });
});

/** A GET to this server with a Host header of the caller's choosing (fetch cannot set one). */
function getWithHost(path: string, host: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: '127.0.0.1', port: new URL(server.origin).port, path, headers: { host } }, (res) => {
      let body = '';
      res.on('data', (chunk) => {
        body += chunk;
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

describe('the issuer and resource come from configuration (row 4)', () => {
  it('without WARDEN_PUBLIC_URL, a loopback request is served its own origin', async () => {
    const metadata = await (await fetch(`${server.origin}/.well-known/oauth-authorization-server`)).json();
    expect(metadata.issuer).toBe(server.origin);
  });

  it('without WARDEN_PUBLIC_URL, a Host header naming another deployment gets no issuer, resource or audience of its choosing', async () => {
    for (const path of ['/.well-known/oauth-authorization-server', '/.well-known/oauth-protected-resource/api/v1/mcp']) {
      const answer = await getWithHost(path, 'warden.other.example');
      expect(answer.status, path).toBe(404);
      expect(answer.body, path).toContain('WARDEN_PUBLIC_URL');
      expect(answer.body, path).not.toContain('warden.other.example');
    }
  });
});
