/**
 * Secrets stay where they belong (issue 46, rows 2 and 3), tried as an attacker would:
 * - row 2: with the default `audit_mcp_arguments: redacted`, an MCP call whose arguments carry
 *   secrets under names the old list lacked (`privateKey`, `ssh_key`, `jwt`, `session-id`, …)
 *   and secrets inside innocent values (a connection string, a token in a URL, a JWT, a PEM
 *   block, a Slack token) leaves none of them in the permanent audit log, its webhooks (the
 *   outbox), or an approval, read straight from the database;
 * - row 3: a key with `mcp_servers:write` moves an MCP server to a host it controls, or adds
 *   that host to a credential: the brokered secret never reaches it.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { connectClient } from '../mcp-gateway/support.ts';
import { dashboardLogin, keyFor, useTestServer } from '../support/server.ts';

const server = useTestServer({ egressAllowlist: ['127.0.0.1/32'], mcpApprovalWaitMs: 500 });
const ALL =
  'admin,agents:write,policies:write,mcp_servers:read,mcp_servers:write,audit:read,approvals:read,runtime:execute,runtime:evaluate';

/** An MCP upstream with a tool that takes any arguments, keeping the headers of every request it is sent. */
interface Upstream {
  url: string;
  origin: string;
  headers: IncomingHttpHeaders[];
  close: () => Promise<void>;
}

async function startUpstream(host: string): Promise<Upstream> {
  const headers: IncomingHttpHeaders[] = [];
  const http: Server = createServer(async (req, res) => {
    headers.push(req.headers);
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const text = Buffer.concat(chunks).toString('utf8');
    const mcp = new McpServer({ name: 'keeper', version: '1.0.0' });
    mcp.registerTool('store', { description: 'Stores anything', inputSchema: { label: z.string() } }, async ({ label }) => ({
      content: [{ type: 'text', text: `stored ${label}` }],
    }));
    mcp.registerTool('http_get', { description: 'Fetches anything', inputSchema: { url: z.string() } }, async ({ url }) => ({
      content: [{ type: 'text', text: `fetched ${url}` }],
    }));
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
    res.on('close', () => void transport.close());
    await mcp.connect(transport);
    await transport.handleRequest(req, res, text ? JSON.parse(text) : undefined);
  });
  await new Promise<void>((resolve) => http.listen(0, host, resolve));
  const origin = `http://${host}:${(http.address() as AddressInfo).port}`;
  return {
    url: `${origin}/mcp`,
    origin,
    headers,
    close: async () => {
      http.closeAllConnections();
      await new Promise<void>((resolve) => http.close(() => resolve()));
    },
  };
}

let honest: Upstream;
let attacker: Upstream;
beforeAll(async () => {
  honest = await startUpstream('127.0.0.1');
  attacker = await startUpstream('127.0.0.1');
});
afterAll(async () => {
  await honest?.close();
  await attacker?.close();
});

async function workspace(): Promise<{ key: string; agentKey: string; workspaceId: string }> {
  const key = await keyFor(server, ALL, `w${randomUUID().slice(0, 8)}`);
  const agentKey = `ak_${randomUUID()}`;
  const post = (path: string, body: unknown) => server.api('POST', path as '/agents', { key, body, unchecked: true });
  expect((await post('/agents', { name: 'Bot', slug: 'bot', provider: 'local', api_key: agentKey })).status).toBe(201);
  const created = await post('/mcp-servers', {
    name: 'Keeper',
    slug: 'keeper',
    transport_url: honest.url,
    upstream_auth: { type: 'bearer', secret: 'brokered-secret-7c41d0e9' },
  });
  expect(created.status).toBe(201);
  const row = await sql<{ workspace_id: string }>`select workspace_id from mcp_servers where id = ${created.body.data.id}`.execute(
    server.database.db,
  );
  return { key, agentKey, workspaceId: (row.rows[0] as { workspace_id: string }).workspace_id };
}

