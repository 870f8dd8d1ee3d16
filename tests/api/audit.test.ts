import { readFileSync } from 'node:fs';
import type { AuditEvent, AuditEventCreate, AuditEventCreated, AuditEventSummary, AuditResult } from '@warden/contract';
import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { keyFor, useTestServer } from '../support/server.ts';

/** An event as recorded by POST /audit: the body sent and what the answer added. */
type Recorded = AuditEventCreate & AuditEventCreated['data'];

const server = useTestServer();

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

const record = async (key: string, body: AuditEventCreate, path: '/audit' | '/audit-events' = '/audit') => {
  const res = await server.api('POST', path, { key, body });
  expect(res.status).toBe(201);
  return res.body.data;
};

type ListPath = '/audit-logs' | `/audit-logs?${string}` | '/events' | `/events?${string}`;

/**
 * Every page of GET /audit-logs (or GET /events), with the filters in `path`'s query string,
 * but the workspace's configuration events (its key's creation, the agents created here): the
 * tests here are about decisions and manual records.
 */
async function listAll(key: string, path: '/audit-logs' | `/audit-logs?${string}`): Promise<AuditEvent[]>;
async function listAll(key: string, path: '/events' | `/events?${string}`): Promise<AuditEventSummary[]>;
async function listAll(key: string, path: ListPath): Promise<(AuditEvent | AuditEventSummary)[]>;
async function listAll(key: string, path: ListPath) {
  const items: (AuditEvent | AuditEventSummary)[] = [];
  let cursor: string | null = null;
  for (let page = 0; page < 50; page++) {
    const res = await server.api('GET', path, { key, query: { limit: 100, cursor: cursor ?? undefined } });
    expect(res.status).toBe(200);
    items.push(...res.body.data);
    cursor = res.body.next_cursor as string | null;
    if (!cursor) break;
  }
  const configuration = new Set(await configurationEventIds(key));
  return items.filter((item) => !configuration.has(item.id));
}

/** The workspace's configuration events, newest first (a fresh workspace has one: its key's creation). */
async function configurationEvents(key: string): Promise<AuditEvent[]> {
  const res = await server.api('GET', '/audit-logs', { key, query: { limit: 100 } });
  expect(res.status).toBe(200);
  return res.body.data.filter((event) => event.source === 'configuration');
}
const configurationEventIds = async (key: string) => (await configurationEvents(key)).map((event) => event.id);

/**
 * Waits until every event is sealed (bounded: 10 s), then verifies once, so that one
 * verification covers them all (a fresh workspace's first event, its key's creation, is sealed
 * apart from the rest; a verification in between would leave the later re-check a part only).
 */
async function sealed(key: string) {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const res = await server.api('GET', '/audit-logs', { key, query: { limit: 100 } });
    expect(res.status).toBe(200);
    if (res.body.data.every((event) => event.sequence !== null) || Date.now() > deadline) break;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  const res = await server.api('GET', '/audit/verify', { key });
  expect(res.status).toBe(200);
  return res.body.data;
}

