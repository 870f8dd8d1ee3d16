/**
 * Webhook delivery: outbox → deliveries → signed POSTs, at least once, never lost.
 *
 * 1. Fan-out: events not yet dispatched become one delivery per subscribed endpoint (a
 *    paused endpoint's delivery is recorded as `skipped`: visible, replayable, not sent).
 * 2. Delivery: due deliveries are claimed with FOR UPDATE SKIP LOCKED and a lease
 *    (`locked_until`), so several server processes deliver each once; a process that dies
 *    mid-delivery loses its lease and another (or itself, restarted) sends again, with the
 *    same `webhook-id` (the event id). Fair between workspaces: a process holds at most
 *    MAX_IN_FLIGHT_PER_WORKSPACE deliveries of one workspace at a time, and each claim takes
 *    the workspaces in turn (each one's first, then each one's second …), so one tenant's
 *    slow receivers and backlog never hold up another's deliveries.
 * 3. Outcome: 2xx succeeds; 410 disables the endpoint; anything else (3xx included — never
 *    followed — non-2xx, network error, 15 s timeout) is retried on the schedule, with jitter,
 *    then marked failed.
 * Signatures follow Standard Webhooks (`standardwebhooks` signs); during a secret rotation
 * the previous secret signs too, so receivers on either secret verify.
 */
import { randomUUID } from 'node:crypto';
import { trace } from '@opentelemetry/api';
import type { Kysely } from 'kysely';
import { Webhook } from 'standardwebhooks';
import { request } from 'undici';
import type { DB } from '../../db/schema.ts';
import { inTransaction } from '../../db/transaction.ts';
import { describeNetworkError, type EgressGuard } from '../../egress/guard.ts';
import type { Logger } from '../../logger.ts';
import { NO_TELEMETRY, type Telemetry, type WebhookOutcome } from '../../observability/telemetry.ts';
import { findEvent, lockUndispatchedEvents, markDispatched } from '../events/outbox.repository.ts';
import { webhookPayload } from '../events/payload.ts';
import type { SecretBox } from './secrets.ts';
import {
  activeEndpoints,
  type DeliveryRow,
  disableEndpoint,
  findEndpoint,
  finishDelivery,
  insertDeliveries,
  leaseDueDeliveries,
} from './webhooks.repository.ts';

/** Standard Webhooks' schedule: immediately, 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h. */
export const DEFAULT_RETRY_SCHEDULE = '0,5s,5m,30m,2h,5h,10h,10h';

export function parseSchedule(text: string): number[] {
  const units: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };
  return text.split(',').map((part) => {
    const match = /^\s*(\d+)(ms|s|m|h)?\s*$/.exec(part);
    if (!match) throw new Error(`invalid retry schedule entry '${part}'`);
    return Number(match[1]) * (units[match[2] ?? 'ms'] ?? 1);
  });
}

export interface DeliveryOptions {
  scheduleMs: number[];
  timeoutMs: number;
  pollMs: number;
  telemetry?: Telemetry;
}

const tracer = trace.getTracer('warden');

/** Deliveries under way at once in a process, in all and per workspace. */
const MAX_IN_FLIGHT = 64;
export const MAX_IN_FLIGHT_PER_WORKSPACE = 8;
/** Outbox events taken per fan-out transaction, and at most how many such transactions per round. */
const FAN_OUT_BATCH = 200;
const FAN_OUT_ROUNDS = 50;
const RESPONSE_KEPT = 1024;

/**
 * The first RESPONSE_KEPT characters of a receiver's answer. Reads no further and then closes
 * the stream (and with it the connection): a receiver may answer with any amount of data.
 */
async function readKept(body: AsyncIterable<Buffer> & { destroy(): unknown }): Promise<string> {
  const decoder = new TextDecoder();
  let text = '';
  try {
    for await (const chunk of body) {
      text += decoder.decode(chunk, { stream: true });
      if (text.length >= RESPONSE_KEPT) return text.slice(0, RESPONSE_KEPT);
    }
    return (text + decoder.decode()).slice(0, RESPONSE_KEPT);
  } finally {
    body.destroy();
  }
}

export class DeliveryWorker {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> = Promise.resolve();
  private roundQueued = false;
  private stopped = false;
  /** Deliveries under way in this process, and how many of them each workspace has. */
  private readonly inFlight = new Set<Promise<void>>();
  private readonly perWorkspace = new Map<string, number>();
  /** Aborts the deliveries under way when a shutdown's time is up (their leases are released). */
  private readonly abort = new AbortController();

