/**
 * Issue 38: a tools/call the MCP gateway holds open for its approval when SIGTERM arrives is
 * answered before the process exits — pending, naming the approval and where to decide it (the
 * dashboard and PATCH /api/v1/approvals/{id}) — not dropped when the shutdown's bound runs out.
 * Warden runs as a child process (the approval wait far longer than the shutdown's bound), an
 * unmodified MCP SDK client calls a tool that policy says needs an approval, and SIGTERM goes to
 * the process group while the call waits.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { type CountingUpstream, connectClient, eventually, startCountingUpstream } from '../mcp-gateway/support.ts';
import { type ChildServer, randomKey, startChildServer } from '../reliability/support/child-server.ts';
import { freshDatabase } from '../support/database.ts';
import { request } from '../support/server.ts';

const key = randomKey('held');
const agentKey = `ak_held_${Math.random().toString(36).slice(2)}_${Date.now()}`;
let server: ChildServer;
let upstream: CountingUpstream;
let client: Client;
let dataDir: string | undefined;
let drop: (() => Promise<void>) | undefined;

beforeAll(async () => {
  upstream = await startCountingUpstream();
  let env: Record<string, string>;
  if (process.env.DATABASE_URL) {
    const db = await freshDatabase(process.env.DATABASE_URL, 'warden_held_approval');
    drop = db.drop;
    env = { DATABASE_URL: db.url };
  } else {
    dataDir = mkdtempSync(join(tmpdir(), 'warden-held-'));
    env = { WARDEN_DATA_DIR: dataDir };
  }
  server = await startChildServer({
    env: {
      ...env,
      WARDEN_BOOTSTRAP_KEY: key,
      WARDEN_EGRESS_ALLOWLIST: '127.0.0.1/32',
      WARDEN_MCP_APPROVAL_WAIT_MS: '120000',
      WARDEN_SHUTDOWN_TIMEOUT_MS: '10000',
      WARDEN_SHUTDOWN_DRAIN_MS: '1000',
    },
  });
  const post = (path: string, body: unknown) => request(server.url, key, 'POST', path, { body });
  expect((await post('/mcp-servers', { name: 'tools', slug: 'tools', transport_url: upstream.url })).status).toBe(201);
  expect((await post('/agents', { name: 'Bot', slug: 'bot', provider: 'local', api_key: agentKey })).status).toBe(201);
  expect(
    (await post('/policies', { name: 'Ask for sums', rules: [{ match: { tool: ['add'] }, effect: 'require_approval' }] })).status,
  ).toBe(201);
  client = await connectClient(`${server.url}/mcp/tools`, { authorization: `Bearer ${agentKey}` });
}, 180_000);

afterAll(async () => {
  await client?.close().catch(() => undefined);
  await server?.stop();
  await upstream?.close();
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  await drop?.();
});

it('answers the held call with the pending approval and where to decide it, then exits 0', async () => {
  let answeredAt = 0;
  const call = client.callTool({ name: 'add', arguments: { a: 2, b: 3 } }, undefined, { timeout: 60_000 }).then((result) => {
    answeredAt = performance.now();
    return result;
  });
  const approval = await eventually(async () => {
    const res = await request(server.url, key, 'GET', '/approvals', { query: { status: 'pending' } });
    return (res.body.data as { id: string }[])[0];
  });
  server.signal('SIGTERM');
  const result = await call;
  const deadline = Date.now() + 15_000;
  while (!server.exitStatus() && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 25));
  const exitedAt = performance.now();

  const text = (result.content as { text?: string }[])[0]?.text ?? '';
  expect(result.isError).toBe(true);
  expect(text).toContain(`Approval ${approval.id} is pending`);
  expect(text).toContain('shutting down');
  expect(text).toContain('/dashboard/#/approvals');
  expect(text).toContain(`PATCH http://127.0.0.1:${server.port}/api/v1/approvals/${approval.id}`);
  expect(result._meta).toMatchObject({ 'dev.agentwarden/approval': { id: approval.id, status: 'pending' } });
  expect(answeredAt).toBeLessThan(exitedAt);
  expect(server.exitStatus()).toEqual({ code: 0, signal: null });
  expect(upstream.calls().filter((c) => c.startsWith('add'))).toEqual([]);
}, 60_000);