/** Everything the workspace's audit log, outbox (webhooks) and approvals hold, as stored. */
async function stored(workspaceId: string): Promise<string> {
  const db = server.database.db;
  const dump = await Promise.all(
    ['audit_events', 'outbox_events', 'approvals'].map((table) =>
      sql`select row_to_json(t)::text as row from ${sql.table(table)} t where workspace_id = ${workspaceId}`.execute(db),
    ),
  );
  return dump.flatMap((result) => result.rows.map((row) => (row as { row: string }).row)).join('\n');
}

describe('secrets in MCP arguments never enter the audit log, its webhooks or an approval (row 2)', { timeout: 60_000 }, () => {
  const SECRETS = {
    privateKey: 'pk-0f3a9c2e71b84d56',
    private_key: 'pk-1e8b7d3c92a04f65',
    ssh_key: 'ssh-ed25519-AAAAC3NzaC1lZDI1NTE5',
    jwt: 'jwt-plain-value-5d2c',
    bearer: 'bearer-value-8a1f',
    key: 'plain-key-3b9e',
    'session-id': 'sess-6c0d4a2f',
    SessionToken: 'sess-tok-77aa',
  };
  const IN_VALUES = {
    target: 'postgres://admin:Sup3rS3cret@db.internal:5432/app',
    callback: 'https://app.example.com/cb?access_token=at-9f8e7d6c5b4a&page=2',
    note: 'call it with eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJib3QiLCJzZWNyZXQiOiJ4In0.c2lnbmF0dXJlLXZhbHVlLWhlcmU and go',
    pem: '-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7\n-----END PRIVATE KEY-----',
    slack: `xoxb-${'123456789012'}-${'1234567890123'}-${'abcdefghijklmnopqrstuvwx'}`,
    form: 'user=bot&password=hunter2-form&x=1',
    header: 'Authorization: Bearer tok-in-a-string-41d2c9',
  };
  const leaks = [
    ...Object.values(SECRETS),
    'Sup3rS3cret',
    'at-9f8e7d6c5b4a',
    'c2lnbmF0dXJlLXZhbHVlLWhlcmU',
    'MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7',
    'abcdefghijklmnopqrstuvwx',
    'hunter2-form',
    'tok-in-a-string-41d2c9',
  ];

  it('an allowed call, and one held for approval: the log, the outbox and the approval keep none of them', async () => {
    const { key, agentKey, workspaceId } = await workspace();
    expect(
      (
        await server.api('POST', '/policies', {
          key,
          body: { name: 'ask', rules: [{ match: { tool: ['http_get'] }, effect: 'require_approval' }] },
        })
      ).status,
    ).toBe(201);
    // an endpoint subscribed to every event, so that audit.created lands in the outbox
    const dashboard = await dashboardLogin(server.origin, key);
    expect((await dashboard.api('POST', '/webhooks', { body: { url: 'http://127.0.0.1:9/hook', events: ['*'] } })).status).toBe(201);
    const client = await connectClient(`${server.url}/mcp/keeper`, { authorization: `Bearer ${agentKey}` });
    try {
      const stored = await client.callTool({ name: 'store', arguments: { label: 'x', ...SECRETS, ...IN_VALUES } });
      expect(stored.isError).not.toBe(true);
      const held = await client.callTool({ name: 'http_get', arguments: { url: IN_VALUES.callback, ...SECRETS } });
      expect(JSON.stringify(held)).toMatch(/approval/i);
    } finally {
      await client.close();
    }
    const everything = await stored(workspaceId);
    expect(everything).toContain('[redacted]');
    for (const secret of leaks) expect(everything, secret).not.toContain(secret);
    // what is not secret is still readable for an auditor
    expect(everything).toContain('db.internal');
    expect(everything).toContain('app.example.com/cb');
  });

  it('the declared context of an evaluation is redacted alike (by name and by value)', async () => {
    const { key, agentKey, workspaceId } = await workspace();
    const res = await server.api('POST', '/policy/evaluate', {
      key,
      headers: { 'x-warden-agent-key': agentKey },
      body: { input: { action: 'db.query', agent: 'bot', resource: IN_VALUES.target, context: { ...SECRETS, ...IN_VALUES } } },
    });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    const everything = await stored(workspaceId);
    for (const secret of leaks) expect(everything, secret).not.toContain(secret);
  });
});

