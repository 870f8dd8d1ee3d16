/**
 * Agent keys identify their agent, whichever workspace registered it (issue 35, attack 8).
 *
 * - A caller-chosen `api_key` is unique across workspaces: a second registration of the same
 *   key is 409 `agent_key_in_use`, saying nothing of where the key lives, and the first
 *   registrant keeps its gateway bearer (before: 401 until the second deleted its agent).
 * - `POST /agents` without `api_key` answers a key Warden generated (`wak_<public id>_<secret>`)
 *   once; it works as the gateway's bearer and in X-Warden-Agent-Key, and appears nowhere else:
 *   not in GET, list, PATCH or an idempotent replay, nor in any table (audit, outbox, idempotency).
 * - Migration 0023 copes with duplicate keys already stored: the first registration keeps the
 *   key; later ones are left with a key nothing matches (their agent must be given a new one).
 */
import { cpSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openDatabase } from '../../apps/server/src/db/database.ts';
import { migrate } from '../../apps/server/src/db/migrate.ts';
import { hashSecret } from '../../apps/server/src/shared/crypto.ts';
import { type CountingUpstream, startCountingUpstream } from '../mcp-gateway/support.ts';
import { freshDatabase } from '../support/database.ts';
import { keyFor, useTestServer } from '../support/server.ts';

const server = useTestServer({ egressAllowlist: ['127.0.0.1/32'] });
const GENERATED = /^wak_([0-9a-f]{16})_[A-Za-z0-9_-]{43}$/;
let upstream: CountingUpstream;
let workspaces = 0;

beforeAll(async () => {
  upstream = await startCountingUpstream();
});
afterAll(async () => {
  await upstream?.close();
});

/** A new workspace with a key holding every permission and the upstream registered as `tools`. */
async function workspace() {
  const slug = `agent-keys-${++workspaces}`;
  const key = await keyFor(server, '*', slug);
  const api = (method: 'GET' | 'POST' | 'PATCH', path: string, body?: unknown, headers?: Record<string, string>) =>
    server.api(method as 'POST', path as '/agents', { key, body, headers, unchecked: true });
  expect((await api('POST', '/mcp-servers', { name: 'tools', slug: 'tools', transport_url: upstream.url })).status).toBe(201);
  return { slug, key, api };
}

