/**
 * Webhook delivery: outbox → deliveries → signed POSTs, at least once, never lost.
 *
 * 1. Fan-out: events not yet dispatched become one delivery per subscribed endpoint (a
 *    paused endpoint's delivery is recorded as `skipped`: visible, replayable, not sent).
 * 2. Delivery: due deliveries are claimed with FOR UPDATE SKIP LOCKED and a lease
 *    (`locked_until`), so several server processes deliver each once; a process that dies
 *    mid-delivery loses its lease and another (or itself, restarted) sends again, with the
 *    same `webhook-id` (the event id).
 * 3. Outcome: 2xx succeeds; 410 disables the endpoint; anything else (3xx included — never
 *    followed — non-2xx, network error, 15 s timeout) is retried on the schedule, with jitter,
 *    then marked failed.
 * Signatures follow Standard Webhooks (`standardwebhooks` signs); during a secret rotation
 * the previous secret signs too, so receivers on either secret verify.
 */
import { randomUUID } from 'node:crypto';
import { type Kysely, sql } from 'kysely';
import { Webhook } from 'standardwebhooks';
import { request } from 'undici';
import type { DB } from '../../db/schema.ts';
import type { EgressGuard } from '../../egress/guard.ts';
import type { Logger } from '../../logger.ts';
import { describeNetworkError } from '../runtime/http-proxy.ts';
import type { SecretBox } from './secrets.ts';
import type { DeliveryRow } from './webhooks.repository.ts';

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
}

const BATCH = 20;
/** Outbox events taken per fan-out transaction, and at most how many such transactions per round. */
const FAN_OUT_BATCH = 200;
const FAN_OUT_ROUNDS = 50;
const RESPONSE_KEPT = 1024;

export class DeliveryWorker {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> = Promise.resolve();
  private stopped = false;

  constructor(
    private readonly db: Kysely<DB>,
    private readonly box: SecretBox,
    private readonly guard: EgressGuard,
    private readonly logger: Logger,
    private readonly options: DeliveryOptions,
  ) {}

  start(): void {
    this.timer = setInterval(() => {
      this.running = this.running
        .then(() => this.tick())
        .catch((error) => this.logger.error('webhook delivery round failed', { cause: error }));
    }, this.options.pollMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    await this.running;
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
    return this.db.transaction().execute(async (trx) => {
      const events = await trx
        .selectFrom('outbox_events')
        .select(['workspace_id', 'id', 'type'])
        .where('dispatched_at', 'is', null)
        .orderBy('created_at')
        .limit(FAN_OUT_BATCH)
        .forUpdate()
        .skipLocked()
        .execute();
      if (events.length === 0) return 0;
      const workspaces = [...new Set(events.map((e) => e.workspace_id))];
      const endpoints = await trx
        .selectFrom('webhook_endpoints')
        .select(['workspace_id', 'id', 'events', 'paused'])
        .where('workspace_id', 'in', workspaces)
        .where('disabled_at', 'is', null)
        .execute();
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
      if (deliveries.length) await trx.insertInto('webhook_deliveries').values(deliveries).execute();
      for (const workspaceId of workspaces) {
        const ids = events.filter((e) => e.workspace_id === workspaceId).map((e) => e.id);
        await trx
          .updateTable('outbox_events')
          .set({ dispatched_at: new Date() })
          .where('workspace_id', '=', workspaceId)
          .where('id', 'in', ids)
          .execute();
      }
      return events.length;
    });
  }

  private async deliverDue(): Promise<void> {
    const leaseMs = this.options.timeoutMs + 15_000;
    const claimed = await this.db.transaction().execute(async (trx) => {
      const due = await trx
        .selectFrom('webhook_deliveries')
        .select(['workspace_id', 'id'])
        .where('status', '=', 'pending')
        .where('next_attempt_at', '<=', sql<Date>`now()`)
        .where((eb) => eb.or([eb('locked_until', 'is', null), eb('locked_until', '<', sql<Date>`now()`)]))
        .orderBy('next_attempt_at')
        .limit(BATCH)
        .forUpdate()
        .skipLocked()
        .execute();
      const rows: DeliveryRow[] = [];
      for (const d of due) {
        rows.push(
          await trx
            .updateTable('webhook_deliveries')
            .set({ locked_until: new Date(Date.now() + leaseMs) })
            .where('workspace_id', '=', d.workspace_id)
            .where('id', '=', d.id)
            .returningAll()
            .executeTakeFirstOrThrow(),
        );
      }
      return rows;
    });
    await Promise.all(claimed.map((delivery) => this.deliver(delivery)));
  }

  private async deliver(delivery: DeliveryRow): Promise<void> {
    const [endpoint, event] = await Promise.all([
      this.db
        .selectFrom('webhook_endpoints')
        .selectAll()
        .where('workspace_id', '=', delivery.workspace_id)
        .where('id', '=', delivery.endpoint_id)
        .executeTakeFirst(),
      this.db
        .selectFrom('outbox_events')
        .selectAll()
        .where('workspace_id', '=', delivery.workspace_id)
        .where('id', '=', delivery.event_id)
        .executeTakeFirst(),
    ]);
    if (!endpoint || !event) return; // deleted meanwhile (cascade removes the delivery too)
    if (endpoint.paused || endpoint.disabled_at) {
      await this.finish(delivery, { status: 'skipped', last_error: endpoint.paused ? 'endpoint paused' : 'endpoint disabled' });
      return;
    }
    const body = JSON.stringify({
      id: event.id,
      type: event.type,
      created_at: new Date(event.created_at).toISOString(),
      workspace_id: event.workspace_id,
      data: event.data,
    });
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
        signal: AbortSignal.timeout(this.options.timeoutMs),
      });
      status = res.statusCode;
      responseBody = (await res.body.text()).slice(0, RESPONSE_KEPT);
    } catch (e) {
      error = (e as Error).name === 'TimeoutError' ? `no answer within ${this.options.timeoutMs} ms` : describeNetworkError(e);
    }
    const attempts = delivery.attempts + 1;
    const base = { attempts, last_attempt_at: timestamp, response_status: status, response_body: responseBody, last_error: error };
    if (status !== null && status >= 200 && status < 300) return this.finish(delivery, { ...base, status: 'succeeded', last_error: null });
    if (status === 410) {
      await this.db
        .updateTable('webhook_endpoints')
        .set({ disabled_at: new Date() })
        .where('workspace_id', '=', endpoint.workspace_id)
        .where('id', '=', endpoint.id)
        .execute();
      return this.finish(delivery, { ...base, status: 'failed', last_error: 'receiver answered 410 Gone: endpoint disabled' });
    }
    const delay = this.options.scheduleMs[attempts];
    if (delay === undefined)
      return this.finish(delivery, { ...base, status: 'failed', last_error: error ?? `receiver answered ${status}` });
    const jitter = delay * 0.1 * Math.random();
    await this.finish(delivery, {
      ...base,
      status: 'pending',
      last_error: error ?? `receiver answered ${status}`,
      next_attempt_at: new Date(Date.now() + delay + jitter),
    });
  }

  private async finish(delivery: DeliveryRow, changes: Partial<Omit<DeliveryRow, 'id' | 'workspace_id'>>): Promise<void> {
    await this.db
      .updateTable('webhook_deliveries')
      .set({ ...changes, locked_until: null, updated_at: new Date() })
      .where('workspace_id', '=', delivery.workspace_id)
      .where('id', '=', delivery.id)
      .execute();
  }
}
