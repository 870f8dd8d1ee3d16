/**
 * The audit page's search, date range and export, and the webhook payload viewer, through the
 * dashboard API: GET /audit-logs?q=…, GET /audit-logs/export?format=csv|ndjson and
 * GET /webhooks/{id}/deliveries/{deliveryId}. The server reads at most 5 events per search page
 * here (WARDEN_AUDIT_SEARCH_SCAN_ROWS), so every search below crosses that bound.
 */
import type { AuditEvent, dashboard } from '@warden/contract';
import { describe, expect, it } from 'vitest';
import type { DashboardSession } from '../support/server.ts';
import { useTestServer } from '../support/server.ts';
import { closeReceiversAfterAll, deliveryHelpers, startReceiver, until } from '../webhooks/support/delivery.ts';
import { dashboardHelpers } from './support/dashboard.ts';

const SCAN_ROWS = 5;
const server = useTestServer({ auditSearchScanRows: SCAN_ROWS, egressAllowlist: ['127.0.0.1/32'] });
closeReceiversAfterAll();
const { login, freshWorkspace, newKey } = dashboardHelpers(server);

/** Records a refusal through POST /audit (the cheapest way to write one event). */
async function record(key: string, event: { action: string; agent?: string; resource?: string; context?: Record<string, unknown> }) {
  const res = await server.api('POST', '/audit', { key, body: { result: 'blocked', ...event } });
  expect(res.status).toBe(201);
  return res.body.data.id;
}

/** Every event a search finds, following next_cursor to the end; also how many pages that took. */
async function searchAll(session: DashboardSession, query: { q: string; limit?: number }) {
  const found: AuditEvent[] = [];
  let cursor: string | undefined;
  let pages = 0;
  for (;;) {
    const page = await session.api('GET', '/audit-logs', { query: { ...query, cursor } });
    expect(page.status).toBe(200);
    pages += 1;
    found.push(...page.body.data);
    if (!page.body.has_more) return { found, pages };
    expect(page.body.next_cursor).toEqual(expect.any(String));
    cursor = page.body.next_cursor as string;
    expect(pages).toBeLessThan(100);
  }
}

/** GET /dashboard/api/audit-logs/export with the session's cookie: status, headers and the raw text. */
async function download(session: DashboardSession, query: Record<string, string>) {
  const res = await fetch(`${server.origin}/dashboard/api/audit-logs/export?${new URLSearchParams(query)}`, {
    headers: { cookie: session.cookie },
  });
  return { status: res.status, headers: res.headers, text: await res.text() };
}

/** A minimal RFC 4180 reader, enough for the export's lines (quoted cells may hold commas, quotes and line breaks). */
function parseCsv(text: string): string[][] {
  const rows: string[][] = [];
  let row: string[] = [];
  let cell = '';
  let quoted = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') {
        cell += '"';
        i++;
      } else if (c === '"') quoted = false;
      else cell += c;
    } else if (c === '"') quoted = true;
    else if (c === ',') {
      row.push(cell);
      cell = '';
    } else if (c === '\r' && text[i + 1] === '\n') {
      row.push(cell);
      rows.push(row);
      row = [];
      cell = '';
      i++;
    } else cell += c;
  }
  return rows;
}

