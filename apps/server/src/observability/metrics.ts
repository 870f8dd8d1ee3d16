/**
 * Prometheus metrics (prom-client): the one registry, the Telemetry that services report to,
 * and what is read when Prometheus scrapes (the database's backlogs, the pool, the process).
 * Labels come from closed sets only (operation ids of the contract, status codes, results,
 * outcomes): no workspace, key, agent or policy names, so the series stay bounded.
 *
 * With WARDEN_WORKERS > 1 each server process keeps its own registry and the supervisor
 * answers the scrape with those of the serving processes aggregated (AggregatorRegistry.aggregate:
 * counters and histograms summed; what is read from the shared database taken once, as the maximum).
 */

import type { Worker } from 'node:cluster';
import diagnostics from 'node:diagnostics_channel';
import type { Kysely } from 'kysely';
import type pg from 'pg';
import {
  AggregatorRegistry,
  Counter,
  collectDefaultMetrics,
  Gauge,
  Histogram,
  type MetricObjectWithValues,
  type MetricValue,
  Registry,
} from 'prom-client';
import type { DB } from '../db/schema.ts';
import { type Backlog, readBacklog } from './backlog.repository.ts';
import type { Telemetry } from './telemetry.ts';

const LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];
const BATCH_BUCKETS = [1, 2, 5, 10, 20, 50, 100, 200, 500];
const WAIT_BUCKETS = [1, 10, 60, 300, 900, 3600, 4 * 3600, 24 * 3600, 7 * 24 * 3600];
/** A backlog read is shared by the gauges of one scrape (and by scrapes closer than this). */
const BACKLOG_TTL_MS = 1_000;

export interface Metrics extends Telemetry {
  readonly registry: Registry;
  /** One answered HTTP request: its operation id (or `unmatched`), status and duration. */
  httpRequest(operation: string, method: string, status: number, seconds: number): void;
  /** The exposition text (this process's metrics). */
  render(): Promise<string>;
  readonly contentType: string;
  /** Stops counting upstream calls (the undici channels are process-wide). */
  close(): void;
  /** What `warden_ready` reads when scraped: whether /readyz would answer 200 (probes.ts). */
  watchReadiness(ready: () => Promise<boolean>): void;
}

export interface MetricsSources {
  db: Kysely<DB>;
  pool?: pg.Pool;
}

