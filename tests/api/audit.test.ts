import { readFileSync } from 'node:fs';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ApiResponse, keyFor, startTestServer, type TestServer } from '../support/server.ts';

/** An item of a response body, as parsed from JSON. */
type Item = ApiResponse['body'];

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer();
});
afterAll(async () => {
  await server?.close();
});

const spec = JSON.parse(readFileSync(new URL('../../spec/dist/openapi.json', import.meta.url), 'utf8'));
const PERMISSIONS: string[] = spec.components.schemas.Permission.enum;
const ALL = PERMISSIONS.join(',');
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
const EVENT_FIELDS = [
  'id',
  'sequence',
  'event_timestamp',
  'source',
  'agent',
  'action',
  'resource',
  'tool',
  'environment',
  'user',
  'policy',
  'result',
  'severity',
  'message',
  'approval_id',
  'request_id',
  'context',
  'hash',
];
const SUMMARY_FIELDS = ['id', 'event_timestamp', 'agent', 'action', 'resource', 'result', 'severity'];

let workspaces = 0;
const freshWorkspace = () => keyFor(server, ALL, `audit-${++workspaces}`);
const without = (permission: string) => PERMISSIONS.filter((p) => p !== permission).join(',');

const record = async (key: string, body: Record<string, unknown>, path = '/audit') => {
  const res = await server.api('POST', path, { key, body });
  expect(res.status).toBe(201);
  return res.body.data;
};

async function listAll(key: string, path: string): Promise<Item[]> {
  const items: Item[] = [];
  let cursor: string | null = null;
  for (let page = 0; page < 50; page++) {
    const sep = path.includes('?') ? '&' : '?';
    const res = await server.api('GET', `${path}${sep}limit=100${cursor ? `&cursor=${cursor}` : ''}`, { key });
    expect(res.status).toBe(200);
    items.push(...res.body.data);
    cursor = res.body.next_cursor;
    if (!cursor) break;
  }
  return items;
}

/** Polls GET /audit/verify until every event is sealed (bounded: 10 s). */
async function sealed(key: string): Promise<Item> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const res = await server.api('GET', '/audit/verify', { key });
    expect(res.status).toBe(200);
    if (res.body.data.unsealed === 0 || Date.now() > deadline) return res.body.data;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

