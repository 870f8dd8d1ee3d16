/**
 * Brokered upstream credentials for MCP servers: an SDK-built upstream that answers 401 without
 * its bearer token, registered with `upstream_auth`, reached through the MCP gateway
 * (/api/v1/mcp/{slug}, an unmodified SDK client with only its agent key) and through the REST
 * runtime (/runtime/mcp/call). The agent's requests carry no upstream secret; the upstream sees
 * Warden's. The secret is write-only (answers show a hint), and rotating it (PATCH) needs no
 * restart: the sessions opened with the old one are closed, the next call uses the new.
 */
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectClient, eventually } from '../mcp-gateway/support.ts';
import { useTestServer } from '../support/server.ts';
import { startTokenMcpServer, type TokenMcpServer } from './support.ts';

const TOKEN = 'ghp_brokeredToken_0123456789abcdefWXYZ';
const ROTATED = 'ghp_rotatedToken_9876543210fedcbaQRST';
const AGENT_KEY = 'ak_upstream_auth_agent_key_0123456789';

const server = useTestServer({ egressAllowlist: ['127.0.0.1/32'] });
let upstream: TokenMcpServer;
const clients: Client[] = [];

beforeAll(async () => {
  upstream = await startTokenMcpServer(TOKEN);
  const agent = await server.api('POST', '/agents', { body: { name: 'Bot', slug: 'bot', provider: 'local', api_key: AGENT_KEY } });
  expect(agent.status).toBe(201);
});
afterAll(async () => {
  for (const client of clients) await client.close().catch(() => undefined);
  await upstream?.close();
});

const gatewayClient = async (slug: string) => {
  const client = await connectClient(`${server.url}/mcp/${slug}`, { authorization: `Bearer ${AGENT_KEY}` });
  clients.push(client);
  return client;
};
const restCall = (slug: string, text: string) =>
  server.api('POST', '/runtime/mcp/call', {
    headers: { 'x-warden-agent-key': AGENT_KEY },
    body: { server: slug, tool: 'whoami', arguments: { text }, input: { agent: 'bot' } },
  });
const textOf = (result: unknown) => ((result as { content: { text: string }[] }).content[0] as { text: string }).text;

