/**
 * Prometheus metrics (WARDEN_METRICS_PORT): served on a listener of their own, on loopback,
 * never on the API's port; after a known workload the counters moved by exactly that workload.
 */
import { readFileSync } from 'node:fs';
import { createServer, request as httpRequest } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../apps/server/src/config.ts';
import { useTestServer } from '../support/server.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** The sum of every sample of `name` whose labels include `labels` (0 when none). */
function sample(text: string, name: string, labels: Record<string, string> = {}): number {
  let total = 0;
  for (const line of text.split('\n')) {
    if (line.startsWith('#')) continue;
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$/.exec(line);
    if (!match || match[1] !== name) continue;
    const found = Object.fromEntries([...(match[3] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((m) => [m[1], m[2]]));
    if (Object.entries(labels).every(([k, v]) => found[k] === v)) total += Number(match[4]);
  }
  return total;
}

/**
 * A request over node:http, not fetch: upstream calls are counted on undici's diagnostics
 * channels, which also see this (in-process) test's own fetch calls.
 */
function plainRequest(method: string, url: string, headers: Record<string, string> = {}, body?: unknown) {
  return new Promise<{ status: number; text: string; json: () => any }>((resolve, reject) => {
    const payload = body === undefined ? undefined : JSON.stringify(body);
    const req = httpRequest(url, { method, headers: payload ? { ...headers, 'content-type': 'application/json' } : headers }, (res) => {
      let text = '';
      res.on('data', (chunk) => {
        text += chunk;
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, text, json: () => JSON.parse(text) }));
    });
    req.on('error', reject);
    req.end(payload);
  });
}

/** GET /metrics over node:http (see plainRequest). */
const scrapePlain = async (url: string | undefined) => {
  expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/metrics$/);
  const res = await plainRequest('GET', url as string);
  expect(res.status).toBe(200);
  return res.text;
};

const scrape = async (url: string | undefined) => {
  expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/metrics$/);
  const res = await fetch(url as string);
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toContain('text/plain');
  return res.text();
};

describe('metrics after a known workload', () => {
  const upstream = createServer((_req, res) => res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}'));
  const server = useTestServer(async () => {
    await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
    return { metricsPort: 0, egressAllowlist: ['127.0.0.1/32'] };
  });
  afterAll(() => new Promise<void>((resolve) => upstream.close(() => resolve())));
  const ALLOWED = 7;
  const BLOCKED = 4;
  let before = '';
  let after = '';
  let afterExecution = '';
  let approvalId = '';

  beforeAll(async () => {
    expect((await server.api('POST', '/agents', { body: { name: 'Metric Bot', provider: 'local', slug: 'metric-bot' } })).status).toBe(201);
    for (const [name, action, effect] of [
      ['No deletes', 'orders.delete', 'block'],
      ['Refunds need approval', 'refund.*', 'require_approval'],
    ] as const) {
      const res = await server.api('POST', '/policies', {
        body: { name, rules: [{ match: { action: [action] }, effect, severity: 'high', message: name }] },
      });
      expect(res.status).toBe(201);
    }
    before = await scrape(server.metricsUrl);
    const evaluate = (action: string) =>
      server.api('POST', '/policy/evaluate', { body: { input: { action, agent: 'metric-bot', resource: 'orders/1' } } });
    for (let i = 0; i < ALLOWED; i++) expect((await evaluate('orders.read')).body.data.result).toBe('allowed');
    for (let i = 0; i < BLOCKED; i++) expect((await evaluate('orders.delete')).body.data.result).toBe('blocked');
    const pending = await evaluate('refund.create');
    expect(pending.body.data.result).toBe('approval_required');
    approvalId = pending.body.data.approval_id as string;
    expect((await server.api('PATCH', `/approvals/${approvalId}`, { body: { status: 'approved' } })).status).toBe(200);
    after = await scrapePlain(server.metricsUrl);
    const url = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}/tool`;
    const executed = await plainRequest(
      'POST',
      `${server.url}/runtime/execute`,
      { authorization: `Bearer ${server.key}` },
      { input: { action: 'http.get', agent: 'metric-bot' }, execution: { mode: 'http_proxy', method: 'GET', url } },
    );
    expect(executed.status).toBe(200);
    expect(executed.json().data.execution.body).toEqual({ ok: true });
    afterExecution = await scrapePlain(server.metricsUrl);
  }, 120_000);

  const moved = (name: string, labels: Record<string, string> = {}) => sample(after, name, labels) - sample(before, name, labels);

  it('counts decisions by result: exactly the allowed, blocked and approval-required evaluations', () => {
    expect(moved('warden_decisions_total', { result: 'allowed', source: 'evaluation' })).toBe(ALLOWED);
    expect(moved('warden_decisions_total', { result: 'blocked', source: 'evaluation' })).toBe(BLOCKED);
    expect(moved('warden_decisions_total', { result: 'approval_required', source: 'evaluation' })).toBe(1);
    expect(moved('warden_decisions_total')).toBe(ALLOWED + BLOCKED + 1);
  });

  it('counts HTTP requests and their latency by operation id and status', () => {
    expect(moved('warden_http_requests_total', { operation: 'evaluatePolicy', status: '200' })).toBe(ALLOWED + BLOCKED + 1);
    expect(moved('warden_http_request_duration_seconds_count', { operation: 'evaluatePolicy', status: '200' })).toBe(ALLOWED + BLOCKED + 1);
    expect(moved('warden_http_requests_total', { operation: 'decideApproval', status: '200' })).toBe(1);
  });

  it('counts the approval created by a decision and its decision', () => {
    expect(moved('warden_approvals_created_total')).toBe(1);
    expect(moved('warden_approvals_decided_total', { status: 'approved' })).toBe(1);
    expect(moved('warden_approval_wait_seconds_count')).toBe(1);
  });

  it('counts the audit events the group-commit writer committed: one per decision', () => {
    // the approval-required decision is written in its approval's transaction, not by the writer
    expect(moved('warden_audit_events_written_total')).toBe(ALLOWED + BLOCKED);
    expect(moved('warden_audit_commit_batch_size_sum')).toBe(ALLOWED + BLOCKED);
    expect(moved('warden_audit_commit_failures_total')).toBe(0);
  });

  it('counts the upstream call of an execution by kind and status class, and its decision by source', () => {
    const movedByExecution = (name: string, labels: Record<string, string> = {}) =>
      sample(afterExecution, name, labels) - sample(after, name, labels);
    expect(movedByExecution('warden_upstream_calls_total', { kind: 'http', outcome: '2xx' })).toBe(1);
    expect(movedByExecution('warden_upstream_calls_total')).toBe(1);
    expect(movedByExecution('warden_decisions_total', { result: 'allowed', source: 'execution' })).toBe(1);
  });

  it('reports the backlogs, the event loop and the process, with no id in any label', () => {
    for (const name of [
      'warden_audit_unsealed_events',
      'warden_audit_seal_lag_seconds',
      'warden_webhook_queue_depth',
      'warden_outbox_undispatched_events',
      'nodejs_eventloop_lag_p99_seconds',
      'process_resident_memory_bytes',
    ])
      expect(after, name).toMatch(new RegExp(`^${name}(\\{[^}]*\\})? \\d`, 'm'));
    expect(after).not.toMatch(/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/);
    expect(after).not.toContain(approvalId);
  });

  it('has every warden_* metric that the Grafana dashboard (docs/operations) queries', () => {
    const dashboard = readFileSync(join(ROOT, 'docs/operations/grafana-dashboard.json'), 'utf8');
    const queried = new Set(
      [...dashboard.matchAll(/\b(warden_[a-z_]+)/g)].map((m) => (m[1] as string).replace(/_(bucket|sum|count)$/, '')),
    );
    expect(queried.size).toBeGreaterThan(10);
    // the pool exists on PostgreSQL only
    const missing = [...queried].filter(
      (name) => !after.includes(`# TYPE ${name} `) && !(name === 'warden_db_pool_connections' && !process.env.DATABASE_URL),
    );
    expect(missing).toEqual([]);
  });

  it('is not served on the API port', async () => {
    const res = await fetch(`${server.origin}/metrics`);
    expect(res.status).toBe(404);
  });
});