describe('POST /audit (createAuditEvent)', () => {
  it.each(['blocked', 'approval_required'])('records a %s event and returns id, event_timestamp, result and severity', async (result) => {
    const key = await freshWorkspace();
    const before = Date.now();
    const res = await server.api('POST', '/audit', {
      key,
      body: {
        agent: 'billing-bot',
        action: 'refund.create',
        resource: 'order/1234',
        severity: 'high',
        result,
        user: 'alice',
        policy: 'Refunds',
      },
    });
    expect(res.status).toBe(201);
    expect(Object.keys(res.body.data).sort()).toEqual(['event_timestamp', 'id', 'result', 'severity']);
    expect(res.body.data).toMatchObject({ result, severity: 'high' });
    expect(res.body.data.id).toMatch(UUID);
    expect(res.body.data.event_timestamp).toMatch(ISO);
    expect(Math.abs(Date.parse(res.body.data.event_timestamp) - before)).toBeLessThan(10_000);

    const [event] = await listAll(key, '/audit-logs');
    expect(event).toMatchObject({
      id: res.body.data.id,
      event_timestamp: res.body.data.event_timestamp,
      source: 'manual',
      agent: 'billing-bot',
      action: 'refund.create',
      resource: 'order/1234',
      user: 'alice',
      policy: 'Refunds',
      result,
      severity: 'high',
    });
  });

  it('stores every field byte for byte: quotes, backslashes, JSON-looking text, emoji, control characters and nested context', async () => {
    const key = await freshWorkspace();
    const tricky = 'a "quoted" \\ back\\slash, {"json": [1]}, tab\t, newline\n, é, 🚀, \u2028, \u001f, $x \'single\'';
    const context = { text: tricky, nested: { list: [1, 'two', null, { deep: true }], empty: {} }, number: 1.5e-7, flag: false };
    const data = await record(key, {
      agent: tricky,
      action: tricky,
      resource: tricky,
      user: tricky,
      policy: tricky,
      result: 'blocked',
      context,
    });
    const [event] = await listAll(key, '/audit-logs');
    expect(event).toMatchObject({ id: data.id, agent: tricky, action: tricky, resource: tricky, user: tricky, policy: tricky, context });
    const verified = await server.api('GET', '/audit/verify', { key });
    expect(verified.body.data.valid).toBe(true);
  });

  it('defaults severity to medium', async () => {
    const key = await freshWorkspace();
    const data = await record(key, { action: 'x', result: 'blocked' });
    expect(data.severity).toBe('medium');
  });

  it('answers 400 policy_evaluation_required for result allowed, recording nothing', async () => {
    const key = await freshWorkspace();
    const res = await server.api('POST', '/audit', { key, body: { agent: 'billing-bot', action: 'refund.create', result: 'allowed' } });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('policy_evaluation_required');
    expect(await listAll(key, '/audit-logs')).toEqual([]);
  });

  it.each([
    ['invalid severity', { action: 'x', result: 'blocked', severity: 'extreme' }],
    ['missing action', { result: 'blocked' }],
    ['empty action', { action: '', result: 'blocked' }],
    ['missing result', { action: 'x' }],
    ['unknown result', { action: 'x', result: 'maybe' }],
    ['unknown field', { action: 'x', result: 'blocked', colour: 'red' }],
  ])('answers 400 invalid_request for %s', async (_label, body) => {
    const res = await server.api('POST', '/audit', { body });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('invalid_request');
  });

  it('answers 403 insufficient_permission for a key with every permission but audit:write', async () => {
    const key = await keyFor(server, without('audit:write'));
    const res = await server.api('POST', '/audit', { key, body: { action: 'x', result: 'blocked' } });
    expect(res.status).toBe(403);
    expect(res.body.error.code).toBe('insufficient_permission');
  });

  it('answers 401 unauthorized without a key', async () => {
    const res = await server.api('POST', '/audit', { key: null, body: { action: 'x', result: 'blocked' } });
    expect(res.status).toBe(401);
    expect(res.body.error.code).toBe('unauthorized');
  });
});

describe('POST /audit-events (createAuditEventAlias)', () => {
  it.each(['blocked', 'approval_required'])('records a %s event like POST /audit', async (result) => {
    const key = await freshWorkspace();
    const data = await record(key, { agent: 'a', action: 'deploy', result, severity: 'critical' }, '/audit-events');
    expect(Object.keys(data).sort()).toEqual(['event_timestamp', 'id', 'result', 'severity']);
    expect(data).toMatchObject({ result, severity: 'critical' });
    expect(data.event_timestamp).toMatch(ISO);
    const [event] = await listAll(key, '/audit-logs');
    expect(event).toMatchObject({ id: data.id, source: 'manual', action: 'deploy', result });
  });

  it('answers 400 policy_evaluation_required for result allowed and 400 invalid_request for a bad severity', async () => {
    const allowed = await server.api('POST', '/audit-events', { body: { action: 'x', result: 'allowed' } });
    expect(allowed.status).toBe(400);
    expect(allowed.body.error.code).toBe('policy_evaluation_required');
    const severity = await server.api('POST', '/audit-events', { body: { action: 'x', result: 'blocked', severity: 'extreme' } });
    expect(severity.status).toBe(400);
    expect(severity.body.error.code).toBe('invalid_request');
  });

  it('answers 403 insufficient_permission for a key without audit:write', async () => {
    const key = await keyFor(server, without('audit:write'));
    const res = await server.api('POST', '/audit-events', { key, body: { action: 'x', result: 'blocked' } });
    expect(res.status).toBe(403);
    expect(res.body.error.code).toBe('insufficient_permission');
  });
});