describe('an MCP server registered with upstream_auth', () => {
  it('answers the secret as a hint only, on create, get and list', async () => {
    const created = await server.api('POST', '/mcp-servers', {
      body: { name: 'Hosted', slug: 'hosted', transport_url: upstream.url, upstream_auth: { type: 'bearer', secret: TOKEN } },
    });
    expect(created.status).toBe(201);
    expect(created.body.data.upstream_auth).toEqual({ type: 'bearer', header: 'authorization', hint: '…WXYZ' });
    const got = await server.api('GET', '/mcp-servers/hosted');
    expect(got.body.data.upstream_auth).toEqual({ type: 'bearer', header: 'authorization', hint: '…WXYZ' });
    const listed = await server.api('GET', '/mcp-servers?limit=100');
    expect(listed.body.data.find((s) => s.slug === 'hosted')?.upstream_auth?.hint).toBe('…WXYZ');
    for (const answer of [created, got, listed]) expect(JSON.stringify(answer.body)).not.toContain(TOKEN.slice(0, 20));
  });

  it('is reached through the gateway with Warden’s token while the agent sends only its key', async () => {
    const before = upstream.authorizations().length;
    const client = await gatewayClient('hosted');
    const result = await client.callTool({ name: 'whoami', arguments: { text: 'via gateway' } });
    expect(textOf(result)).toBe('reached: via gateway');
    const seen = upstream.authorizations().slice(before);
    expect(seen.length).toBeGreaterThan(0);
    expect(new Set(seen)).toEqual(new Set([`Bearer ${TOKEN}`]));
    expect(seen.some((a) => a?.includes(AGENT_KEY))).toBe(false);
  });

  it('is reached through the REST runtime the same way', async () => {
    const before = upstream.authorizations().length;
    const res = await restCall('hosted', 'via rest');
    expect(res.status).toBe(200);
    expect(res.body.data.allowed).toBe(true);
    expect(textOf(res.body.data.execution)).toBe('reached: via rest');
    expect(new Set(upstream.authorizations().slice(before))).toEqual(new Set([`Bearer ${TOKEN}`]));
  });

  it('without upstream_auth the upstream refuses: 502 call_failed, and the agent never had a token to send', async () => {
    const created = await server.api('POST', '/mcp-servers', { body: { name: 'Bare', slug: 'bare', transport_url: upstream.url } });
    expect(created.status).toBe(201);
    expect(created.body.data.upstream_auth).toBeNull();
    const refusedBefore = upstream.refused();
    const res = await restCall('bare', 'no token');
    expect(res.status).toBe(502);
    expect(res.body.error?.code).toBe('call_failed');
    expect(upstream.refused()).toBeGreaterThan(refusedBefore);
  });

  it('rotates without a restart: old sessions are closed, the next calls use the new token', async () => {
    const client = await gatewayClient('hosted');
    expect(textOf(await client.callTool({ name: 'whoami', arguments: { text: 'before' } }))).toBe('reached: before');
    const terminationsBefore = upstream.terminations().length;
    upstream.setToken(ROTATED);
    const rotated = await server.api('PATCH', '/mcp-servers/hosted', {
      body: { upstream_auth: { type: 'bearer', secret: ROTATED } },
    });
    expect(rotated.status).toBe(200);
    expect(rotated.body.data.upstream_auth?.hint).toBe('…QRST');
    const before = upstream.authorizations().length;
    // the same client, the same gateway session: Warden reconnects upstream with the new secret
    expect(textOf(await client.callTool({ name: 'whoami', arguments: { text: 'after' } }))).toBe('reached: after');
    const rest = await restCall('hosted', 'after, rest');
    expect(rest.status).toBe(200);
    const seen = upstream.authorizations().slice(before);
    expect(seen.filter((a) => a === `Bearer ${ROTATED}`).length).toBeGreaterThan(0);
    expect(seen).not.toContain(`Bearer ${TOKEN}`);
    // the sessions opened with the old token were terminated (a DELETE, sent as they were opened: with the old token)
    const ended = await eventually(() => {
      const now = upstream.terminations().slice(terminationsBefore);
      return now.length > 0 ? now : undefined;
    }, 5_000);
    expect(ended).toContain(`Bearer ${TOKEN}`);
  });

  it('removing upstream_auth (null) stops sending it', async () => {
    const res = await server.api('PATCH', '/mcp-servers/hosted', { body: { upstream_auth: null } });
    expect(res.status).toBe(200);
    expect(res.body.data.upstream_auth).toBeNull();
    const before = upstream.authorizations().length;
    expect((await restCall('hosted', 'no more')).status).toBe(502);
    expect(
      upstream
        .authorizations()
        .slice(before)
        .every((a) => a === undefined),
    ).toBe(true);
  });
});

describe('bad upstream_auth input', () => {
  const create = (upstreamAuth: unknown) =>
    server.api('POST', '/mcp-servers', {
      unchecked: true,
      body: { name: `Bad ${Math.random()}`, transport_url: upstream.url, upstream_auth: upstreamAuth },
    });
  it.each([
    ['an empty secret', { type: 'bearer', secret: '' }],
    ['a blank secret', { type: 'bearer', secret: '   ' }],
    ['a secret with a newline', { type: 'bearer', secret: 'abc\ndef' }],
    ['a malformed header name', { type: 'header', header: 'X Api Key', secret: 'abcdefghijkl' }],
    ['a header type without a header', { type: 'header', secret: 'abcdefghijkl' }],
    ['a reserved header', { type: 'header', header: 'Host', secret: 'abcdefghijkl' }],
    ['a bearer secret in another header', { type: 'bearer', header: 'X-Api-Key', secret: 'abcdefghijkl' }],
    ['an unknown type', { type: 'basic', secret: 'abcdefghijkl' }],
  ])('refuses %s: 400 invalid_request, nothing stored', async (_, upstreamAuth) => {
    const before = (await server.api('GET', '/mcp-servers?limit=100')).body.data.length;
    const res = await create(upstreamAuth);
    expect(res.status).toBe(400);
    expect(res.body.error?.code).toBe('invalid_request');
    expect((await server.api('GET', '/mcp-servers?limit=100')).body.data.length).toBe(before);
  });
});
