/**
 * Idempotency-Key on the v1 POSTs, through the API: the first answer (2xx or 4xx) replayed to
 * the same request with `Idempotent-Replayed: true`; another request under the key is 409
 * `idempotency_key_reused`; a request still running is 409 `idempotency_key_in_progress`; 5xx
 * answers are not kept; keys are per workspace and API key, expire after 24 hours and are at
 * most 255 characters.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { AgentCreateWritable, ExecutionRequest } from '@warden/contract';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ApiResponse, keyFor, useTestServer } from '../support/server.ts';

const server = useTestServer({ egressAllowlist: ['127.0.0.1/32'] });

/** A loopback upstream whose /slow answers only once `release()` is called. */
let upstream: Server;
let upstreamOrigin: string;
let releaseSlow: () => void = () => undefined;
let slowArrived: () => void = () => undefined;
let upstreamHits = 0;
beforeAll(async () => {
  upstream = createServer((req, res) => {
    upstreamHits++;
    if (req.url === '/slow') {
      slowArrived();
      releaseSlow = () => res.writeHead(200, { 'content-type': 'text/plain' }).end('slow done');
      return;
    }
    res.writeHead(200, { 'content-type': 'text/plain' }).end('fast');
  });
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
  upstreamOrigin = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`;
});
afterAll(async () => {
  upstream.closeAllConnections();
  await new Promise((resolve) => upstream.close(resolve));
});

let workspaces = 0;
const freshWorkspace = async () => {
  const slug = `idempotency-${++workspaces}`;
  const workspace = await server.admin('workspaces.create', { slug });
  const created = await server.admin('keys.create', { workspace: slug, permissions: '*' });
  return { slug, id: workspace.id as string, key: created.key as string };
};

const withKey = (idempotencyKey: string, headers: Record<string, string> = {}) => ({ 'Idempotency-Key': idempotencyKey, ...headers });
const replayed = (res: ApiResponse) => res.headers.get('idempotent-replayed');

const agentCount = async (key: string) => {
  const res = await server.api('GET', '/agents', { key, query: { limit: 100 } });
  expect(res.status).toBe(200);
  return res.body.data.length;
};

describe('replay of the first answer', () => {
  it('POST /agents twice with one key: 201 once, the same 201 and body (less the key shown once) replayed, one agent', async () => {
    const ws = await freshWorkspace();
    const key = randomUUID();
    const body: AgentCreateWritable = { name: 'Idempotent Bot', provider: 'local' };
    const first = await server.api('POST', '/agents', { key: ws.key, body, headers: withKey(key) });
    expect(first.status).toBe(201);
    expect(replayed(first)).toBeNull();
    const second = await server.api('POST', '/agents', { key: ws.key, body, headers: withKey(key) });
    expect(second.status).toBe(201);
    expect(replayed(second)).toBe('true');
    // the same answer but for the key Warden generated, shown once and kept nowhere
    const { api_key: _shownOnce, ...agent } = first.body.data;
    expect(second.body).toEqual({ data: agent });
    expect(second.headers.get('content-type')).toMatch(/^application\/json/);
    expect(second.headers.get('x-request-id')).not.toBe(first.headers.get('x-request-id'));
    expect(await agentCount(ws.key)).toBe(1);
  });

  it('compares bodies canonically: other key order and spacing replay the first answer', async () => {
    const ws = await freshWorkspace();
    const key = randomUUID();
    const first = await server.api('POST', '/policies', {
      key: ws.key,
      raw: '{"name":"Canonical","enabled":true,"rules":[{"effect":"block","match":{"action":["x.*"]}}]}',
      headers: withKey(key, { 'content-type': 'application/json' }),
    });
    expect(first.status).toBe(201);
    const second = await server.api('POST', '/policies', {
      key: ws.key,
      raw: '{ "rules": [ { "match": { "action": ["x.*"] }, "effect": "block" } ],\n  "enabled": true, "name": "Canonical" }',
      headers: withKey(key, { 'content-type': 'application/json' }),
    });
    expect(second.status).toBe(201);
    expect(replayed(second)).toBe('true');
    expect(second.body).toEqual(first.body);
  });

  it('keeps a 4xx answer: the replay is the same 404 even after the missing policy was created', async () => {
    const ws = await freshWorkspace();
    const key = randomUUID();
    const body = { title: 'Needs a policy', policy: 'Later' };
    const first = await server.api('POST', '/approvals', { key: ws.key, body, headers: withKey(key) });
    expect(first.status).toBe(404);
    expect(first.body.error.code).toBe('not_found');
    expect((await server.api('POST', '/policies', { key: ws.key, body: { name: 'Later' } })).status).toBe(201);
    const second = await server.api('POST', '/approvals', { key: ws.key, body, headers: withKey(key) });
    expect(second.status).toBe(404);
    expect(replayed(second)).toBe('true');
    expect(second.body).toEqual(first.body);
  });

  it('does not keep a 5xx answer: the retry runs again (upstream reached twice, no replay header)', async () => {
    const ws = await freshWorkspace();
    const agent = await server.api('POST', '/agents', { key: ws.key, body: { name: 'Proxy', provider: 'local' } });
    const closed = createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const port = (closed.address() as AddressInfo).port;
    await new Promise((resolve) => closed.close(resolve));
    const key = randomUUID();
    const body: ExecutionRequest = {
      input: { action: 'http.get', agent: agent.body.data.slug },
      execution: { mode: 'http_proxy', method: 'GET', url: `http://127.0.0.1:${port}/down` },
    };
    const first = await server.api('POST', '/runtime/execute', { key: ws.key, body, headers: withKey(key) });
    expect(first.status).toBe(502);
    expect(first.body.error.code).toBe('execution_failed');
    const second = await server.api('POST', '/runtime/execute', { key: ws.key, body, headers: withKey(key) });
    expect(second.status).toBe(502);
    expect(replayed(second)).toBeNull();
    const decisions = await server.api('GET', '/audit-logs', { key: ws.key, query: { limit: 100, action: 'http.get' } });
    expect(decisions.body.data.filter((e) => e.source === 'execution' && e.result === 'allowed').length).toBeGreaterThanOrEqual(2);
  });
});