describe('listDashboardAuditLogs with q (search)', () => {
  it('finds events by a part of their action, resource, agent or message, case-insensitively, newest first', async () => {
    const ws = await freshWorkspace('*');
    const session = await login(ws.key);
    const refund = await record(ws.key, { action: 'payments.Refund', resource: 'order/1' });
    await record(ws.key, { action: 'files.read', resource: 'doc/2' });
    const byResource = await record(ws.key, { action: 'files.delete', resource: 'REFUNDS/ledger' });
    const byAgent = await record(ws.key, { action: 'mail.send', agent: 'refund-bot' });
    for (let i = 0; i < 8; i++) await record(ws.key, { action: `noise.${i}` });

    const { found, pages } = await searchAll(session, { q: 'refund' });
    expect(found.map((e) => e.id)).toEqual([byAgent, byResource, refund]);
    expect(pages).toBeGreaterThan(1); // 12 events, 5 read per page
  });

  it('answers a page with fewer events than asked (even none), has_more and a cursor when its reading bound runs out', async () => {
    const ws = await freshWorkspace('*');
    const session = await login(ws.key);
    const oldest = await record(ws.key, { action: 'rare.match' });
    for (let i = 0; i < 2 * SCAN_ROWS; i++) await record(ws.key, { action: `other.${i}` });

    const first = await session.api('GET', '/audit-logs', { query: { q: 'rare', limit: 10 } });
    expect(first.status).toBe(200);
    expect(first.body.data).toEqual([]);
    expect(first.body.has_more).toBe(true);
    const { found } = await searchAll(session, { q: 'rare', limit: 10 });
    expect(found.map((e) => e.id)).toEqual([oldest]);
  });

  it('fills a page when the matches are dense, and pages on from the last match', async () => {
    const ws = await freshWorkspace('*');
    const session = await login(ws.key);
    const ids: string[] = [];
    for (let i = 0; i < 7; i++) ids.push(await record(ws.key, { action: `deploy.step${i}` }));
    const first = await session.api('GET', '/audit-logs', { query: { q: 'deploy', limit: 3 } });
    expect(first.body.data.map((e) => e.id)).toEqual(ids.slice(-3).reverse());
    expect(first.body.has_more).toBe(true);
    const { found } = await searchAll(session, { q: 'deploy', limit: 3 });
    expect(found.map((e) => e.id)).toEqual([...ids].reverse());
  });

  it('takes % and _ as plain characters, and combines with the other filters', async () => {
    const ws = await freshWorkspace('*');
    const session = await login(ws.key);
    const percent = await record(ws.key, { action: 'discount.apply', resource: '50%_off' });
    await record(ws.key, { action: 'discount.apply', resource: '50 percent off' });
    const other = await record(ws.key, { action: 'discount.apply', resource: '50%_off', agent: 'pricing-bot' });
    expect((await searchAll(session, { q: '%_' })).found.map((e) => e.id)).toEqual([other, percent]);
    const combined = await session.api('GET', '/audit-logs', { query: { q: '%_', agent: 'pricing-bot' } });
    expect(combined.body.data.map((e) => e.id)).toEqual([other]);
  });

  it('does not search the context, where values are redacted from the reader (no guessing a secret by search)', async () => {
    const ws = await freshWorkspace('*');
    const session = await login(ws.key);
    await record(ws.key, { action: 'login.try', context: { password: 'hunter2-secret' } });
    expect((await searchAll(session, { q: 'hunter2' })).found).toEqual([]);
    expect((await searchAll(session, { q: 'login' })).found).toHaveLength(1);
  });

  it('answers 400 invalid_request for an empty or over-long search, and never shows another workspace’s events', async () => {
    const a = await freshWorkspace('*');
    const b = await freshWorkspace('*');
    await record(a.key, { action: 'secret.project.x' });
    const sessionB = await login(b.key);
    expect((await searchAll(sessionB, { q: 'secret.project' })).found).toEqual([]);
    for (const q of ['', 'x'.repeat(201)]) {
      const res = await sessionB.api('GET', '/audit-logs', { query: { q } });
      expect(res.status, `q of ${q.length}`).toBe(400);
      expect(res.body.error.code).toBe('invalid_request');
    }
  });

  it('narrows by date range (from inclusive, to exclusive)', async () => {
    const ws = await freshWorkspace('*');
    const session = await login(ws.key);
    const before = await record(ws.key, { action: 'range.before' });
    await new Promise((resolve) => setTimeout(resolve, 20));
    const from = new Date().toISOString();
    const inside = await record(ws.key, { action: 'range.inside' });
    await new Promise((resolve) => setTimeout(resolve, 20));
    const to = new Date().toISOString();
    await record(ws.key, { action: 'range.after' });
    const page = await session.api('GET', '/audit-logs', { query: { from, to } });
    expect(page.body.data.map((e) => e.id)).toEqual([inside]);
    expect((await session.api('GET', '/audit-logs', { query: { to: from } })).body.data.map((e) => e.id)).toContain(before);
  });
});