describe('a brokered secret is bound to its destination (row 3)', { timeout: 60_000 }, () => {
  it('moving an MCP server to another origin drops its secret: the new host never receives it, and the change is audited', async () => {
    const { key, agentKey } = await workspace();
    const call = async () => {
      const client = await connectClient(`${server.url}/mcp/keeper`, { authorization: `Bearer ${agentKey}` });
      try {
        return await client.callTool({ name: 'store', arguments: { label: 'after the move' } });
      } finally {
        await client.close();
      }
    };
    await call();
    expect(honest.headers.some((h) => h.authorization === 'Bearer brokered-secret-7c41d0e9')).toBe(true);

    const moved = await server.api('PATCH', '/mcp-servers/keeper' as '/mcp-servers/{id}', {
      key,
      body: { transport_url: attacker.url },
      unchecked: true,
    });
    expect(moved.status).toBe(200);
    expect(moved.body.data.upstream_auth).toBeNull();
    await call();
    expect(attacker.headers.length).toBeGreaterThan(0);
    expect(attacker.headers.map((h) => h.authorization ?? '')).not.toContain('Bearer brokered-secret-7c41d0e9');
    const events = await server.api('GET', '/audit-logs', { key, query: { action: 'mcp_server.updated' }, unchecked: true });
    expect(events.body.data[0]).toMatchObject({ severity: 'medium', context: { upstream_auth_dropped: 'origin_changed' } });

    // given again in the same request, the secret goes to the new origin: the admin chose it
    const both = await server.api('PATCH', '/mcp-servers/keeper' as '/mcp-servers/{id}', {
      key,
      body: { transport_url: honest.url, upstream_auth: { type: 'bearer', secret: 'brokered-secret-rotated-5e' } },
      unchecked: true,
    });
    expect(both.status).toBe(200);
    expect(both.body.data.upstream_auth).toMatchObject({ type: 'bearer' });
    // a new path on the same origin keeps it
    const samePlace = await server.api('PATCH', '/mcp-servers/keeper' as '/mcp-servers/{id}', {
      key,
      body: { transport_url: `${honest.origin}/mcp?v=2` },
      unchecked: true,
    });
    expect(samePlace.body.data.upstream_auth).toMatchObject({ type: 'bearer' });
  });

  it('adding a host to a credential needs its secret again: refused, nothing changed', async () => {
    const { key } = await workspace();
    const created = await server.api('POST', '/credentials', {
      key,
      body: { name: 'api', hosts: ['api.example.com'], auth: { type: 'bearer', secret: 'cred-secret-0a1b2c3d' } },
    });
    expect(created.status).toBe(201);
    const widened = await server.api('PATCH', '/credentials/api' as '/credentials/{id}', {
      key,
      body: { hosts: ['api.example.com', 'attacker.example'] },
      unchecked: true,
    });
    expect(widened.status).toBe(400);
    expect(widened.body.error).toMatchObject({ code: 'invalid_request' });
    expect(widened.body.error.message).toContain('attacker.example');
    expect((await server.api('GET', '/credentials/api' as '/credentials/{id}', { key, unchecked: true })).body.data.hosts).toEqual([
      'api.example.com',
    ]);
    // narrowing needs nothing; widening with the secret given again is the admin's choice
    expect(
      (await server.api('PATCH', '/credentials/api' as '/credentials/{id}', { key, body: { hosts: ['api.example.com'] } })).status,
    ).toBe(200);
    const given = await server.api('PATCH', '/credentials/api' as '/credentials/{id}', {
      key,
      body: { hosts: ['api.example.com', 'other.example'], auth: { type: 'bearer', secret: 'cred-secret-again-4e5f' } },
    });
    expect(given.status).toBe(200);
  });
});