/** A workspace with six known events, oldest first. */
async function populated() {
  const key = await freshWorkspace();
  const specs = [
    { agent: 'ann', action: 'refund.create', result: 'blocked', severity: 'high' },
    { agent: 'ann', action: 'refund.create', result: 'approval_required', severity: 'medium' },
    { agent: 'bob', action: 'db.delete', result: 'blocked', severity: 'critical' },
    { agent: 'bob', action: 'refund.create', result: 'blocked', severity: 'low' },
    { agent: 'ann', action: 'db.delete', result: 'approval_required', severity: 'high' },
    { agent: 'cy', action: 'mail.send', result: 'blocked', severity: 'info' },
  ];
  const created: Item[] = [];
  for (const body of specs) {
    created.push({ ...body, ...(await record(key, { ...body, resource: `r/${created.length}` })) });
    await new Promise((resolve) => setTimeout(resolve, 5)); // distinct timestamps for the time filters
  }
  return { key, created };
}

/** One populated workspace shared by the read-only list tests below. */
let shared: ReturnType<typeof populated> | undefined;
const populatedOnce = () => (shared ??= populated());

describe('GET /audit-logs (listAuditLogs)', () => {
  it('returns full events with every documented field, newest first', async () => {
    const { key, created } = await populatedOnce();
    const res = await server.api('GET', '/audit-logs', { key });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ has_more: false, next_cursor: null });
    expect(res.body.data.map((e: { id: string }) => e.id)).toEqual(created.map((e) => e.id).reverse());
    for (const event of res.body.data) {
      expect(Object.keys(event).sort()).toEqual([...EVENT_FIELDS].sort());
      expect(event.event_timestamp).toMatch(ISO);
      expect(typeof event.context).toBe('object');
    }
  });

  it('filters by agent, action, result, severity and time range', async () => {
    const { key, created } = await populatedOnce();
    const ids = async (query: string) => (await listAll(key, `/audit-logs?${query}`)).map((e) => e.id).sort();
    const expected = (pick: (e: Item) => boolean) =>
      created
        .filter(pick)
        .map((e) => e.id)
        .sort();
    expect(await ids('agent=ann')).toEqual(expected((e) => e.agent === 'ann'));
    expect(await ids('action=refund.create')).toEqual(expected((e) => e.action === 'refund.create'));
    expect(await ids('result=approval_required')).toEqual(expected((e) => e.result === 'approval_required'));
    expect(await ids('severity=high')).toEqual(expected((e) => e.severity === 'high'));
    expect(await ids('agent=bob&result=blocked&action=db.delete')).toEqual([created[2].id]);
    const from = encodeURIComponent(created[2].event_timestamp);
    const to = encodeURIComponent(created[4].event_timestamp);
    expect(await ids(`from=${from}`)).toEqual(
      created
        .slice(2)
        .map((e) => e.id)
        .sort(),
    );
    expect(await ids(`to=${to}`)).toEqual(
      created
        .slice(0, 4)
        .map((e) => e.id)
        .sort(),
    );
    expect(await ids(`from=${from}&to=${to}`)).toEqual([created[2].id, created[3].id].sort());
    expect(await ids('agent=nobody')).toEqual([]);
  });

  it('pages with limit and cursor without repeats', async () => {
    const { key, created } = await populatedOnce();
    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const res = await server.api('GET', `/audit-logs?limit=4${cursor ? `&cursor=${cursor}` : ''}`, { key });
      expect(res.status).toBe(200);
      expect(res.body.data.length).toBeLessThanOrEqual(4);
      seen.push(...res.body.data.map((e: { id: string }) => e.id));
      cursor = res.body.next_cursor;
      expect(res.body.has_more).toBe(cursor !== null);
      pages++;
    } while (cursor && pages < 10);
    expect(pages).toBe(2);
    expect(seen).toEqual(created.map((e) => e.id).reverse());
  });

  it.each([
    ['unknown result', 'result=maybe'],
    ['unknown severity', 'severity=extreme'],
    ['from not a timestamp', 'from=yesterday'],
    ['limit over 100', 'limit=101'],
    ['forged cursor', 'cursor=bm90LWEtY3Vyc29y'],
    ['unknown parameter', 'colour=red'],
  ])('answers 400 invalid_request for %s', async (_label, query) => {
    const res = await server.api('GET', `/audit-logs?${query}`);
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('invalid_request');
  });

  it('answers 403 insufficient_permission for a key without audit:read, 401 without a key', async () => {
    const key = await keyFor(server, without('audit:read'));
    const res = await server.api('GET', '/audit-logs', { key });
    expect(res.status).toBe(403);
    expect(res.body.error.code).toBe('insufficient_permission');
    expect((await server.api('GET', '/audit-logs', { key: null })).status).toBe(401);
  });
});