describe('exportDashboardAuditLogs', () => {
  it('downloads CSV: a header, one RFC 4180 line per event, formulas defused, contexts redacted (a yes/no about a secret kept)', async () => {
    const ws = await freshWorkspace('*');
    const session = await login(ws.key);
    const plain = await record(ws.key, {
      action: 'export.plain',
      resource: 'a, "quoted"\nline',
      context: { amount: 5, api_token: 'tok-1', has_api_key: true },
    });
    const formula = await record(ws.key, { action: 'export.formula', resource: '=HYPERLINK("http://x","y")', agent: '@bot' });
    await record(ws.key, { action: 'unrelated.event' });

    const res = await download(session, { format: 'csv', q: 'export.' });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/csv; charset=utf-8');
    expect(res.headers.get('content-disposition')).toMatch(/^attachment; filename="warden-audit-\d{4}-\d{2}-\d{2}\.csv"$/);
    const [header, ...rows] = parseCsv(res.text);
    expect(header).toEqual([
      'id',
      'event_timestamp',
      'sequence',
      'hash',
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
    ]);
    const column = (row: string[] | undefined, name: string) => row?.[(header as string[]).indexOf(name)];
    expect(rows.map((row) => row[0])).toEqual([formula, plain]);
    expect(column(rows[0], 'resource')).toBe(`'=HYPERLINK("http://x","y")`);
    expect(column(rows[0], 'agent')).toBe(`'@bot`);
    expect(column(rows[1], 'resource')).toBe('a, "quoted"\nline');
    expect(JSON.parse(column(rows[1], 'context') as string)).toEqual({ amount: 5, api_token: '[redacted]', has_api_key: true });
    expect(res.text).not.toContain('tok-1');
  });

  it('downloads NDJSON: each line is the event as the list shows it, over every page of the filters', async () => {
    const ws = await freshWorkspace('*');
    const session = await login(ws.key);
    for (let i = 0; i < 12; i++) await record(ws.key, { action: `bulk.${i % 3}`, context: { i, secret: `s-${i}` } });
    // the sealer may seal these events between the download and the listing (their hash and
    // sequence then differ): both are read once every one is sealed
    await until(
      'the events sealed',
      async () => {
        const page = await session.api('GET', '/audit-logs', { query: { action: 'bulk.1', limit: 100 } });
        return page.body.data.length === 4 && page.body.data.every((e: { sequence: number | null }) => e.sequence !== null);
      },
      40_000,
    );
    const res = await download(session, { format: 'ndjson', action: 'bulk.1' });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('application/x-ndjson; charset=utf-8');
    expect(res.text.endsWith('\n')).toBe(true);
    const lines = res.text
      .trimEnd()
      .split('\n')
      .map((line) => JSON.parse(line));
    const listed = await session.api('GET', '/audit-logs', { query: { action: 'bulk.1', limit: 100 } });
    expect(lines).toEqual(listed.body.data);
    expect(lines).toHaveLength(4);
    expect(lines.every((e) => e.context.secret === '[redacted]')).toBe(true);
  });

  it('downloads an empty CSV (the header alone) when nothing matches, and only the workspace’s own events', async () => {
    const a = await freshWorkspace('*');
    const b = await freshWorkspace('*');
    await record(a.key, { action: 'a.only' });
    const sessionB = await login(b.key);
    const res = await download(sessionB, { format: 'csv', action: 'a.only' });
    expect(res.status).toBe(200);
    expect(parseCsv(res.text)).toHaveLength(1);
    expect((await download(sessionB, { format: 'ndjson', action: 'a.only' })).text).toBe('');
    // B's own events (its key's creation) are there; A's are not
    const all = (await download(sessionB, { format: 'ndjson' })).text
      .trimEnd()
      .split('\n')
      .map((line) => JSON.parse(line));
    expect(all.length).toBeGreaterThan(0);
    expect(all.some((e) => e.action === 'a.only')).toBe(false);
  });

  it('answers 400 for a missing or unknown format or a bad date, 403 without audit:read, 401 without a session', async () => {
    const ws = await freshWorkspace('*');
    const session = await login(ws.key);
    for (const query of [{}, { format: 'xlsx' }, { format: 'csv', from: 'yesterday' }]) {
      const res = await download(session, query as Record<string, string>);
      expect(res.status, JSON.stringify(query)).toBe(400);
      expect(JSON.parse(res.text).error.code).toBe('invalid_request');
    }
    const reader = await login((await newKey(ws.slug, 'admin')).key);
    const forbidden = await download(reader, { format: 'csv' });
    expect(forbidden.status).toBe(403);
    expect(JSON.parse(forbidden.text).error.code).toBe('insufficient_permission');
    const anonymous = await fetch(`${server.origin}/dashboard/api/audit-logs/export?format=csv`);
    expect(anonymous.status).toBe(401);
  });
});