  constructor(
    private readonly db: Kysely<DB>,
    private readonly box: SecretBox,
    private readonly guard: EgressGuard,
    private readonly logger: Logger,
    private readonly options: DeliveryOptions,
  ) {}

  start(): void {
    this.timer = setInterval(() => this.queueRound(), this.options.pollMs);
    this.timer.unref();
  }

  /**
   * Stops leasing; lets the deliveries under way finish until `deadline` (epoch ms; none: no
   * limit), then aborts those left and releases their leases, unattempted, for the next process.
   */
  async stop(deadline?: number): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    await this.running;
    const all = Promise.all(this.inFlight);
    if (deadline !== undefined && this.inFlight.size > 0) {
      let timer: NodeJS.Timeout | undefined;
      const late = await Promise.race([
        all.then(() => false),
        new Promise<boolean>((resolve) => {
          timer = setTimeout(() => resolve(true), Math.max(0, deadline - Date.now()));
        }),
      ]);
      clearTimeout(timer);
      if (late) this.abort.abort();
    }
    await all;
  }

  /** Runs a round after the current one; rounds asked for meanwhile are one. */
  private queueRound(): void {
    if (this.roundQueued || this.stopped) return;
    this.roundQueued = true;
    this.running = this.running
      .then(() => {
        this.roundQueued = false;
        return this.tick();
      })
      .catch((error) => this.logger.error('webhook delivery round failed', { cause: error }));
  }

  async tick(): Promise<void> {
    if (this.stopped) return;
    // Drain the outbox, a batch at a time: one batch per round would cap fan-out at
    // FAN_OUT_BATCH events per poll interval, and a busy workspace's webhooks would fall
    // further behind for as long as the load lasts. Bounded, so deliveries get their turn.
    for (let round = 0; round < FAN_OUT_ROUNDS && !this.stopped; round++) {
      if ((await this.fanOut()) < FAN_OUT_BATCH) break;
    }
    await this.deliverDue();
  }

  /** Turns up to FAN_OUT_BATCH outbox events into deliveries; returns how many it took. */
  private async fanOut(): Promise<number> {
    return inTransaction(this.db, async (trx) => {
      const events = await lockUndispatchedEvents(trx, FAN_OUT_BATCH);
      if (events.length === 0) return 0;
      const workspaces = [...new Set(events.map((e) => e.workspace_id))];
      const endpoints = await activeEndpoints(trx, workspaces);
      const deliveries = events.flatMap((event) =>
        endpoints
          .filter((ep) => ep.workspace_id === event.workspace_id && (ep.events.includes('*') || ep.events.includes(event.type)))
          .map((ep) => ({
            workspace_id: event.workspace_id,
            id: randomUUID(),
            endpoint_id: ep.id,
            event_id: event.id,
            event_type: event.type,
            status: ep.paused ? 'skipped' : 'pending',
          })),
      );
      if (deliveries.length) await insertDeliveries(trx, deliveries);
      for (const workspaceId of workspaces) {
        const ids = events.filter((e) => e.workspace_id === workspaceId).map((e) => e.id);
        await markDispatched(trx, workspaceId, ids);
      }
      return events.length;
    });
  }

  /** Claims what this process has room for and starts it; deliveries do not hold up the next round. */
  private async deliverDue(): Promise<void> {
    const free = MAX_IN_FLIGHT - this.inFlight.size;
    if (free <= 0 || this.stopped) return;
    for (const delivery of await this.claim(free)) {
      const workspaceId = delivery.workspace_id;
      this.perWorkspace.set(workspaceId, (this.perWorkspace.get(workspaceId) ?? 0) + 1);
      const running: Promise<void> = this.deliver(delivery)
        .catch((error) => this.logger.error('webhook delivery failed', { cause: error, delivery: delivery.id }))
        .finally(() => {
          const left = (this.perWorkspace.get(workspaceId) ?? 1) - 1;
          if (left > 0) this.perWorkspace.set(workspaceId, left);
          else this.perWorkspace.delete(workspaceId);
          this.inFlight.delete(running);
          // A slot is free: fill it now rather than at the next poll.
          this.queueRound();
        });
      this.inFlight.add(running);
    }
  }

  /** Leases up to `limit` due deliveries, fairly across workspaces (see leaseDueDeliveries). */
  private claim(limit: number): Promise<DeliveryRow[]> {
    return leaseDueDeliveries(this.db, {
      limit,
      leaseUntil: new Date(Date.now() + this.options.timeoutMs + 15_000),
      busy: this.perWorkspace,
      perWorkspace: MAX_IN_FLIGHT_PER_WORKSPACE,
    });
  }

  /** One delivery in a `warden.webhook.deliver` span (its POST is a child span carrying traceparent when traces are on). */
  private deliver(delivery: DeliveryRow): Promise<void> {
    return tracer.startActiveSpan('warden.webhook.deliver', { attributes: { 'warden.webhook.event_type': delivery.event_type } }, (span) =>
      this.send(delivery).finally(() => span.end()),
    );
  }

  private async send(delivery: DeliveryRow): Promise<void> {
    const [endpoint, event] = await Promise.all([
      findEndpoint(this.db, delivery.workspace_id, delivery.endpoint_id),
      findEvent(this.db, delivery.workspace_id, delivery.event_id),
    ]);
    if (!endpoint || !event) return; // deleted meanwhile (cascade removes the delivery too)
    if (endpoint.paused || endpoint.disabled_at) {
      await this.finish(delivery, { status: 'skipped', last_error: endpoint.paused ? 'endpoint paused' : 'endpoint disabled' });
      return;
    }
    const body = JSON.stringify(webhookPayload(event));
    const timestamp = new Date();
    const secrets = [this.box.open(endpoint.secret_encrypted)];
    if (
      endpoint.previous_secret_encrypted &&
      endpoint.previous_secret_expires_at &&
      new Date(endpoint.previous_secret_expires_at) > timestamp
    ) {
      secrets.push(this.box.open(endpoint.previous_secret_encrypted));
    }
    const signature = secrets.map((secret) => new Webhook(secret).sign(event.id, timestamp, body)).join(' ');
    let status: number | null = null;
    let responseBody: string | null = null;
    let error: string | null = null;
    const telemetry = this.options.telemetry ?? NO_TELEMETRY;
    const started = performance.now();
    const outcome = (result: WebhookOutcome) => telemetry.webhookDelivery(result, (performance.now() - started) / 1000);
    try {
      const url = this.guard.checkUrl(endpoint.url, { httpsOnly: true });
      const res = await request(url, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'user-agent': 'Warden-Webhooks/1.0',
          'webhook-id': event.id,
          'webhook-timestamp': String(Math.floor(timestamp.getTime() / 1000)),
          'webhook-signature': signature,
        },
        body,
        dispatcher: this.guard.dispatcher,
        headersTimeout: this.options.timeoutMs,
        bodyTimeout: this.options.timeoutMs,
        signal: AbortSignal.any([AbortSignal.timeout(this.options.timeoutMs), this.abort.signal]),
      });
      status = res.statusCode;
      responseBody = await readKept(res.body);
    } catch (e) {
      if (this.abort.signal.aborted) {
        // Shutting down: not an attempt; the lease is released for another process (same webhook-id).
        outcome('released');
        return this.finish(delivery, {});
      }
      error = (e as Error).name === 'TimeoutError' ? `no answer within ${this.options.timeoutMs} ms` : describeNetworkError(e);
    }
    const attempts = delivery.attempts + 1;
    const base = { attempts, last_attempt_at: timestamp, response_status: status, response_body: responseBody, last_error: error };
    if (status !== null && status >= 200 && status < 300) {
      outcome('succeeded');
      return this.finish(delivery, { ...base, status: 'succeeded', last_error: null });
    }
    if (status === 410) {
      outcome('gone');
      await disableEndpoint(this.db, endpoint.workspace_id, endpoint.id);
      return this.finish(delivery, { ...base, status: 'failed', last_error: 'receiver answered 410 Gone: endpoint disabled' });
    }
    const delay = this.options.scheduleMs[attempts];
    if (delay === undefined) {
      outcome('failed');
      return this.finish(delivery, { ...base, status: 'failed', last_error: error ?? `receiver answered ${status}` });
    }
    outcome('retry');
    const jitter = delay * 0.1 * Math.random();
    await this.finish(delivery, {
      ...base,
      status: 'pending',
      last_error: error ?? `receiver answered ${status}`,
      next_attempt_at: new Date(Date.now() + delay + jitter),
    });
  }

  private async finish(delivery: DeliveryRow, changes: Partial<Omit<DeliveryRow, 'id' | 'workspace_id'>>): Promise<void> {
    await finishDelivery(this.db, delivery.workspace_id, delivery.id, changes);
  }
}