describe('GET /events (listEvents)', () => {
  it('lists events with exactly the documented subset of fields', async () => {
    const { key, created } = await populatedOnce();
    const res = await server.api('GET', '/events', { key });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ has_more: false, next_cursor: null });
    expect(res.body.data.map((e: { id: string }) => e.id)).toEqual(created.map((e) => e.id).reverse());
    for (const item of res.body.data) expect(Object.keys(item).sort()).toEqual([...SUMMARY_FIELDS].sort());
    const full = await listAll(key, '/audit-logs');
    expect(res.body.data[0]).toEqual(Object.fromEntries(SUMMARY_FIELDS.map((f) => [f, full[0][f]])));
  });

  it('filters like GET /audit-logs', async () => {
    const { key, created } = await populatedOnce();
    const from = encodeURIComponent(created[1].event_timestamp);
    const to = encodeURIComponent(created[5].event_timestamp);
    for (const query of [
      'agent=ann',
      'action=db.delete',
      'result=blocked',
      'severity=high',
      `from=${from}&to=${to}`,
      'agent=bob&severity=low',
    ]) {
      const events = (await listAll(key, `/events?${query}`)).map((e) => e.id);
      const logs = (await listAll(key, `/audit-logs?${query}`)).map((e) => e.id);
      expect(events, query).toEqual(logs);
      expect(events.length, query).toBeGreaterThan(0);
    }
  });

  it('pages with limit and cursor without repeats', async () => {
    const { key, created } = await populatedOnce();
    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const res = await server.api('GET', `/events?limit=1${cursor ? `&cursor=${cursor}` : ''}`, { key });
      expect(res.status).toBe(200);
      seen.push(...res.body.data.map((e: { id: string }) => e.id));
      cursor = res.body.next_cursor;
      pages++;
    } while (cursor && pages < 20);
    expect(seen).toEqual(created.map((e) => e.id).reverse());
  });

  it('answers 403 insufficient_permission for a key without audit:read', async () => {
    const key = await keyFor(server, without('audit:read'));
    const res = await server.api('GET', '/events', { key });
    expect(res.status).toBe(403);
    expect(res.body.error.code).toBe('insufficient_permission');
  });
});

describe('audit events are immutable (database)', () => {
  it('refuses UPDATE, DELETE and TRUNCATE of audit events', async () => {
    const key = await freshWorkspace();
    const { id } = await record(key, { agent: 'ann', action: 'keep.me', result: 'blocked' });
    const db = server.database.db;
    await expect(sql`UPDATE audit_events SET action = 'changed' WHERE id = ${id}`.execute(db)).rejects.toThrow();
    await expect(sql`UPDATE audit_events SET result = 'allowed'`.execute(db)).rejects.toThrow();
    await expect(sql`DELETE FROM audit_events WHERE id = ${id}`.execute(db)).rejects.toThrow();
    await expect(sql`DELETE FROM audit_events`.execute(db)).rejects.toThrow();
    await expect(sql`TRUNCATE audit_events`.execute(db)).rejects.toThrow();
    const [event] = await listAll(key, '/audit-logs');
    expect(event).toMatchObject({ id, action: 'keep.me', result: 'blocked' });
  });
});

