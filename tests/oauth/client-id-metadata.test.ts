/**
 * Client ID Metadata Documents: the MCP SDK's client, given a `clientMetadataUrl`, uses that
 * https URL as its client id instead of registering; Warden fetches the document (here from an
 * https server on a loopback port whose self-signed certificate this test process trusts), and
 * the flow goes on as with registration: headless Chromium signs in and consents, the client
 * calls a tool as the agent. A document that names another client id, or asks for a secret, is
 * refused as invalid_client, and nothing is stored.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { getCACertificates, setDefaultCACertificates } from 'node:tls';
import { UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { type Browser, chromium } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type CountingUpstream, startCountingUpstream } from '../mcp-gateway/support.ts';
import { keyFor, useTestServer } from '../support/server.ts';
import { MemoryOAuthProvider, pkce, startRedirectReceiver } from './support.ts';

const CHROMIUM = '/usr/bin/chromium';
const HAS_CHROMIUM = existsSync(CHROMIUM);
if (!HAS_CHROMIUM && process.env.CI === 'true') throw new Error(`${CHROMIUM} is missing: apt-get install -y chromium`);

const server = useTestServer({ egressAllowlist: ['127.0.0.1/32'] });
let upstream: CountingUpstream;
let receiver: Awaited<ReturnType<typeof startRedirectReceiver>>;
let documents: Server;
let documentOrigin = '';
let browser: Browser | undefined;
let admin: string;
/** The documents the https server serves, by path. */
const served = new Map<string, unknown>();

beforeAll(async () => {
  // a certificate for 127.0.0.1, trusted by this process only (the server under test runs in it)
  const dir = mkdtempSync(join(tmpdir(), 'warden-cimd-'));
  execFileSync(
    'openssl',
    [
      'req',
      '-x509',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:prime256v1',
      '-nodes',
      '-days',
      '1',
      '-subj',
      '/CN=127.0.0.1',
      '-addext',
      'subjectAltName=IP:127.0.0.1',
      '-keyout',
      join(dir, 'key.pem'),
      '-out',
      join(dir, 'cert.pem'),
    ],
    { stdio: 'ignore' },
  );
  const cert = readFileSync(join(dir, 'cert.pem'), 'utf8');
  setDefaultCACertificates([...getCACertificates('default'), cert]);
  documents = createServer({ key: readFileSync(join(dir, 'key.pem')), cert }, (req, res) => {
    const body = served.get(req.url ?? '');
    if (body === undefined) return void res.writeHead(404).end();
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(body));
  });
  await new Promise<void>((resolve) => documents.listen(0, '127.0.0.1', resolve));
  documentOrigin = `https://127.0.0.1:${(documents.address() as AddressInfo).port}`;

  upstream = await startCountingUpstream();
  receiver = await startRedirectReceiver();
  admin = await keyFor(server, 'admin,agents:read,agents:write,mcp_servers:write,audit:read', 'cimd');
  const api = (path: string, body: unknown) => server.api('POST', path as '/agents', { key: admin, body, unchecked: true });
  expect((await api('/mcp-servers', { name: 'tools', slug: 'tools', transport_url: upstream.url })).status).toBe(201);
  expect((await api('/agents', { name: 'Bot', slug: 'bot', provider: 'local' })).status).toBe(201);
  if (HAS_CHROMIUM)
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--no-first-run'],
    });
}, 60_000);
afterAll(async () => {
  await browser?.close();
  await receiver?.close();
  await upstream?.close();
  await new Promise((resolve) => documents?.close(resolve));
});

const documentFor = (path: string, extra: Record<string, unknown> = {}) => {
  const clientId = `${documentOrigin}${path}`;
  served.set(path, {
    client_id: clientId,
    client_name: 'Metadata Client',
    redirect_uris: [receiver.url],
    grant_types: ['authorization_code', 'refresh_token'],
    response_types: ['code'],
    token_endpoint_auth_method: 'none',
    ...extra,
  });
  return clientId;
};
const count = async (table: 'oauth_authorizations' | 'oauth_clients') =>
  Number(
    (
      await server.database.db
        .selectFrom(table)
        .select((eb) => eb.fn.countAll().as('n'))
        .executeTakeFirstOrThrow()
    ).n,
  );