describe('conflicts', () => {
  it('answers 409 idempotency_key_reused to another body, another path or another agent key under the same key', async () => {
    const ws = await freshWorkspace();
    const key = randomUUID();
    const agent = await server.api('POST', '/agents', {
      key: ws.key,
      body: { name: 'Keyed', provider: 'local', api_key: 'agent-key-one-0123456789abcdef' },
      headers: withKey(key),
    });
    expect(agent.status).toBe(201);

    const otherBody = await server.api('POST', '/agents', {
      key: ws.key,
      body: { name: 'Other', provider: 'local' },
      headers: withKey(key),
    });
    expect(otherBody.status).toBe(409);
    expect(otherBody.body.error.code).toBe('idempotency_key_reused');
    const otherPath = await server.api('POST', '/approvals', { key: ws.key, body: { title: 'x' }, headers: withKey(key) });
    expect(otherPath.status).toBe(409);
    expect(otherPath.body.error.code).toBe('idempotency_key_reused');

    const evalKey = randomUUID();
    const evaluate = (agentKey: string) =>
      server.api('POST', '/policy/evaluate', {
        key: ws.key,
        body: { input: { action: 'read', agent: agent.body.data.slug } },
        headers: withKey(evalKey, { 'X-Warden-Agent-Key': agentKey }),
      });
    expect((await evaluate('agent-key-one-0123456789abcdef')).status).toBe(200);
    const otherAgentKey = await evaluate('agent-key-two-0123456789abcdef');
    expect(otherAgentKey.status).toBe(409);
    expect(otherAgentKey.body.error.code).toBe('idempotency_key_reused');
    expect(await agentCount(ws.key)).toBe(1);
  });

  it('answers 409 idempotency_key_in_progress (with Retry-After) while the first request runs, then replays its answer', async () => {
    const ws = await freshWorkspace();
    const agent = await server.api('POST', '/agents', { key: ws.key, body: { name: 'Slow', provider: 'local' } });
    const key = randomUUID();
    const body: ExecutionRequest = {
      input: { action: 'http.get', agent: agent.body.data.slug },
      execution: { mode: 'http_proxy', method: 'GET', url: `${upstreamOrigin}/slow` },
    };
    const arrived = new Promise<void>((resolve) => {
      slowArrived = resolve;
    });
    const hitsBefore = upstreamHits;
    const first = server.api('POST', '/runtime/execute', { key: ws.key, body, headers: withKey(key) });
    await arrived;

    const during = await server.api('POST', '/runtime/execute', { key: ws.key, body, headers: withKey(key) });
    expect(during.status).toBe(409);
    expect(during.body.error.code).toBe('idempotency_key_in_progress');
    expect(during.headers.get('retry-after')).toBe('1');

    releaseSlow();
    const done = await first;
    expect(done.status).toBe(200);
    const after = await server.api('POST', '/runtime/execute', { key: ws.key, body, headers: withKey(key) });
    expect(after.status).toBe(200);
    expect(replayed(after)).toBe('true');
    expect(after.body).toEqual(done.body);
    expect(upstreamHits - hitsBefore).toBe(1);
  });
});