/** A raw MCP tools/call on the gateway, with `bearer` and any other headers. */
async function callEcho(bearer: string, text: string, headers: Record<string, string> = {}) {
  const res = await fetch(`${server.url}/mcp/tools`, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${bearer}`,
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      'mcp-protocol-version': '2025-06-18',
      ...headers,
    },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'echo', arguments: { text } } }),
  });
  return { status: res.status, body: (await res.json()) as { result?: { content: unknown }; error?: { message: string } } };
}

const echoed = (text: string) => [{ type: 'text', text }];

describe('a caller-chosen agent key registered by two workspaces (attack 8)', () => {
  it('refuses the second registration with 409 agent_key_in_use and keeps the first registrant’s bearer working', async () => {
    const first = await workspace();
    const second = await workspace();
    const shared = `ak_shared_${Math.random().toString(36).slice(2)}_0123456789`;
    const owner = await first.api('POST', '/agents', { name: 'Owner bot', slug: 'owner-bot', provider: 'local', api_key: shared });
    expect(owner.status).toBe(201);
    expect((await callEcho(shared, 'before')).body.result?.content).toEqual(echoed('before'));

    const copy = await second.api('POST', '/agents', { name: 'Copy bot', slug: 'copy-bot', provider: 'local', api_key: shared });
    expect(copy.status).toBe(409);
    expect(copy.body.error.code).toBe('agent_key_in_use');
    // nothing says where the key lives
    for (const hint of [first.slug, 'owner-bot', 'Owner bot', owner.body.data.id]) expect(copy.body.error.message).not.toContain(hint);

    const after = await callEcho(shared, 'after');
    expect(after.status).toBe(200);
    expect(after.body.result?.content).toEqual(echoed('after'));
    expect(upstream.calls()).toContain('echo:{"text":"after"}');
  });

  it('refuses the key given by PATCH, in another workspace or to another agent of the same one, and leaves both agents as they were', async () => {
    const first = await workspace();
    const second = await workspace();
    const shared = `ak_patched_${Math.random().toString(36).slice(2)}_0123456789`;
    expect((await first.api('POST', '/agents', { name: 'Keeper', provider: 'local', api_key: shared })).status).toBe(201);
    const other = await second.api('POST', '/agents', { name: 'Other', provider: 'local', api_key: `${shared}_other` });
    const sibling = await first.api('POST', '/agents', { name: 'Sibling', provider: 'local' });
    for (const [ws, agent] of [
      [second, other],
      [first, sibling],
    ] as const) {
      const patched = await ws.api('PATCH', `/agents/${agent.body.data.id}`, { api_key: shared, status: 'suspended' });
      expect(patched.status).toBe(409);
      expect(patched.body.error.code).toBe('agent_key_in_use');
      expect((await ws.api('GET', `/agents/${agent.body.data.id}`)).body.data.status).toBe('active');
    }
    expect((await callEcho(shared, 'kept')).status).toBe(200);
    expect((await callEcho(`${shared}_other`, 'other')).status).toBe(200);
    // an agent may be given its own key again
    expect((await first.api('PATCH', `/agents/keeper`, { api_key: shared })).status).toBe(200);
    // a key is free again once its agent gives it up
    expect((await first.api('PATCH', `/agents/keeper`, { api_key: null })).status).toBe(200);
    expect((await second.api('POST', '/agents', { name: 'Heir', provider: 'local', api_key: shared })).status).toBe(201);
    expect((await callEcho(shared, 'heir')).status).toBe(200);
  });
});

describe('an agent key generated by Warden', () => {
  it('is answered once by POST /agents, with a public prefix, and never again (GET, list, PATCH, replay)', async () => {
    const ws = await workspace();
    const created = await ws.api('POST', '/agents', { name: 'Generated', provider: 'local' }, { 'idempotency-key': 'gen-1' });
    expect(created.status).toBe(201);
    const key: string = created.body.data.api_key;
    const publicId = GENERATED.exec(key)?.[1];
    expect(publicId).toBeDefined();
    expect(created.body.data).toMatchObject({ has_api_key: true, api_key_hint: `wak_${publicId}_…` });
    const secret = key.slice(`wak_${publicId}_`.length);

    const answers = [
      await ws.api('GET', `/agents/${created.body.data.id}`),
      await ws.api('GET', '/agents'),
      await ws.api('PATCH', `/agents/${created.body.data.id}`, { description: 'changed' }),
      await ws.api('POST', '/agents', { name: 'Generated', provider: 'local' }, { 'idempotency-key': 'gen-1' }),
    ];
    for (const answer of answers) {
      expect(answer.status).toBeLessThan(300);
      expect(JSON.stringify(answer.body)).not.toContain(secret);
      expect(JSON.stringify(answer.body)).toContain(`wak_${publicId}_…`);
    }
    expect(answers[3]?.headers.get('idempotent-replayed')).toBe('true');
    expect(answers[3]?.body.data).not.toHaveProperty('api_key');

    // two agents get two different keys
    const another = await ws.api('POST', '/agents', { name: 'Another', provider: 'local' });
    expect(another.body.data.api_key).toMatch(GENERATED);
    expect(another.body.data.api_key).not.toBe(key);
  });

  it('works as the gateway’s bearer and in X-Warden-Agent-Key, and only for its own agent and workspace', async () => {
    const ws = await workspace();
    const elsewhere = await workspace();
    const created = await ws.api('POST', '/agents', { name: 'Gen bot', slug: 'gen-bot', provider: 'local' });
    const key: string = created.body.data.api_key;

    const asBearer = await callEcho(key, 'bearer');
    expect(asBearer.status).toBe(200);
    expect(asBearer.body.result?.content).toEqual(echoed('bearer'));
    const asHeader = await callEcho(ws.key, 'header', { 'x-warden-agent-key': key });
    expect(asHeader.body.result?.content).toEqual(echoed('header'));
    const evaluated = await ws.api('POST', '/policy/evaluate', { input: { action: 'files.read' } }, { 'x-warden-agent-key': key });
    expect(evaluated.status).toBe(200);
    expect(evaluated.body.data.allowed).toBe(true);
    const named = await ws.api(
      'POST',
      '/policy/evaluate',
      { input: { action: 'files.read', agent: 'gen-bot' } },
      { 'x-warden-agent-key': key },
    );
    expect(named.status).toBe(200);

    // another workspace's key with it: no agent of that workspace
    const foreign = await elsewhere.api('POST', '/policy/evaluate', { input: { action: 'files.read' } }, { 'x-warden-agent-key': key });
    expect(foreign.status).toBe(401);
    expect(foreign.body.error.code).toBe('invalid_agent_key');
    expect((await callEcho(elsewhere.key, 'foreign', { 'x-warden-agent-key': key })).status).toBe(401);

    // the public id with another secret, a truncated key, another case: nobody's
    const publicPart = key.slice(0, 'wak_'.length + 17);
    const secret = key.slice(publicPart.length);
    const forged = [
      `${publicPart}${secret.slice(0, -1)}${secret.endsWith('A') ? 'B' : 'A'}`,
      key.slice(0, -1),
      `${key}A`,
      key.toUpperCase(),
      publicPart,
    ];
    for (const bearer of forged) expect((await callEcho(bearer, 'forged')).status).toBe(401);
    // a suspended agent's generated key is refused as any key is
    expect((await ws.api('PATCH', '/agents/gen-bot', { status: 'suspended' })).status).toBe(200);
    expect((await callEcho(key, 'suspended')).status).toBe(403);
  });

  it('is not demanded when the agent is named (the reference’s flow), unlike a caller-chosen key', async () => {
    const ws = await workspace();
    expect((await ws.api('POST', '/agents', { name: 'Plain', slug: 'plain', provider: 'local' })).status).toBe(201);
    const plain = await ws.api('POST', '/policy/evaluate', { input: { action: 'files.read', agent: 'plain' } });
    expect(plain.status).toBe(200);
    const chosen = `ak_chosen_${Math.random().toString(36).slice(2)}_0123456789`;
    expect((await ws.api('POST', '/agents', { name: 'Chosen', slug: 'chosen', provider: 'local', api_key: chosen })).status).toBe(201);
    const unkeyed = await ws.api('POST', '/policy/evaluate', { input: { action: 'files.read', agent: 'chosen' } });
    expect(unkeyed.status).toBe(401);
    expect(unkeyed.body.error.code).toBe('agent_key_required');
  });

  it('is replaced by a caller-chosen key given by PATCH, and removed by null', async () => {
    const ws = await workspace();
    const created = await ws.api('POST', '/agents', { name: 'Rotating', slug: 'rotating', provider: 'local' });
    const generated: string = created.body.data.api_key;
    const chosen = `ak_rotating_${Math.random().toString(36).slice(2)}_0123456789`;
    const patched = await ws.api('PATCH', '/agents/rotating', { api_key: chosen });
    expect(patched.body.data).toMatchObject({ has_api_key: true, api_key_hint: null });
    expect((await callEcho(generated, 'old')).status).toBe(401);
    expect((await callEcho(chosen, 'new')).status).toBe(200);
    const removed = await ws.api('PATCH', '/agents/rotating', { api_key: null });
    expect(removed.body.data).toMatchObject({ has_api_key: false, api_key_hint: null });
    expect((await callEcho(chosen, 'gone')).status).toBe(401);
  });

  it('is in no table of the database, nor in any audit event', async () => {
    const ws = await workspace();
    const created = await ws.api('POST', '/agents', { name: 'Secretive', provider: 'local' }, { 'idempotency-key': 'secretive' });
    const key: string = created.body.data.api_key;
    const secret = key.slice('wak_'.length + 17);
    await callEcho(key, 'recorded');
    await ws.api('POST', '/policy/evaluate', { input: { action: 'files.read' } }, { 'x-warden-agent-key': key });
    const audit = await ws.api('GET', '/audit-logs', undefined);
    expect(audit.status).toBe(200);
    expect(audit.body.data.some((event: { action: string }) => event.action === 'agent.created')).toBe(true);
    expect(JSON.stringify(audit.body)).not.toContain(secret);

    const db = server.database.db;
    const tables = await sql<{ table_name: string }>`
      SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE'`.execute(db);
    for (const { table_name } of tables.rows) {
      const rows = await sql<{ row: unknown }>`SELECT row_to_json(t)::text AS row FROM ${sql.table(table_name)} t`.execute(db);
      const dump = rows.rows.map((r) => r.row).join('\n');
      expect(dump, table_name).not.toContain(secret);
    }
  });
});

