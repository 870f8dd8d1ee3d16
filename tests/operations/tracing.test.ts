/**
 * OpenTelemetry traces: Warden as a child process exporting to a small OTLP/HTTP receiver in
 * this test (OTEL_EXPORTER_OTLP_PROTOCOL=http/json). A POST /runtime/execute carrying a W3C
 * `traceparent` continues that trace: the server span is the caller's span's child, the decision
 * and its audit commit are inside it, the upstream call is a client span of the same trace, and
 * the upstream receives a `traceparent` with the same trace id. The request's log line carries
 * the trace id. Spans redact secret query values as the audit log does (issue 35: `url.full`
 * and `url.query` carried `access_token=…`). Without an OTLP endpoint no span is exported and
 * no traceparent goes upstream.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ChildServer, randomKey, startChildServer } from '../reliability/support/child-server.ts';
import { freshDatabase } from '../support/database.ts';
import { request } from '../support/server.ts';

interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  attributes?: { key: string; value: Record<string, unknown> }[];
}

const BASE_URL = process.env.DATABASE_URL;
const key = randomKey('tracing');
const spans: OtlpSpan[] = [];
const contentTypes: string[] = [];
const upstreamHeaders: IncomingHttpHeaders[] = [];
let receiver: Server;
let upstream: Server;
let upstreamUrl: string;
let receiverUrl: string;
const cleanups: (() => Promise<void> | void)[] = [];

const listen = async (server: Server) => {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
};
const attribute = (span: OtlpSpan, name: string) => {
  const value = span.attributes?.find((a) => a.key === name)?.value;
  return value ? Object.values(value)[0] : undefined;
};

async function startWarden(env: Record<string, string>): Promise<ChildServer> {
  let data: Record<string, string>;
  if (BASE_URL) {
    const db = await freshDatabase(BASE_URL, 'warden_tracing');
    cleanups.push(db.drop);
    data = { DATABASE_URL: db.url };
  } else {
    const dir = mkdtempSync(join(tmpdir(), 'warden-tracing-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    data = { WARDEN_DATA_DIR: dir };
  }
  const server = await startChildServer({
    env: { ...data, WARDEN_BOOTSTRAP_KEY: key, WARDEN_EGRESS_ALLOWLIST: '127.0.0.1/32', WARDEN_LOG_REQUESTS: 'true', ...env },
  });
  cleanups.unshift(() => server.stop());
  const agent = await request(server.url, key, 'POST', '/agents', { body: { name: 'Trace Bot', provider: 'local', slug: 'trace-bot' } });
  expect(agent.status).toBe(201);
  return server;
}

const execute = (server: ChildServer, headers: Record<string, string>) =>
  request(server.url, key, 'POST', '/runtime/execute', {
    headers,
    body: { input: { action: 'http.get', agent: 'trace-bot' }, execution: { mode: 'http_proxy', method: 'GET', url: upstreamUrl } },
    timeoutMs: 30_000,
  });

beforeAll(async () => {
  receiver = createServer((req, res) => {
    let body = '';
    req.on('data', (chunk) => {
      body += chunk;
    });
    req.on('end', () => {
      contentTypes.push(String(req.headers['content-type']));
      if (req.url === '/v1/traces') {
        try {
          for (const rs of JSON.parse(body).resourceSpans ?? [])
            for (const ss of rs.scopeSpans ?? []) for (const span of ss.spans ?? []) spans.push(span);
        } catch {
          // not JSON: the content-type check reports it
        }
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  receiverUrl = await listen(receiver);
  upstream = createServer((req, res) => {
    upstreamHeaders.push(req.headers);
    res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}');
  });
  upstreamUrl = `${await listen(upstream)}/tool`;
}, 30_000);

afterAll(async () => {
  for (const cleanup of cleanups) await cleanup();
  await new Promise((resolve) => receiver?.close(resolve));
  await new Promise((resolve) => upstream?.close(resolve));
});

describe('traces exported over OTLP/HTTP (JSON) with an incoming traceparent', () => {
  const traceId = randomBytes(16).toString('hex');
  const callerSpanId = randomBytes(8).toString('hex');
  const requestId = randomUUID();
  let server: ChildServer;
  let answer: Awaited<ReturnType<typeof execute>>;
  let mine: OtlpSpan[] = [];

  beforeAll(async () => {
    server = await startWarden({
      OTEL_EXPORTER_OTLP_ENDPOINT: receiverUrl,
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
      OTEL_BSP_SCHEDULE_DELAY: '100',
    });
    upstreamHeaders.length = 0;
    answer = await execute(server, { traceparent: `00-${traceId}-${callerSpanId}-01`, 'x-request-id': requestId });
    // spans are exported in batches: wait (bounded) for the request's server span
    const deadline = Date.now() + 20_000;
    while (Date.now() < deadline && !spans.some((s) => s.traceId === traceId && s.kind === 2)) await new Promise((r) => setTimeout(r, 100));
    await new Promise((r) => setTimeout(r, 500)); // the rest of the batch
    mine = spans.filter((s) => s.traceId === traceId);
  }, 240_000); // a start (up to the 120 s cap of child-ready.ts) on a loaded machine, then the export

  it('executes (200) and exports JSON to /v1/traces', () => {
    expect(answer.status).toBe(200);
    expect(contentTypes).toContain('application/json');
    expect(mine.length).toBeGreaterThan(0);
  });

  it('continues the caller’s trace: a SERVER span named by the operation id, child of the caller’s span', () => {
    const serverSpan = mine.find((s) => s.kind === 2);
    expect(serverSpan).toBeDefined();
    expect(serverSpan?.parentSpanId).toBe(callerSpanId);
    expect(serverSpan?.name).toBe('POST executeRuntime');
    expect(attribute(serverSpan as OtlpSpan, 'warden.operation_id')).toBe('executeRuntime');
    expect(attribute(serverSpan as OtlpSpan, 'http.response.status_code')).toBe(200);
  });

  it('has the decision inside the request span and the audit commit inside the decision', () => {
    const serverSpan = mine.find((s) => s.kind === 2) as OtlpSpan;
    const decision = mine.find((s) => s.name === 'warden.decision');
    expect(decision?.parentSpanId).toBe(serverSpan.spanId);
    expect(attribute(decision as OtlpSpan, 'warden.decision.result')).toBe('allowed');
    const commits = mine.filter((s) => s.name === 'warden.audit.commit');
    expect(commits.some((c) => c.parentSpanId === decision?.spanId)).toBe(true);
  });

  it('makes the upstream call a CLIENT span of the same trace and sends its traceparent upstream', () => {
    const client = mine.find((s) => s.kind === 3);
    expect(client).toBeDefined();
    expect(upstreamHeaders).toHaveLength(1);
    const sent = String(upstreamHeaders[0]?.traceparent);
    expect(sent).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]$/);
    expect(sent.split('-')[1]).toBe(traceId);
    expect(sent.split('-')[2]).toBe(client?.spanId);
  });

  it('redacts secret query values in every span, incoming and proxied, as the audit log does', async () => {
    const traced = randomBytes(16).toString('hex');
    const header = { traceparent: `00-${traced}-${randomBytes(8).toString('hex')}-01` };
    const incoming = await request(server.url, key, 'POST', '/runtime/execute?access_token=in-secret-3c1f&page=1', {
      headers: header,
      body: { input: { action: 'http.get', agent: 'trace-bot' }, execution: { mode: 'http_proxy', method: 'GET', url: upstreamUrl } },
    });
    expect(incoming.status).toBeLessThan(500);
    const proxied = await request(server.url, key, 'POST', '/runtime/execute', {
      headers: header,
      body: {
        input: { action: 'http.get', agent: 'trace-bot' },
        execution: { mode: 'http_proxy', method: 'GET', url: `${upstreamUrl}?access_token=out-secret-9e2a&page=2&api_key=out-key-41b7` },
      },
      timeoutMs: 30_000,
    });
    expect(proxied.status).toBe(200);
    const proxiedSpan = (s: OtlpSpan) => s.traceId === traced && s.kind === 3 && String(attribute(s, 'url.query')).includes('page=2');
    const hasClientSpan = () => spans.some(proxiedSpan);
    const deadline = Date.now() + 20_000;
    while (Date.now() < deadline && !hasClientSpan()) await new Promise((r) => setTimeout(r, 100));
    await new Promise((r) => setTimeout(r, 500)); // the rest of the batch
    const these = spans.filter((s) => s.traceId === traced);
    expect(these.filter((s) => s.kind === 2)).toHaveLength(2);
    const client = these.find(proxiedSpan) as OtlpSpan;
    expect(attribute(client, 'url.full')).toBe(`${upstreamUrl}?access_token=%5Bredacted%5D&page=2&api_key=%5Bredacted%5D`);
    expect(attribute(client, 'url.query')).toBe('?access_token=%5Bredacted%5D&page=2&api_key=%5Bredacted%5D');
    for (const secret of ['in-secret-3c1f', 'out-secret-9e2a', 'out-key-41b7']) expect(JSON.stringify(these)).not.toContain(secret);
  });

  it('logs the trace id with the request id on the request line', () => {
    const line = server
      .output()
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l))
      .find((entry) => entry.message === 'request' && entry.requestId === requestId);
    expect(line?.traceId).toBe(traceId);
    expect(line?.operation).toBe('executeRuntime');
  });
});

describe('the default sampler (parent-based, 1 in 10 of the traces that start here)', () => {
  it('records every trace its caller sampled, none that its caller did not, and about 1 in 10 of the rest', async () => {
    const server = await startWarden({
      OTEL_EXPORTER_OTLP_ENDPOINT: receiverUrl,
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
      OTEL_BSP_SCHEDULE_DELAY: '100',
    });
    const evaluate = (headers: Record<string, string>) =>
      request(server.url, key, 'POST', '/policy/evaluate', { headers, body: { input: { action: 'read', agent: 'trace-bot' } } });
    const traceparent = (flags: string) => {
      const id = randomBytes(16).toString('hex');
      return { id, header: `00-${id}-${randomBytes(8).toString('hex')}-${flags}` };
    };
    const sampled = Array.from({ length: 10 }, () => traceparent('01'));
    const unsampled = Array.from({ length: 10 }, () => traceparent('00'));
    for (const t of [...sampled, ...unsampled]) expect((await evaluate({ traceparent: t.header })).status).toBe(200);
    const ROOTS = 200;
    for (let i = 0; i < ROOTS; i += 20)
      for (const res of await Promise.all(Array.from({ length: 20 }, () => evaluate({})))) expect(res.status).toBe(200);
    const isEvaluate = (s: OtlpSpan) => s.kind === 2 && s.name === 'POST evaluatePolicy';
    const deadline = Date.now() + 20_000;
    while (Date.now() < deadline && !sampled.every((t) => spans.some((s) => s.traceId === t.id && isEvaluate(s))))
      await new Promise((r) => setTimeout(r, 100));
    await new Promise((r) => setTimeout(r, 1_000)); // the rest of the batches
    const traced = new Set(spans.filter(isEvaluate).map((s) => s.traceId));
    expect(sampled.filter((t) => traced.has(t.id))).toHaveLength(sampled.length);
    expect(unsampled.filter((t) => traced.has(t.id))).toHaveLength(0);
    const roots = spans.filter((s) => isEvaluate(s) && !s.parentSpanId).length;
    // Binomial(200, 0.1): 20 expected; outside 3..50 has a probability below 1e-9.
    expect(roots).toBeGreaterThanOrEqual(3);
    expect(roots).toBeLessThanOrEqual(50);
  }, 240_000);
});

describe('without OTEL_EXPORTER_OTLP_ENDPOINT', () => {
  it('exports nothing and sends no traceparent of its own upstream', async () => {
    const server = await startWarden({});
    const before = spans.length;
    upstreamHeaders.length = 0;
    const answer = await execute(server, {});
    expect(answer.status).toBe(200);
    await new Promise((r) => setTimeout(r, 500));
    expect(spans.length).toBe(before);
    expect(upstreamHeaders[0]?.traceparent).toBeUndefined();
  }, 180_000);
});