describe('scope, expiry and limits', () => {
  it('never replays across workspaces or API keys: the same key runs once in each', async () => {
    const a = await freshWorkspace();
    const b = await freshWorkspace();
    const a2 = await keyFor(server, 'agents:write,agents:read', a.slug);
    const key = 'shared-key-1';
    const body: AgentCreateWritable = { name: 'Same Name', provider: 'local' };
    const inA = await server.api('POST', '/agents', { key: a.key, body, headers: withKey(key) });
    const inB = await server.api('POST', '/agents', { key: b.key, body, headers: withKey(key) });
    expect(inA.status).toBe(201);
    expect(inB.status).toBe(201);
    expect(replayed(inB)).toBeNull();
    expect(inB.body.data.id).not.toBe(inA.body.data.id);
    // another key of workspace A: its own request (409 conflict: the slug is taken), not A's answer
    const otherKey = await server.api('POST', '/agents', { key: a2, body, headers: withKey(key) });
    expect(otherKey.status).toBe(409);
    expect(otherKey.body.error.code).toBe('conflict');
    expect(replayed(otherKey)).toBeNull();
    // each workspace still replays its own
    const againB = await server.api('POST', '/agents', { key: b.key, body, headers: withKey(key) });
    expect(replayed(againB)).toBe('true');
    expect(againB.body.data.id).toBe(inB.body.data.id);
  });

  it('forgets a key after its 24 hours: the same request then runs again', async () => {
    const ws = await freshWorkspace();
    const key = randomUUID();
    const body = { title: 'Expiring' };
    const first = await server.api('POST', '/approvals', { key: ws.key, body, headers: withKey(key) });
    expect(first.status).toBe(201);
    const kept = await sql<{ hours: number }>`
      select extract(epoch from expires_at - created_at) / 3600 as hours from idempotency_keys
      where workspace_id = ${ws.id} and idempotency_key = ${key}`.execute(server.database.db);
    expect(Number(kept.rows[0]?.hours)).toBeCloseTo(24, 3);
    await sql`update idempotency_keys set expires_at = now() - interval '1 second' where workspace_id = ${ws.id}`.execute(
      server.database.db,
    );
    const again = await server.api('POST', '/approvals', { key: ws.key, body, headers: withKey(key) });
    expect(again.status).toBe(201);
    expect(replayed(again)).toBeNull();
    expect(again.body.data.id).not.toBe(first.body.data.id);
  });

  it('accepts a key of 255 characters and refuses 256 (400 invalid_request), running nothing', async () => {
    const ws = await freshWorkspace();
    const ok = await server.api('POST', '/approvals', { key: ws.key, body: { title: 'Long key' }, headers: withKey('k'.repeat(255)) });
    expect(ok.status).toBe(201);
    const tooLong = await server.api('POST', '/approvals', { key: ws.key, body: { title: 'Too long' }, headers: withKey('k'.repeat(256)) });
    expect(tooLong.status).toBe(400);
    expect(tooLong.body.error.code).toBe('invalid_request');
    const list = await server.api('GET', '/approvals', { key: ws.key });
    expect(list.body.data.map((a) => a.title)).toEqual(['Long key']);
  });

  it('does not spend a key on a request that fails validation: the corrected request then runs', async () => {
    const ws = await freshWorkspace();
    const key = randomUUID();
    const invalid = await server.api('POST', '/agents', {
      key: ws.key,
      body: { name: 'No provider' },
      headers: withKey(key),
      unchecked: true,
    });
    expect(invalid.status).toBe(400);
    const valid = await server.api('POST', '/agents', {
      key: ws.key,
      body: { name: 'No provider', provider: 'local' },
      headers: withKey(key),
    });
    expect(valid.status).toBe(201);
    expect(replayed(valid)).toBeNull();
  });

  it('ignores the header on other methods, and POSTs without it are never deduplicated', async () => {
    const ws = await freshWorkspace();
    const key = randomUUID();
    const agent = await server.api('POST', '/agents', { key: ws.key, body: { name: 'Patched', provider: 'local' } });
    for (let i = 0; i < 2; i++) {
      const patched = await server.api('PATCH', `/agents/${agent.body.data.id}`, {
        key: ws.key,
        body: { description: `v${i}` },
        headers: withKey(key),
      });
      expect(patched.status).toBe(200);
      expect(replayed(patched)).toBeNull();
      expect(patched.body.data.description).toBe(`v${i}`);
    }
    for (let i = 0; i < 2; i++)
      expect((await server.api('POST', '/approvals', { key: ws.key, body: { title: 'plain' } })).status).toBe(201);
    expect((await server.api('GET', '/approvals', { key: ws.key })).body.data).toHaveLength(2);
  });
});
