/**
 * The MCP endpoints as OAuth 2.1 protected resources (RFC 9728): their metadata at the
 * well-known paths, and the challenge a refused request carries, read as a client reads them
 * (over HTTP, parsed here, not by the server's code). Warden's own keys keep working.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type CountingUpstream, connectClient, startCountingUpstream } from '../mcp-gateway/support.ts';
import { keyFor, useTestServer } from '../support/server.ts';

const server = useTestServer({ egressAllowlist: ['127.0.0.1/32'] });
let upstream: CountingUpstream;
beforeAll(async () => {
  upstream = await startCountingUpstream();
});
afterAll(async () => upstream?.close());

/** The auth-params of a `Bearer` challenge, as RFC 9110 §11.2 writes them. */
function challengeParams(header: string | null): Record<string, string> {
  expect(header).toMatch(/^Bearer /);
  const params: Record<string, string> = {};
  for (const match of (header as string).slice(7).matchAll(/([a-z_]+)="([^"]*)"/g)) params[match[1] as string] = match[2] as string;
  return params;
}

const initialize = (url: string, headers: Record<string, string> = {}) =>
  fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers },
    body: JSON.stringify({
      jsonrpc: '2.0',
      id: 1,
      method: 'initialize',
      params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 't', version: '1' } },
    }),
  });

describe('Protected Resource Metadata (RFC 9728)', () => {
  it('is served for /api/v1/mcp and each /api/v1/mcp/{slug}, naming the resource, the authorization server and the scope', async () => {
    for (const path of ['/api/v1/mcp', '/api/v1/mcp/github']) {
      const res = await fetch(`${server.origin}/.well-known/oauth-protected-resource${path}`);
      expect(res.status).toBe(200);
      expect(res.headers.get('access-control-allow-origin')).toBe('*');
      const body = await res.json();
      expect(body).toMatchObject({
        resource: `${server.origin}${path}`,
        authorization_servers: [server.origin],
        scopes_supported: ['mcp'],
        bearer_methods_supported: ['header'],
      });
    }
  });

  it('answers 404 for a path that is no MCP endpoint', async () => {
    expect((await fetch(`${server.origin}/.well-known/oauth-protected-resource/api/v1/mcp/Not_A_Slug`)).status).toBe(404);
    expect((await fetch(`${server.origin}/.well-known/oauth-protected-resource/api/v1/policies`)).status).toBe(404);
  });
});

describe('the challenge of a refused request', () => {
  it('points a client without credentials to the metadata of the endpoint it called, with the scope', async () => {
    for (const path of ['/api/v1/mcp', '/api/v1/mcp/github']) {
      const res = await initialize(`${server.origin}${path}`);
      expect(res.status).toBe(401);
      const params = challengeParams(res.headers.get('www-authenticate'));
      expect(params.resource_metadata).toBe(`${server.origin}/.well-known/oauth-protected-resource${path}`);
      expect(params.scope).toBe('mcp');
      expect(params.error).toBeUndefined();
      const metadata = await (await fetch(params.resource_metadata as string)).json();
      expect(metadata.resource).toBe(`${server.origin}${path}`);
    }
  });

  it('says invalid_token when the bearer sent is nobody’s', async () => {
    const res = await initialize(`${server.url}/mcp`, { authorization: 'Bearer not-a-known-key' });
    expect(res.status).toBe(401);
    expect(challengeParams(res.headers.get('www-authenticate'))).toMatchObject({ error: 'invalid_token', scope: 'mcp' });
    expect((await res.json()).error.data.code).toBe('unauthorized');
  });

  it('names WARDEN_PUBLIC_URL’s origin when it is set', async () => {
    const { startTestServer } = await import('../support/server.ts');
    const other = await startTestServer({ publicUrl: 'https://warden.example.com' });
    try {
      const res = await initialize(`${other.url}/mcp/tools`);
      expect(challengeParams(res.headers.get('www-authenticate')).resource_metadata).toBe(
        'https://warden.example.com/.well-known/oauth-protected-resource/api/v1/mcp/tools',
      );
      const metadata = await (await fetch(`${other.origin}/.well-known/oauth-protected-resource/api/v1/mcp/tools`)).json();
      expect(metadata).toMatchObject({
        resource: 'https://warden.example.com/api/v1/mcp/tools',
        authorization_servers: ['https://warden.example.com'],
      });
    } finally {
      await other.close();
    }
  });
});

describe("Warden's own keys", () => {
  it('an agent key as the bearer, and a workspace key with the agent key, still list and call tools', async () => {
    const key = await keyFor(server, 'runtime:execute,mcp_servers:write,agents:write', 'prm');
    const agentKey = `ak_prm_${Math.random().toString(36).slice(2)}`;
    const api = (path: string, body: unknown) => server.api('POST', path as '/agents', { key, body, unchecked: true });
    expect((await api('/mcp-servers', { name: 'tools', slug: 'tools', transport_url: upstream.url })).status).toBe(201);
    expect((await api('/agents', { name: 'Bot', slug: 'bot', provider: 'local', api_key: agentKey })).status).toBe(201);
    const credentials: Record<string, string>[] = [
      { authorization: `Bearer ${agentKey}` },
      { authorization: `Bearer ${key}`, 'x-warden-agent-key': agentKey },
    ];
    for (const headers of credentials) {
      const client = await connectClient(`${server.url}/mcp/tools`, headers);
      try {
        expect((await client.listTools()).tools.map((t) => t.name)).toContain('echo');
        const result = await client.callTool({ name: 'echo', arguments: { text: 'hi' } });
        expect(result.content).toEqual([{ type: 'text', text: 'hi' }]);
      } finally {
        await client.close();
      }
    }
  });
});