describe('Client ID Metadata Documents', () => {
  it('are announced in the authorization server metadata', async () => {
    const metadata = await (await fetch(`${server.origin}/.well-known/oauth-authorization-server`)).json();
    expect(metadata).toMatchObject({
      issuer: server.origin,
      client_id_metadata_document_supported: true,
      code_challenge_methods_supported: ['S256'],
    });
  });

  it.skipIf(!HAS_CHROMIUM)(
    'let the SDK client use its document URL as its id, consent in the browser, and call a tool',
    async () => {
      const clientId = documentFor('/clients/desktop.json');
      const endpoint = new URL(`${server.url}/mcp/tools`);
      const desktop = new MemoryOAuthProvider(receiver.url, 'Metadata Client', clientId);
      const transport = new StreamableHTTPClientTransport(endpoint, { authProvider: desktop });
      await expect(new Client({ name: 'cimd', version: '1.0.0' }).connect(transport)).rejects.toThrow(UnauthorizedError);
      expect(desktop.client?.client_id).toBe(clientId);
      const authorize = desktop.authorizationUrl as URL;
      expect(authorize.searchParams.get('client_id')).toBe(clientId);
      const page = await (browser as Browser).newPage();
      try {
        await page.goto(authorize.href);
        await page.getByTestId('login-key').fill(admin);
        await page.getByTestId('login-submit').click();
        await page.getByTestId('consent-card').waitFor();
        // the name shown is the document's
        expect(await page.getByTestId('consent-client').textContent()).toBe('Metadata Client');
        await page.getByTestId('consent-allow').click();
        await page.waitForURL((url) => url.href.startsWith(receiver.url));
      } finally {
        await page.close();
      }
      const back = receiver.received.findLast((q) => q.has('code')) as URLSearchParams;
      await transport.finishAuth(back.get('code') as string);
      const client = new Client({ name: 'cimd', version: '1.0.0' });
      await client.connect(new StreamableHTTPClientTransport(endpoint, { authProvider: desktop }));
      try {
        const result = await client.callTool({ name: 'echo', arguments: { text: 'by document' } });
        expect(result.content).toEqual([{ type: 'text', text: 'by document' }]);
      } finally {
        await client.close();
      }
      const grants = await server.api('GET', '/oauth-grants', { key: admin, unchecked: true });
      expect(grants.body.data[0]).toMatchObject({ client_id: clientId, client_name: 'Metadata Client', agent: 'bot' });
      // known since Warden first read its metadata document
      expect(grants.body.data[0].client_registered_at).toMatch(/^\d{4}-\d{2}-\d{2}T/);
    },
    120_000,
  );

  it('refuse a document naming another client id, asking for a secret, or missing, with invalid_client, storing nothing', async () => {
    const cases = [
      documentFor('/clients/other.json', { client_id: `${documentOrigin}/clients/elsewhere.json` }),
      documentFor('/clients/secret.json', { token_endpoint_auth_method: 'client_secret_post' }),
      `${documentOrigin}/clients/missing.json`,
    ];
    const [authorizations, clients] = [await count('oauth_authorizations'), await count('oauth_clients')];
    for (const clientId of cases) {
      const query = new URLSearchParams({
        response_type: 'code',
        client_id: clientId,
        redirect_uri: receiver.url,
        code_challenge: pkce().challenge,
        code_challenge_method: 'S256',
      });
      const res = await fetch(`${server.origin}/authorize?${query}`, { redirect: 'manual' });
      expect(res.status, clientId).toBe(400);
      expect((await res.json()).error).toBe('invalid_client');
    }
    expect(await count('oauth_authorizations')).toBe(authorizations);
    expect(await count('oauth_clients')).toBe(clients);
  });
});