export function createMetrics(sources: MetricsSources): Metrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, eventLoopMonitoringPrecision: 10 });
  const counter = (name: string, help: string, labelNames: string[] = []) => new Counter({ name, help, labelNames, registers: [registry] });
  const histogram = (name: string, help: string, buckets: number[], labelNames: string[] = []) =>
    new Histogram({ name, help, buckets, labelNames, registers: [registry] });

  const httpRequests = counter('warden_http_requests_total', 'HTTP requests answered, by operation id and status.', [
    'operation',
    'method',
    'status',
  ]);
  const httpDuration = histogram('warden_http_request_duration_seconds', 'Time to answer an HTTP request.', LATENCY_BUCKETS, [
    'operation',
    'status',
  ]);
  const rateLimited = counter('warden_rate_limited_total', 'Requests refused by the rate limit (429).', ['api']);
  const decisions = counter('warden_decisions_total', 'Decisions answered (their audit event committed), by result and source.', [
    'result',
    'source',
  ]);
  const approvalsCreated = counter('warden_approvals_created_total', 'Approvals created.');
  const approvalsDecided = counter('warden_approvals_decided_total', 'Approvals decided, by decision.', ['status']);
  const approvalsExpired = counter('warden_approvals_expired_total', 'Decisions refused because their approval had expired.');
  const approvalWait = histogram('warden_approval_wait_seconds', 'How long an approval waited for its decision.', WAIT_BUCKETS);
  const auditWritten = counter('warden_audit_events_written_total', 'Audit events committed by the group-commit writer.');
  const auditFailed = counter('warden_audit_commit_failures_total', 'Group-commit statements that failed (their requests answered 503).');
  const auditBatch = histogram('warden_audit_commit_batch_size', 'Audit events per group-commit statement.', BATCH_BUCKETS);
  const auditCommit = histogram('warden_audit_commit_duration_seconds', 'Time of one group-commit statement.', LATENCY_BUCKETS, [
    'outcome',
  ]);
  const webhookDeliveries = counter('warden_webhook_deliveries_total', 'Webhook delivery attempts, by outcome.', ['outcome']);
  const webhookDuration = histogram('warden_webhook_delivery_duration_seconds', 'Time of one webhook delivery attempt.', LATENCY_BUCKETS, [
    'outcome',
  ]);
  const upstreamCalls = counter(
    'warden_upstream_calls_total',
    'Calls to upstreams (HTTP proxy, MCP servers), by kind and outcome (status class, or error).',
    ['kind', 'outcome'],
  );
  const upstreamDuration = histogram('warden_upstream_call_duration_seconds', 'Time of one upstream call.', LATENCY_BUCKETS, [
    'kind',
    'outcome',
  ]);

  // A scrape's queries start after its collectors have all run: kysely asks the pool for a
  // connection synchronously, and the pool gauge would count the scrape's own queries as waiting.
  const afterCollectors = <T>(read: () => Promise<T>) => new Promise<void>((resolve) => setImmediate(resolve)).then(read);
  // Read when scraped: the database's backlogs (shared by every process: aggregated as the max).
  let backlog: { at: number; value: Promise<Backlog | undefined> } | undefined;
  const readShared = () => {
    if (!backlog || Date.now() - backlog.at > BACKLOG_TTL_MS)
      backlog = { at: Date.now(), value: afterCollectors(() => readBacklog(sources.db)).catch(() => undefined) };
    return backlog.value;
  };
  const backlogGauge = (name: string, help: string, pick: (b: Backlog) => number) =>
    new Gauge({
      name,
      help,
      registers: [registry],
      aggregator: 'max',
      async collect() {
        const value = await readShared();
        if (value) this.set(pick(value));
      },
    });
  backlogGauge('warden_audit_unsealed_events', 'Audit events written but not yet sealed into their Merkle tree.', (b) => b.unsealed);
  backlogGauge('warden_audit_seal_lag_seconds', 'Age of the oldest audit event not yet sealed (0 when none).', (b) => b.unsealedAgeS);
  backlogGauge('warden_audit_checkpoint_lag_leaves', 'Sealed leaves not yet covered by a signed checkpoint.', (b) => b.uncheckpointed);
  backlogGauge(
    'warden_audit_signing_refused_logs',
    'Workspaces whose audit tree the signer refuses to sign: it does not extend the last signed checkpoint (alert on > 0).',
    (b) => b.signingRefused,
  );
  backlogGauge('warden_webhook_queue_depth', 'Webhook deliveries waiting to be sent (pending).', (b) => b.pendingDeliveries);
  backlogGauge('warden_webhook_oldest_pending_seconds', 'Age of the oldest pending webhook delivery.', (b) => b.pendingDeliveryAgeS);
  backlogGauge('warden_outbox_undispatched_events', 'Outbox events not yet fanned out to deliveries.', (b) => b.undispatched);
  backlogGauge(
    'warden_outbox_oldest_undispatched_seconds',
    'Age of the oldest outbox event not yet fanned out.',
    (b) => b.undispatchedAgeS,
  );
  let readiness: (() => Promise<boolean>) | undefined;
  new Gauge({
    name: 'warden_ready',
    help: '1 when /readyz answers 200, 0 when it answers 503 (a shutdown under way, the database or the audit writer failing).',
    registers: [registry],
    aggregator: 'min',
    async collect() {
      const ready = readiness;
      if (ready) this.set((await afterCollectors(ready)) ? 1 : 0);
    },
  });
  const pool = sources.pool;
  if (pool) {
    new Gauge({
      name: 'warden_db_pool_connections',
      help: 'PostgreSQL pool connections of this process, by state (total, idle, waiting requests).',
      labelNames: ['state'],
      registers: [registry],
      collect() {
        this.set({ state: 'total' }, pool.totalCount);
        this.set({ state: 'idle' }, pool.idleCount);
        this.set({ state: 'waiting' }, pool.waitingCount);
      },
    });
  }

  const stopCountingUpstreams = countUpstreamCalls((kind, outcome, seconds) => {
    upstreamCalls.inc({ kind, outcome });
    upstreamDuration.observe({ kind, outcome }, seconds);
  });

  return {
    registry,
    close: stopCountingUpstreams,
    contentType: registry.contentType,
    render: () => registry.metrics(),
    watchReadiness(ready) {
      readiness = ready;
    },
    httpRequest(operation, method, status, seconds) {
      const code = String(status);
      httpRequests.inc({ operation, method, status: code });
      httpDuration.observe({ operation, status: code }, seconds);
    },
    decision: (result, source) => decisions.inc({ result, source }),
    approvalCreated: () => approvalsCreated.inc(),
    approvalDecided(status, waitedSeconds) {
      approvalsDecided.inc({ status });
      approvalWait.observe(Math.max(0, waitedSeconds));
    },
    approvalExpired: () => approvalsExpired.inc(),
    auditCommit(events, seconds, ok) {
      auditBatch.observe(events);
      auditCommit.observe({ outcome: ok ? 'committed' : 'failed' }, seconds);
      if (ok) auditWritten.inc(events);
      else auditFailed.inc();
    },
    webhookDelivery(outcome, seconds) {
      webhookDeliveries.inc({ outcome });
      webhookDuration.observe({ outcome }, seconds);
    },
    rateLimited: (api) => rateLimited.inc({ api }),
  };
}