describe('POST /audit (createAuditEvent)', () => {
  it.each<AuditResult>(['blocked', 'approval_required'])(
    'records a %s event and returns id, event_timestamp, result and severity',
    async (result) => {
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
    },
  );

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
    const res = await server.api('POST', '/audit', { body, unchecked: true });
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
  it.each<AuditResult>(['blocked', 'approval_required'])('records a %s event like POST /audit', async (result) => {
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
    const severity = await server.api('POST', '/audit-events', {
      body: { action: 'x', result: 'blocked', severity: 'extreme' },
      unchecked: true,
    });
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
  const specs: AuditEventCreate[] = [
    { agent: 'ann', action: 'refund.create', result: 'blocked', severity: 'high' },
    { agent: 'ann', action: 'refund.create', result: 'approval_required', severity: 'medium' },
    { agent: 'bob', action: 'db.delete', result: 'blocked', severity: 'critical' },
    { agent: 'bob', action: 'refund.create', result: 'blocked', severity: 'low' },
    { agent: 'ann', action: 'db.delete', result: 'approval_required', severity: 'high' },
    { agent: 'cy', action: 'mail.send', result: 'blocked', severity: 'info' },
  ];
  const created: Recorded[] = [];
  for (const body of specs) {
    created.push({ ...body, ...(await record(key, { ...body, resource: `r/${created.length}` })) });
    await new Promise((resolve) => setTimeout(resolve, 5)); // distinct timestamps for the time filters
  }
  // the workspace's oldest event: its key's creation (a configuration event)
  return { key, created, setup: await configurationEventIds(key) };
}

/** One populated workspace shared by the read-only list tests below. */
let shared: ReturnType<typeof populated> | undefined;
const populatedOnce = () => (shared ??= populated());

describe('GET /audit-logs (listAuditLogs)', () => {
  it('returns full events with every documented field, newest first', async () => {
    const { key, created, setup } = await populatedOnce();
    const res = await server.api('GET', '/audit-logs', { key });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ has_more: false, next_cursor: null });
    expect(res.body.data.map((e: { id: string }) => e.id)).toEqual([...created.map((e) => e.id).reverse(), ...setup]);
    for (const event of res.body.data) {
      expect(Object.keys(event).sort()).toEqual([...EVENT_FIELDS].sort());
      expect(event.event_timestamp).toMatch(ISO);
      expect(typeof event.context).toBe('object');
    }
  });

  it('filters by agent, action, result, severity and time range', async () => {
    const { key, created } = await populatedOnce();
    const ids = async (query: string) => (await listAll(key, `/audit-logs?${query}`)).map((e) => e.id).sort();
    const expected = (pick: (e: Recorded) => boolean) =>
      created
        .filter(pick)
        .map((e) => e.id)
        .sort();
    expect(await ids('agent=ann')).toEqual(expected((e) => e.agent === 'ann'));
    expect(await ids('action=refund.create')).toEqual(expected((e) => e.action === 'refund.create'));
    expect(await ids('result=approval_required')).toEqual(expected((e) => e.result === 'approval_required'));
    expect(await ids('severity=high')).toEqual(expected((e) => e.severity === 'high'));
    expect(await ids('agent=bob&result=blocked&action=db.delete')).toEqual([created[2]!.id]);
    const from = encodeURIComponent(created[2]!.event_timestamp);
    const to = encodeURIComponent(created[4]!.event_timestamp);
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
    expect(await ids(`from=${from}&to=${to}`)).toEqual([created[2]!.id, created[3]!.id].sort());
    expect(await ids('agent=nobody')).toEqual([]);
  });

  it('pages with limit and cursor without repeats', async () => {
    const { key, created, setup } = await populatedOnce();
    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const res = await server.api('GET', `/audit-logs?limit=4${cursor ? `&cursor=${cursor}` : ''}`, { key });
      expect(res.status).toBe(200);
      expect(res.body.data.length).toBeLessThanOrEqual(4);
      seen.push(...res.body.data.map((e: { id: string }) => e.id));
      cursor = res.body.next_cursor as string | null;
      expect(res.body.has_more).toBe(cursor !== null);
      pages++;
    } while (cursor && pages < 10);
    expect(pages).toBe(2);
    expect(seen).toEqual([...created.map((e) => e.id).reverse(), ...setup]);
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
    const { key, created, setup } = await populatedOnce();
    const res = await server.api('GET', '/events', { key });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ has_more: false, next_cursor: null });
    expect(res.body.data.map((e: { id: string }) => e.id)).toEqual([...created.map((e) => e.id).reverse(), ...setup]);
    for (const item of res.body.data) expect(Object.keys(item).sort()).toEqual([...SUMMARY_FIELDS].sort());
    const full = await listAll(key, '/audit-logs');
    expect(res.body.data[0]).toEqual(Object.fromEntries(SUMMARY_FIELDS.map((f) => [f, full[0]?.[f as keyof AuditEvent]])));
  });

  it('filters like GET /audit-logs', async () => {
    const { key, created } = await populatedOnce();
    const from = encodeURIComponent(created[1]!.event_timestamp);
    const to = encodeURIComponent(created[5]!.event_timestamp);
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
    const { key, created, setup } = await populatedOnce();
    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const res = await server.api('GET', `/events?limit=1${cursor ? `&cursor=${cursor}` : ''}`, { key });
      expect(res.status).toBe(200);
      seen.push(...res.body.data.map((e: { id: string }) => e.id));
      cursor = res.body.next_cursor as string | null;
      pages++;
    } while (cursor && pages < 20);
    expect(seen).toEqual([...created.map((e) => e.id).reverse(), ...setup]);
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
  it('reports a chain holding only its key’s creation as valid', async () => {
    // A workspace's key is created by a configuration change, audited: its chain is never empty.
    const key = await freshWorkspace();
    const verification = await sealed(key);
    expect(verification).toMatchObject({ valid: true, checked: 1, unsealed: 0, first_invalid_sequence: null });
    expect(verification.verified_at).toMatch(ISO);
  });

  it('seals every event into the chain and verifies it', async () => {
    const key = await freshWorkspace();
    await server.api('POST', '/agents', { key, body: { name: 'Chained', slug: 'chained', provider: 'local' } });
    for (const action of ['a.one', 'a.two'])
      expect((await server.api('POST', '/policy/evaluate', { key, body: { input: { action, agent: 'chained' } } })).status).toBe(200);
    for (const action of ['m.one', 'm.two', 'm.three']) await record(key, { action, result: 'blocked' });

    // A burst of concurrent writes is chained as well, each event exactly once.
    await Promise.all(Array.from({ length: 20 }, (_, i) => record(key, { action: `burst.${i}`, result: 'approval_required' })));

    // 25 events and 2 configuration events (the key's and the agent's creation)
    const verification = await sealed(key);
    expect(verification).toMatchObject({ valid: true, checked: 27, unsealed: 0, first_invalid_sequence: null });
    const events = await listAll(key, '/audit-logs');
    expect(events).toHaveLength(25);
    const sequences = [...events.map((e) => e.sequence), ...(await configurationEvents(key)).map((e) => e.sequence)];
    expect(sequences.sort((a, b) => Number(a) - Number(b))).toEqual(Array.from({ length: 27 }, (_, i) => i + 1));
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

    // and 2 configuration events: the key's and the agent's creation
    expect(await sealed(key)).toMatchObject({ valid: true, checked: 4, unsealed: 0, first_invalid_sequence: null });
    expect((await listAll(key, '/audit-logs')).map((e) => e.action).sort()).toEqual(['deep.audit', 'deep.eval']);
  });

  it('reports the first tampered event by its sequence', async () => {
    const key = await freshWorkspace();
    const bystander = await freshWorkspace();
    for (const action of ['t.one', 't.two', 't.three', 't.four']) await record(key, { action, result: 'blocked' });
    await record(bystander, { action: 'b.one', result: 'blocked' });
    // and each workspace's key's creation (sealed before or among the others)
    expect(await sealed(key)).toMatchObject({ valid: true, checked: 5, unsealed: 0 });
    expect(await sealed(bystander)).toMatchObject({ valid: true, checked: 2 });

    const events = (await server.api('GET', '/audit-logs', { key })).body.data;
    const victim = events.find((e) => e.sequence === 2);
    expect(victim).toBeDefined();
    await server.database.db.transaction().execute(async (trx) => {
      await sql`SET LOCAL session_replication_role = replica`.execute(trx);
      await sql`UPDATE audit_events SET action = 'tampered' WHERE id = ${victim!.id}`.execute(trx);
    });
    expect((await server.api('GET', '/audit-logs?action=tampered', { key })).body.data.map((e) => e.id)).toEqual([victim!.id]);

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
    // and the key's creation (sealed before or among the others)
    expect(await sealed(key)).toMatchObject({ valid: true, checked: 5, unsealed: 0 });
    const events = (await server.api('GET', '/audit-logs', { key })).body.data;
    const moved = events.find((e) => e.sequence === 3);
    const deleted = events.find((e) => e.sequence === 4);
    await server.database.db.transaction().execute(async (trx) => {
      await sql`SET LOCAL session_replication_role = replica`.execute(trx);
      await sql`UPDATE audit_events SET event_timestamp = event_timestamp - interval '1 hour' WHERE id = ${moved!.id}`.execute(trx);
      await sql`DELETE FROM audit_events WHERE id = ${deleted!.id}`.execute(trx);
    });
    const res = await server.api('GET', '/audit/verify', { key });
    expect(res.status).toBe(200);
    // the rolling re-check goes over all 5
    expect(res.body.data).toMatchObject({ valid: false, checked: 5, first_invalid_sequence: 3 });
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
    for (const path of ['/audit-logs', '/events', '/audit-logs?agent=secret-agent', '/events?action=secret.action'] as const) {
      const items = await listAll(intruder, path);
      expect(
        items.find((e) => e.id === id),
        path,
      ).toBeUndefined();
    }
    expect((await listAll(intruder, '/audit-logs')).map((e) => e.action)).toEqual(['own.action']);
    // its own event, and its key's creation
    expect((await server.api('GET', '/audit/verify', { key: intruder })).body.data.checked).toBeLessThanOrEqual(2);
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