describe('migration 0023 on a database holding one key in several agents', () => {
  it('keeps the key on its first registration and leaves the later ones with a key nothing matches', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'warden-migrations-'));
    const all = new URL('../../apps/server/src/db/migrations/', import.meta.url);
    for (const file of readdirSync(all).filter((name) => name < '0023')) cpSync(new URL(file, all), join(dir, file));
    const fresh = process.env.DATABASE_URL ? await freshDatabase(process.env.DATABASE_URL) : undefined;
    const database = await openDatabase({ dataDir: 'memory://', databaseUrl: fresh?.url });
    try {
      await migrate(database, pathToFileURL(`${dir}/`));
      const db = database.db;
      const shared = hashSecret('a-key-registered-three-times');
      const own = hashSecret('a-key-registered-once');
      const ids = {
        a: '00000000-0000-4000-8000-00000000000a',
        b: '00000000-0000-4000-8000-00000000000b',
        first: '00000000-0000-4000-8000-000000000001',
        second: '00000000-0000-4000-8000-000000000002',
        third: '00000000-0000-4000-8000-000000000003',
        alone: '00000000-0000-4000-8000-000000000004',
      };
      await sql`INSERT INTO workspaces (id, name, slug) VALUES (${ids.a}, 'A', 'a'), (${ids.b}, 'B', 'b')`.execute(db);
      const agent = (workspace: string, id: string, slug: string, hash: string, at: string) =>
        sql`INSERT INTO agents (workspace_id, id, slug, name, provider, status, environment, api_key_hash, created_at)
            VALUES (${workspace}, ${id}, ${slug}, ${slug}, 'local', 'active', 'development', ${hash}, ${at}::timestamptz)`.execute(db);
      await agent(ids.b, ids.second, 'second', shared, '2026-01-02T00:00:00Z');
      await agent(ids.a, ids.first, 'first', shared, '2026-01-01T00:00:00Z');
      await agent(ids.a, ids.third, 'third', shared, '2026-01-03T00:00:00Z');
      await agent(ids.b, ids.alone, 'alone', own, '2026-01-01T00:00:00Z');

      expect(await migrate(database)).toContain('0023_agent_keys');
      const rows = await sql<{ id: string; api_key_hash: string | null }>`SELECT id, api_key_hash FROM agents ORDER BY id`.execute(db);
      const hashes = Object.fromEntries(rows.rows.map((row) => [row.id, row.api_key_hash]));
      expect(hashes[ids.first]).toBe(shared);
      expect(hashes[ids.alone]).toBe(own);
      for (const later of [ids.second, ids.third]) {
        expect(hashes[later]).not.toBeNull();
        expect(hashes[later]).not.toBe(shared);
        expect(hashes[later]).not.toMatch(/^[0-9a-f]{64}$/);
      }
      // and the unique index now holds
      await expect(agent(ids.b, '00000000-0000-4000-8000-000000000005', 'fifth', own, '2026-01-05T00:00:00Z')).rejects.toThrow();
    } finally {
      await database.close();
      await fresh?.drop();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