interface UndiciRequest {
  headers?: string | string[];
}

/**
 * Every HTTP request this process makes with undici (the HTTP proxy; MCP servers, through
 * fetch) is seen on undici's diagnostics channels, so the execution code counts nothing itself.
 * Webhook deliveries (their own metric) are left out; a request carrying an `mcp-` header or
 * accepting `text/event-stream` is counted as `mcp`, any other as `http`.
 */
function countUpstreamCalls(record: (kind: 'http' | 'mcp', outcome: string, seconds: number) => void): () => void {
  const started = new WeakMap<object, { at: number; kind: 'http' | 'mcp' }>();
  const onCreate = (message: unknown) => {
    const { request } = message as { request: UndiciRequest };
    const raw = request.headers;
    const list = Array.isArray(raw) ? raw : typeof raw === 'string' ? raw.split('\r\n').flatMap((line) => line.split(': ')) : [];
    let kind: 'http' | 'mcp' = 'http';
    for (let i = 0; i + 1 < list.length; i += 2) {
      const name = String(list[i]).toLowerCase();
      const value = String(list[i + 1]);
      if (name === 'user-agent' && value.startsWith('Warden-Webhooks/')) return;
      if (name.startsWith('mcp-') || (name === 'accept' && value.includes('text/event-stream'))) kind = 'mcp';
    }
    started.set(request, { at: performance.now(), kind });
  };
  const finish = (request: object, outcome: string) => {
    const call = started.get(request);
    if (!call) return;
    started.delete(request);
    record(call.kind, outcome, (performance.now() - call.at) / 1000);
  };
  const onHeaders = (message: unknown) => {
    const { request, response } = message as { request: object; response: { statusCode: number } };
    finish(request, `${Math.floor(response.statusCode / 100)}xx`);
  };
  const onError = (message: unknown) => finish((message as { request: object }).request, 'error');
  diagnostics.subscribe('undici:request:create', onCreate);
  diagnostics.subscribe('undici:request:headers', onHeaders);
  diagnostics.subscribe('undici:request:error', onError);
  return () => {
    diagnostics.unsubscribe('undici:request:create', onCreate);
    diagnostics.unsubscribe('undici:request:headers', onHeaders);
    diagnostics.unsubscribe('undici:request:error', onError);
  };
}

const ASK = 'warden:metrics:ask';
const ANSWER = 'warden:metrics:answer';
/** A server process that does not answer the supervisor within this long is left out of that scrape. */
const WORKER_ANSWER_MS = 3_000;

/** In a supervised server process: answer the supervisor's requests with this process's registry. */
export function shareWithSupervisor(metrics: Metrics): void {
  process.on('message', (message: { type?: string; id?: number }) => {
    if (message?.type !== ASK) return;
    metrics.registry.getMetricsAsJSON().then(
      (list) => process.send?.({ type: ANSWER, id: message.id, metrics: list }),
      () => process.send?.({ type: ANSWER, id: message.id, metrics: [] }),
    );
  });
}

/**
 * In the supervisor: the metrics of the server processes that serve, aggregated (counters and
 * histograms summed, `aggregator: 'max'` gauges as the maximum). Only serving processes are
 * asked, so a scrape while one starts is not held up by it.
 */
export function clusterMetrics(serving: () => Worker[]): { render: () => Promise<string>; contentType: string } {
  let next = 0;
  const ask = (worker: Worker) =>
    new Promise<MetricObjectWithValues<MetricValue<string>>[] | undefined>((resolve) => {
      const id = next++;
      const onMessage = (message: { type?: string; id?: number; metrics?: MetricObjectWithValues<MetricValue<string>>[] }) => {
        if (message?.type !== ANSWER || message.id !== id) return;
        done(message.metrics);
      };
      const timer = setTimeout(() => done(undefined), WORKER_ANSWER_MS);
      const done = (metrics: MetricObjectWithValues<MetricValue<string>>[] | undefined) => {
        clearTimeout(timer);
        worker.off('message', onMessage);
        resolve(metrics);
      };
      worker.on('message', onMessage);
      try {
        worker.send({ type: ASK, id });
      } catch {
        done(undefined);
      }
    });
  return {
    contentType: Registry.PROMETHEUS_CONTENT_TYPE,
    render: async () => {
      const answers = await Promise.all(serving().map(ask));
      return AggregatorRegistry.aggregate(answers.filter((a) => a !== undefined)).metrics();
    },
  };
}