describe('GET /audit/verify (verifyAuditChain)', () => {
  it('reports an empty chain as valid', async () => {
    const key = await freshWorkspace();
    const res = await server.api('GET', '/audit/verify', { key });
    expect(res.status).toBe(200);
    expect(res.body.data).toMatchObject({ valid: true, checked: 0, unsealed: 0, first_invalid_sequence: null });
    expect(res.body.data.verified_at).toMatch(ISO);
  });

  it('seals every event into the chain and verifies it', async () => {
    const key = await freshWorkspace();
    await server.api('POST', '/agents', { key, body: { name: 'Chained', slug: 'chained', provider: 'local' } });
    for (const action of ['a.one', 'a.two'])
      expect((await server.api('POST', '/policy/evaluate', { key, body: { input: { action, agent: 'chained' } } })).status).toBe(200);
    for (const action of ['m.one', 'm.two', 'm.three']) await record(key, { action, result: 'blocked' });

    // A burst of concurrent writes is chained as well, each event exactly once.
    await Promise.all(Array.from({ length: 20 }, (_, i) => record(key, { action: `burst.${i}`, result: 'approval_required' })));

    const verification = await sealed(key);
    expect(verification).toMatchObject({ valid: true, checked: 25, unsealed: 0, first_invalid_sequence: null });
    const events = await listAll(key, '/audit-logs');
    expect(events.map((e) => e.sequence).sort((a, b) => a - b)).toEqual(Array.from({ length: 25 }, (_, i) => i + 1));
    for (const event of events) expect(event.hash).toMatch(/^[0-9a-f]{64}$/);
  });

  it('seals and verifies events whose context is nested as deep as the API accepts', async () => {
    const key = await freshWorkspace();
    /** `levels` objects and arrays, alternating, the outermost an object. */
    const nested = (levels: number) => {
      let value: unknown = ['leaf', 1, null];
      for (let i = 1; i < levels; i++) value = (levels - i) % 2 ? { [`k${i}`]: value, n: i } : [value, i];
      return value as Record<string, unknown>;
    };
    // The body is level 0 and JSON may be nested 32 levels: POST /audit's `context` (level 1)
    // may hold 31 levels, POST /policy/evaluate's `input.context` (level 2) 30.
    await record(key, { action: 'deep.audit', result: 'blocked', context: nested(31) });
    expect((await server.api('POST', '/audit', { key, body: { action: 'x', result: 'blocked', context: nested(32) } })).status).toBe(400);
    await server.api('POST', '/agents', { key, body: { name: 'Deep', slug: 'deep', provider: 'local' } });
    const evaluated = await server.api('POST', '/policy/evaluate', {
      key,
      body: { input: { action: 'deep.eval', agent: 'deep', context: nested(30) } },
    });
    expect(evaluated.status).toBe(200);

    expect(await sealed(key)).toMatchObject({ valid: true, checked: 2, unsealed: 0, first_invalid_sequence: null });
    expect((await listAll(key, '/audit-logs')).map((e) => e.action).sort()).toEqual(['deep.audit', 'deep.eval']);
  });

  it('reports the first tampered event by its sequence', async () => {
    const key = await freshWorkspace();
    const bystander = await freshWorkspace();
    for (const action of ['t.one', 't.two', 't.three', 't.four']) await record(key, { action, result: 'blocked' });
    await record(bystander, { action: 'b.one', result: 'blocked' });
    expect(await sealed(key)).toMatchObject({ valid: true, checked: 4, unsealed: 0 });
    expect(await sealed(bystander)).toMatchObject({ valid: true, checked: 1 });

    const events = await listAll(key, '/audit-logs');
    const victim = events.find((e) => e.sequence === 2);
    expect(victim).toBeDefined();
    await server.database.db.transaction().execute(async (trx) => {
      await sql`SET LOCAL session_replication_role = replica`.execute(trx);
      await sql`UPDATE audit_events SET action = 'tampered' WHERE id = ${victim.id}`.execute(trx);
    });
    expect((await listAll(key, '/audit-logs?action=tampered')).map((e) => e.id)).toEqual([victim.id]);

    const res = await server.api('GET', '/audit/verify', { key });
    expect(res.status).toBe(200);
    expect(res.body.data).toMatchObject({ valid: false, first_invalid_sequence: 2 });
    expect((await server.api('GET', '/audit/verify', { key: bystander })).body.data).toMatchObject({
      valid: true,
      first_invalid_sequence: null,
    });
  });

  it('reports an event whose timestamp was moved, or that was deleted, by its sequence', async () => {
    const key = await freshWorkspace();
    for (const action of ['m.one', 'm.two', 'm.three', 'm.four']) await record(key, { action, result: 'blocked' });
    expect(await sealed(key)).toMatchObject({ valid: true, checked: 4, unsealed: 0 });
    const events = await listAll(key, '/audit-logs');
    const moved = events.find((e) => e.sequence === 3);
    const deleted = events.find((e) => e.sequence === 4);
    await server.database.db.transaction().execute(async (trx) => {
      await sql`SET LOCAL session_replication_role = replica`.execute(trx);
      await sql`UPDATE audit_events SET event_timestamp = event_timestamp - interval '1 hour' WHERE id = ${moved.id}`.execute(trx);
      await sql`DELETE FROM audit_events WHERE id = ${deleted.id}`.execute(trx);
    });
    const res = await server.api('GET', '/audit/verify', { key });
    expect(res.status).toBe(200);
    expect(res.body.data).toMatchObject({ valid: false, checked: 4, first_invalid_sequence: 3 });
  });

  it('answers 403 insufficient_permission for a key without audit:read, 401 without a key', async () => {
    const key = await keyFor(server, without('audit:read'));
    const res = await server.api('GET', '/audit/verify', { key });
    expect(res.status).toBe(403);
    expect(res.body.error.code).toBe('insufficient_permission');
    expect((await server.api('GET', '/audit/verify', { key: null })).status).toBe(401);
  });
});

