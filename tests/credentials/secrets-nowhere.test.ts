/**
 * Brokered secrets leave Warden only towards their own upstream. A server started in this
 * process with its log captured (debug level, request lines on) and its traces kept by an
 * exporter of this test; a webhook endpoint subscribed to every event. Known secrets are
 * stored (an MCP server's bearer token, then a rotated one; HTTP credentials; an OAuth
 * connection's client secret, and the codes and tokens its authorization server issues) and
 * used through the MCP gateway, the REST runtime and the HTTP proxy, refusals included; then
 * every API answer, the log, every span, every audit event and every webhook delivery is
 * searched for each secret, and the database rows for its plaintext.
 */
import { randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../apps/server/src/logger.ts';
import { startTracing, type Tracing } from '../../apps/server/src/observability/tracing.ts';
import { type RunningServer, startServer } from '../../apps/server/src/server.ts';
import { connectClient } from '../mcp-gateway/support.ts';
import { assertDatabaseAllowed, freshDatabase } from '../support/database.ts';
import { type ApiResponse, dashboardLogin, type RequestOptions, request } from '../support/server.ts';
import { consent, type OAuthUpstream, startOAuthUpstream } from './oauth-upstream.ts';
import { type HeaderUpstream, startHeaderUpstream, startTokenMcpServer, type TokenMcpServer } from './support.ts';

const SECRETS = {
  mcpToken: 'ghp_leakCheckMcpToken_A1b2C3d4E5f6G7h8',
  mcpRotated: 'ghp_leakCheckRotated_Z9y8X7w6V5u4T3s2',
  httpKey: 'sk_leakCheckHttpKey_Q1w2E3r4T5y6U7i8',
  bearer: 'tok_leakCheckBearer_M1n2B3v4C5x6Z7l8',
  badInput: 'sk_leakCheckRefused_P0o9I8u7Y6t5R4e3',
};
const AGENT_KEY = 'ak_leak_check_agent_key_0123456789ab';
const key = `wk_test_${randomBytes(24).toString('base64url')}`;

const log: string[] = [];
const spans: unknown[] = [];
const answers: string[] = [];
const deliveries: string[] = [];
let server: RunningServer;
let tracing: Tracing;
let mcp: TokenMcpServer;
let http: HeaderUpstream;
let receiver: Server;
let oauth: OAuthUpstream;
let dropDatabase: (() => Promise<void>) | undefined;
const clients: Client[] = [];

/** Calls the API with the bootstrap key and keeps the whole answer (status, headers, body) for the search. */
async function api(method: string, path: string, options: RequestOptions = {}): Promise<ApiResponse<any>> {
  const res = await request(server.url, key, method, path, options);
  answers.push(JSON.stringify({ status: res.status, headers: [...res.headers.entries()], body: res.body }));
  return res;
}

beforeAll(async () => {
  assertDatabaseAllowed();
  mcp = await startTokenMcpServer(SECRETS.mcpToken);
  http = await startHeaderUpstream('X-Api-Key', SECRETS.httpKey);
  receiver = createServer((req, res) => {
    let body = '';
    req.on('data', (chunk) => {
      body += chunk;
    });
    req.on('end', () => {
      deliveries.push(JSON.stringify({ headers: req.headers, body }));
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
  tracing = startTracing(
    { OTEL_SERVICE_NAME: 'warden-leak-check', OTEL_TRACES_SAMPLER: 'always_on' },
    {
      export: (batch, done) => {
        for (const span of batch)
          spans.push({
            name: span.name,
            attributes: span.attributes,
            events: span.events,
            status: span.status,
            resource: span.resource.attributes,
          });
        done({ code: 0 });
      },
      shutdown: async () => undefined,
    },
  );
  const pgdb = process.env.DATABASE_URL ? await freshDatabase(process.env.DATABASE_URL) : undefined;
  dropDatabase = pgdb?.drop;
  const destination = new Writable({
    write(chunk, _encoding, next) {
      log.push(String(chunk));
      next();
    },
  });
  server = await startServer(
    {
      port: 0,
      host: '127.0.0.1',
      databaseUrl: pgdb?.url,
      dataDir: 'memory://',
      bootstrapKey: key,
      validateResponses: true,
      egressAllowlist: ['127.0.0.1/32'],
      logRequests: true,
      tracing: true,
      auditSealIntervalMs: 100,
      webhookPollMs: 50,
      webhookRetrySchedule: '0,100ms,200ms',
      webhookTimeoutMs: 2_000,
    },
    createLogger(false, { level: 'debug', destination }),
  );
  oauth = await startOAuthUpstream(`${new URL(server.url).origin}/oauth/upstream/callback`);
  const { runAdminCommand } = await import('../../apps/server/src/admin/commands.ts');
  await runAdminCommand({ database: server.database, webhooks: server.webhooks }, 'webhooks.create', {
    workspace: 'default',
    url: `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`,
    events: '*',
  });
}, 120_000);

afterAll(async () => {
  for (const client of clients) await client.close().catch(() => undefined);
  await server?.close();
  await tracing?.shutdown();
  await dropDatabase?.();
  await mcp?.close();
  await http?.close();
  await oauth?.close();
  await new Promise((resolve) => receiver?.close(resolve));
});

describe('brokered secrets appear nowhere but at their upstream', () => {
  it('are used through the gateway, the REST runtime and the HTTP proxy', async () => {
    expect((await api('POST', '/agents', { body: { name: 'Bot', slug: 'bot', provider: 'local', api_key: AGENT_KEY } })).status).toBe(201);
    expect(
      (
        await api('POST', '/mcp-servers', {
          body: { name: 'Hosted', slug: 'hosted', transport_url: mcp.url, upstream_auth: { type: 'bearer', secret: SECRETS.mcpToken } },
        })
      ).status,
    ).toBe(201);
    expect(
      (
        await api('POST', '/credentials', {
          body: { name: 'billing', hosts: ['127.0.0.1'], auth: { type: 'header', header: 'X-Api-Key', secret: SECRETS.httpKey } },
        })
      ).status,
    ).toBe(201);
    expect(
      (
        await api('POST', '/credentials', {
          body: { name: 'other', hosts: ['api.example.com'], auth: { type: 'bearer', secret: SECRETS.bearer } },
        })
      ).status,
    ).toBe(201);
    // bad input carrying a secret: refused, and the refusal does not echo it
    const refused = await api('POST', '/credentials', {
      body: { name: 'refused', hosts: ['127.0.0.1'], auth: { type: 'header', header: 'Bad Header', secret: SECRETS.badInput } },
    });
    expect(refused.status).toBe(400);
    const refusedNewline = await api('POST', '/credentials', {
      body: { name: 'refused', hosts: ['127.0.0.1'], auth: { type: 'bearer', secret: `${SECRETS.badInput}\n` } },
    });
    expect(refusedNewline.status).toBe(400);

    const client = await connectClient(`${server.url}/mcp/hosted`, { authorization: `Bearer ${AGENT_KEY}` });
    clients.push(client);
    expect(await client.callTool({ name: 'whoami', arguments: { text: 'gateway' } })).toMatchObject({
      content: [{ text: 'reached: gateway' }],
    });
    const agent = { 'x-warden-agent-key': AGENT_KEY };
    const call = await api('POST', '/runtime/mcp/call', {
      headers: agent,
      body: { server: 'hosted', tool: 'whoami', arguments: { text: 'rest' }, input: { agent: 'bot' } },
    });
    expect(call.body.data.allowed).toBe(true);
    const discovered = await api('POST', '/runtime/mcp/discover', { headers: agent, body: { server: 'hosted', input: { agent: 'bot' } } });
    expect(discovered.status).toBe(200);

    // rotation, then use again
    mcp.setToken(SECRETS.mcpRotated);
    expect(
      (await api('PATCH', '/mcp-servers/hosted', { body: { upstream_auth: { type: 'bearer', secret: SECRETS.mcpRotated } } })).status,
    ).toBe(200);
    expect(await client.callTool({ name: 'whoami', arguments: { text: 'rotated' } })).toMatchObject({
      content: [{ text: 'reached: rotated' }],
    });

    const execution = (extra: Record<string, unknown>, url = `${http.origin}/data`) => ({
      input: { action: 'http.get', agent: 'bot' },
      execution: { mode: 'http_proxy', method: 'GET', url, ...extra },
    });
    const proxied = await api('POST', '/runtime/execute', { headers: agent, body: execution({ credential: 'billing' }) });
    expect(proxied.body.data.execution).toMatchObject({ status: 200, body: { ok: true } });
    const port = new URL(http.origin).port;
    const elsewhere = await api('POST', '/runtime/execute', {
      headers: agent,
      body: execution({ credential: 'billing' }, `http://localhost:${port}/data`),
    });
    expect(elsewhere.body.error?.code).toBe('credential_host_not_bound');
    const unbound = await api('POST', '/runtime/execute', { headers: agent, body: execution({ credential: 'other' }) });
    expect(unbound.body.error?.code).toBe('credential_host_not_bound');

    // an OAuth connection, as a hand-registered confidential client: connected, used, refreshed on a 401, disconnected
    const connection = {
      type: 'oauth',
      authorization_server: oauth.issuer,
      client_id: oauth.staticClient.id,
      client_secret: oauth.staticClient.secret,
    };
    expect(
      (await api('POST', '/mcp-servers', { body: { name: 'OAuth', slug: 'oauthed', transport_url: oauth.url, upstream_auth: connection } }))
        .status,
    ).toBe(201);
    const started = await api('POST', '/mcp-servers/oauthed/oauth/connect');
    const back = await consent(started.body.data.authorization_url, new URL(server.url).origin);
    const landed = await fetch(back, { redirect: 'manual' });
    const confirmation = /oauth\/confirm\/([\w-]{43})$/.exec(landed.headers.get('location') ?? '')?.[1];
    const admin = await dashboardLogin(new URL(server.url).origin, key);
    const confirmed = await admin.call('POST', `/mcp-server-oauth/confirmations/${confirmation}`);
    answers.push(JSON.stringify(confirmed));
    expect(confirmed.status).toBe(200);
    const oauthClient = await connectClient(`${server.url}/mcp/oauthed`, { authorization: `Bearer ${AGENT_KEY}` });
    clients.push(oauthClient);
    expect(await oauthClient.callTool({ name: 'whoami', arguments: { text: 'oauth' } })).toMatchObject({
      content: [{ text: 'oauth as alice' }],
    });
    oauth.reject(oauth.authorizations().filter(Boolean).at(-1)?.slice('Bearer '.length) ?? '');
    expect(await oauthClient.callTool({ name: 'whoami', arguments: { text: 'renewed' } })).toMatchObject({
      content: [{ text: 'renewed as alice' }],
    });
    expect((await api('DELETE', '/mcp-servers/oauthed/oauth/connection')).status).toBe(200);

    for (const path of ['/mcp-servers', '/mcp-servers/hosted', '/credentials', '/credentials/billing', '/settings', '/compliance/status'])
      expect((await api('GET', path)).status).toBe(200);
  }, 60_000);

  it('reached the upstreams as sent by Warden (the search below would be vacuous otherwise)', () => {
    expect(mcp.authorizations()).toContain(`Bearer ${SECRETS.mcpToken}`);
    expect(mcp.authorizations()).toContain(`Bearer ${SECRETS.mcpRotated}`);
    expect(http.requests().map((h) => h['x-api-key'])).toContain(SECRETS.httpKey);
    expect(http.requests().every((h) => h.authorization === undefined)).toBe(true);
    // two access tokens (the second after the 401), the code and the refresh token (a confidential client's is not rotated)
    expect(new Set(oauth.authorizations().filter(Boolean)).size).toBeGreaterThanOrEqual(2);
    expect(oauth.issued().length).toBeGreaterThanOrEqual(2);
  });

  it('are in no answer, log line, span, audit event or webhook delivery, and not in the database in plaintext', async () => {
    // every audit event, from the API, and every delivery of them (the outbox fans each out)
    const events: unknown[] = [];
    let cursor: string | null = null;
    for (let page = 0; page < 20; page++) {
      const res: ApiResponse<any> = await api('GET', '/audit-logs', { query: { limit: 100, cursor: cursor ?? undefined } });
      events.push(...res.body.data);
      cursor = res.body.next_cursor;
      if (!cursor) break;
    }
    expect(events.length).toBeGreaterThan(10);
    const deadline = Date.now() + 15_000;
    while (Date.now() < deadline && deliveries.length < events.length) await new Promise((r) => setTimeout(r, 100));
    expect(deliveries.length).toBeGreaterThanOrEqual(events.length);
    await tracing.shutdown(); // flushes the spans still batched
    expect(spans.length).toBeGreaterThan(0);
    expect(log.length).toBeGreaterThan(0);
    const rows = await server.database.db
      .selectFrom('credentials')
      .selectAll()
      .execute()
      .then(async (credentials) => [
        ...credentials,
        ...(await server.database.db.selectFrom('mcp_servers').selectAll().execute()),
        ...(await server.database.db.selectFrom('mcp_server_oauth').selectAll().execute()),
        ...(await server.database.db.selectFrom('mcp_server_oauth_pending').selectAll().execute()),
      ]);

    const places: Record<string, string> = {
      answers: answers.join('\n'),
      log: log.join(''),
      spans: JSON.stringify(spans),
      audit: JSON.stringify(events),
      webhooks: deliveries.join('\n'),
      database: JSON.stringify(rows),
    };
    const oauthSecrets = {
      oauthClientSecret: oauth.staticClient.secret,
      ...Object.fromEntries(oauth.issued().map((token, i) => [`oauthIssued${i}`, token])),
      ...Object.fromEntries(
        [...new Set(oauth.authorizations().filter(Boolean))].map((header, i) => [
          `oauthAccessToken${i}`,
          (header as string).slice('Bearer '.length),
        ]),
      ),
    };
    for (const [name, secret] of Object.entries({ ...SECRETS, ...oauthSecrets }))
      for (const [place, text] of Object.entries(places)) {
        // the whole secret, and its distinctive middle (a secret cut or re-encoded would still carry it)
        expect(text.includes(secret), `${name} found in ${place}`).toBe(false);
        expect(text.includes(secret.slice(4, 20)), `part of ${name} found in ${place}`).toBe(false);
      }
    // and what is shown instead: the hints
    expect(places.answers).toContain(`…${SECRETS.mcpRotated.slice(-4)}`);
    expect(places.audit).toContain('credential_name');
  }, 60_000);
});