describe('metrics of rate-limit refusals', () => {
  const LIMIT = 3;
  const server = useTestServer({ metricsPort: 0, rateLimitPerMinute: LIMIT });
  let statuses: number[] = [];
  let refused = 0;

  beforeAll(async () => {
    const before = await scrape(server.metricsUrl);
    statuses = [];
    for (let i = 0; i < LIMIT + 4; i++) statuses.push((await server.api('GET', '/agents')).status);
    const after = await scrape(server.metricsUrl);
    refused = sample(after, 'warden_rate_limited_total', { api: 'v1' }) - sample(before, 'warden_rate_limited_total', { api: 'v1' });
  });

  it('counts every 429 the rate limit answered', () => {
    const limited = statuses.filter((s) => s === 429).length;
    expect(limited).toBeGreaterThan(0);
    expect(refused).toBe(limited);
  });
});

describe('metrics configuration', () => {
  it('is off by default and binds to 127.0.0.1 unless WARDEN_METRICS_HOST says otherwise', () => {
    expect(loadConfig({}).metricsPort).toBeUndefined();
    expect(loadConfig({ WARDEN_METRICS_PORT: '9464' })).toMatchObject({ metricsPort: 9464, metricsHost: '127.0.0.1' });
    expect(loadConfig({ WARDEN_METRICS_PORT: '9464', WARDEN_METRICS_HOST: '0.0.0.0' }).metricsHost).toBe('0.0.0.0');
  });

  it('refuses a WARDEN_METRICS_PORT that is not a port, and an unknown WARDEN_LOG_LEVEL', () => {
    for (const value of ['x', '-1', '70000', '1.5'])
      expect(() => loadConfig({ WARDEN_METRICS_PORT: value })).toThrow(/WARDEN_METRICS_PORT must be a port number/);
    expect(() => loadConfig({ WARDEN_LOG_LEVEL: 'loud' })).toThrow(/WARDEN_LOG_LEVEL must be one of/);
    expect(loadConfig({ WARDEN_LOG_LEVEL: 'DEBUG' }).logLevel).toBe('debug');
    expect(loadConfig({}).shutdownTimeoutMs).toBe(10_000);
  });
});