describe('getWebhookDelivery (the payload viewer)', () => {
  const hooks = deliveryHelpers(server);

  it('shows the body Warden POSTed for the delivery, secret-looking values redacted', async () => {
    const ws = await hooks.freshWorkspace();
    const receiver = await startReceiver();
    const endpoint = await hooks.addEndpoint(ws, receiver, 'audit.created');
    await record(ws.key, { action: 'viewer.check', context: { amount: 9, password: 'pw-123' } });
    const received = await until('the audit.created delivery', () => receiver.received[0]);

    const list = await ws.dash.api('GET', `/webhooks/${endpoint.id}/deliveries`);
    const deliveryId = list.body.data[0]?.id as string;
    const shown = await ws.dash.api('GET', `/webhooks/${endpoint.id}/deliveries/${deliveryId}`);
    expect(shown.status).toBe(200);
    // The typed helper matches this path to /webhooks/{id} as well; the body is the delivery's.
    const detail = shown.body.data as unknown as dashboard.WebhookDeliveryDetailResponse['data'];
    expect(detail.delivery).toEqual(list.body.data[0]);
    const sent = received.payload;
    expect(detail.payload).toEqual({
      ...sent,
      data: { ...sent.data, event: { ...sent.data.event, context: { amount: 9, password: '[redacted]' } } },
    });
    expect(sent.data.event.context.password).toBe('[redacted]'); // the audit log never takes the secret in
    expect(JSON.stringify(shown.body)).not.toContain('pw-123');
  });

  it('answers 404 for a delivery of another endpoint or of another workspace', async () => {
    const a = await hooks.freshWorkspace();
    const b = await hooks.freshWorkspace();
    const receiver = await startReceiver();
    const endpoint = await hooks.addEndpoint(a, receiver, 'audit.created');
    const otherEndpoint = await hooks.addEndpoint(a, receiver, 'agent.created');
    await record(a.key, { action: 'viewer.isolation' });
    await until('the delivery', () => receiver.received[0]);
    const deliveryId = (await a.dash.api('GET', `/webhooks/${endpoint.id}/deliveries`)).body.data[0]?.id as string;

    const wrongEndpoint = await a.dash.api('GET', `/webhooks/${otherEndpoint.id}/deliveries/${deliveryId}`);
    expect(wrongEndpoint.status).toBe(404);
    expect(wrongEndpoint.body.error.code).toBe('not_found');
    const otherWorkspace = await b.dash.api('GET', `/webhooks/${endpoint.id}/deliveries/${deliveryId}`);
    expect(otherWorkspace.status).toBe(404);
  });
});