describe('audit tenant isolation', () => {
  it("never lists another workspace's events", async () => {
    const owner = await freshWorkspace();
    const { id } = await record(owner, { agent: 'secret-agent', action: 'secret.action', result: 'blocked' });
    const intruder = await freshWorkspace();
    await record(intruder, { action: 'own.action', result: 'blocked' });
    for (const path of ['/audit-logs', '/events', '/audit-logs?agent=secret-agent', '/events?action=secret.action']) {
      const items = await listAll(intruder, path);
      expect(
        items.find((e) => e.id === id),
        path,
      ).toBeUndefined();
    }
    expect((await listAll(intruder, '/audit-logs')).map((e) => e.action)).toEqual(['own.action']);
    expect((await server.api('GET', '/audit/verify', { key: intruder })).body.data.checked).toBeLessThanOrEqual(1);
  });
});

// Last in the file on purpose: should the database let it through, the partition's events
// (of every workspace of this server) are gone, and no later test could rely on them.
describe('audit events are immutable in every partition (database)', () => {
  it('refuses DELETE and TRUNCATE of the partition holding an event', async () => {
    const key = await freshWorkspace();
    const { id } = await record(key, { action: 'partitioned', result: 'blocked' });
    const db = server.database.db;
    const { rows } = await sql<{ part: string }>`SELECT tableoid::regclass::text AS part FROM audit_events WHERE id = ${id}`.execute(db);
    const partition = rows[0]?.part as string;
    expect(partition).toBeTruthy();
    await expect(sql`DELETE FROM ${sql.table(partition)} WHERE id = ${id}`.execute(db)).rejects.toThrow();
    await expect(sql`TRUNCATE ${sql.table(partition)}`.execute(db)).rejects.toThrow();
    expect((await listAll(key, '/audit-logs')).map((e) => e.id)).toEqual([id]);
  });
});
