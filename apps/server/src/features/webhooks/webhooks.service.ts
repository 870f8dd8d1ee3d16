/**
 * Webhook endpoints and their deliveries, as the dashboard and the CLI manage them. The v1 API
 * has no webhook operations (the reference keeps them out of the versioned API).
 */
import { randomUUID } from 'node:crypto';
import type { dashboard } from '@warden/contract';
import type { Kysely } from 'kysely';
import { iso, isoOrNull, type PageRequest, paginate } from '../../db/paginate.ts';
import type { DB } from '../../db/schema.ts';
import type { EgressGuard } from '../../egress/guard.ts';
import { ApiError, notFound } from '../../http/errors.ts';
import { type EventType, recordEvent } from '../events/outbox.ts';
import { generateWebhookSecret, type SecretBox } from './secrets.ts';
import * as repo from './webhooks.repository.ts';

export const SUBSCRIBABLE_EVENTS: readonly EventType[] = [
  'agent.created',
  'policy.updated',
  'audit.created',
  'approval.completed',
  'billing.updated',
];
export const DEFAULT_ROTATION_OVERLAP_SECONDS = 24 * 3600;

export type WebhookEndpoint = dashboard.WebhookEndpoint;
export type WebhookDelivery = dashboard.WebhookDelivery;

export const toEndpoint = (row: repo.EndpointRow): WebhookEndpoint => ({
  id: row.id,
  url: row.url,
  description: row.description,
  events: row.events as WebhookEndpoint['events'],
  paused: row.paused,
  disabled: row.disabled_at !== null,
  secret_rotating_until:
    row.previous_secret_expires_at && new Date(row.previous_secret_expires_at) > new Date() ? iso(row.previous_secret_expires_at) : null,
  created_at: iso(row.created_at),
  updated_at: iso(row.updated_at),
});

export const toDelivery = (row: repo.DeliveryRow): WebhookDelivery => ({
  id: row.id,
  endpoint_id: row.endpoint_id,
  event_id: row.event_id,
  event_type: row.event_type,
  status: row.status as WebhookDelivery['status'],
  attempts: row.attempts,
  next_attempt_at: row.status === 'pending' ? iso(row.next_attempt_at) : null,
  last_attempt_at: isoOrNull(row.last_attempt_at),
  response_status: row.response_status,
  response_body: row.response_body,
  last_error: row.last_error,
  created_at: iso(row.created_at),
});

export function checkEvents(events: readonly string[]): string[] {
  if (events.length === 0) throw new ApiError('invalid_request', 'events: subscribe to at least one event type, or *');
  for (const event of events) {
    if (event !== '*' && !SUBSCRIBABLE_EVENTS.includes(event as EventType)) {
      throw new ApiError('invalid_request', `events: unknown event type '${event}' (known: ${SUBSCRIBABLE_EVENTS.join(', ')}, or *)`);
    }
  }
  return [...new Set(events)];
}

export class WebhookService {
  constructor(
    private readonly db: Kysely<DB>,
    private readonly box: SecretBox,
    private readonly guard: EgressGuard,
  ) {}

  /** Receivers must be https (allow-listed targets excepted) and pass the egress guard. */
  private checkUrl(url: string): string {
    try {
      return this.guard.checkUrl(url, { httpsOnly: true }).toString();
    } catch (error) {
      throw new ApiError('invalid_request', `url: ${(error as Error).message}`);
    }
  }

  list(workspaceId: string, page: PageRequest) {
    return paginate(repo.endpointsQuery(this.db, workspaceId), 'created_at', page, toEndpoint);
  }

  async get(workspaceId: string, id: string): Promise<WebhookEndpoint> {
    const row = await repo.findEndpoint(this.db, workspaceId, id);
    if (!row) throw notFound('webhook endpoint', id);
    return toEndpoint(row);
  }

  /** Returns the endpoint and its secret: the only time the secret is shown. */
  async create(workspaceId: string, input: { url: string; events: string[]; description?: string | null }) {
    const secret = generateWebhookSecret();
    const row = await repo.insertEndpoint(this.db, {
      workspace_id: workspaceId,
      id: randomUUID(),
      url: this.checkUrl(input.url),
      description: input.description ?? null,
      events: checkEvents(input.events),
      secret_encrypted: this.box.seal(secret),
    });
    return { endpoint: toEndpoint(row), secret };
  }

  async update(workspaceId: string, id: string, input: { url?: string; events?: string[]; description?: string | null; paused?: boolean }) {
    const changes = {
      ...(input.url !== undefined ? { url: this.checkUrl(input.url) } : {}),
      ...(input.events !== undefined ? { events: checkEvents(input.events) } : {}),
      ...(input.description !== undefined ? { description: input.description } : {}),
      // resuming also re-enables an endpoint disabled by a 410
      ...(input.paused !== undefined ? { paused: input.paused, ...(input.paused ? {} : { disabled_at: null }) } : {}),
    };
    const row = await repo.updateEndpoint(this.db, workspaceId, id, changes);
    if (!row) throw notFound('webhook endpoint', id);
    return toEndpoint(row);
  }

  async remove(workspaceId: string, id: string) {
    if (!(await repo.deleteEndpoint(this.db, workspaceId, id))) throw notFound('webhook endpoint', id);
    return { id, deleted: true as const };
  }

  /** New secret now; the previous one keeps signing (second signature) for the overlap. */
  async rotateSecret(workspaceId: string, id: string, overlapSeconds = DEFAULT_ROTATION_OVERLAP_SECONDS) {
    const existing = await repo.findEndpoint(this.db, workspaceId, id);
    if (!existing) throw notFound('webhook endpoint', id);
    const secret = generateWebhookSecret();
    const row = await repo.updateEndpoint(this.db, workspaceId, id, {
      secret_encrypted: this.box.seal(secret),
      previous_secret_encrypted: overlapSeconds > 0 ? existing.secret_encrypted : null,
      previous_secret_expires_at: overlapSeconds > 0 ? new Date(Date.now() + overlapSeconds * 1000) : null,
    });
    return { endpoint: toEndpoint(row as repo.EndpointRow), secret };
  }

  async deliveries(workspaceId: string, endpointId: string, page: PageRequest) {
    await this.get(workspaceId, endpointId);
    return paginate(repo.deliveriesQuery(this.db, workspaceId, endpointId), 'created_at', page, toDelivery);
  }

  /** Sends a delivery's event again (same webhook-id), as a new delivery. */
  async replay(workspaceId: string, endpointId: string, deliveryId: string): Promise<WebhookDelivery> {
    const original = await repo.findDelivery(this.db, workspaceId, deliveryId);
    if (!original || original.endpoint_id !== endpointId) throw notFound('delivery', deliveryId);
    const row = await this.db
      .insertInto('webhook_deliveries')
      .values({
        workspace_id: workspaceId,
        id: randomUUID(),
        endpoint_id: endpointId,
        event_id: original.event_id,
        event_type: original.event_type,
        status: 'pending',
      })
      .returningAll()
      .executeTakeFirstOrThrow();
    return toDelivery(row);
  }

  /** A `webhook.test` event, delivered to this endpoint only (whatever it subscribes to). */
  async sendTest(workspaceId: string, endpointId: string): Promise<WebhookDelivery> {
    await this.get(workspaceId, endpointId);
    return this.db.transaction().execute(async (trx) => {
      const eventId = randomUUID();
      await trx
        .insertInto('outbox_events')
        .values({
          workspace_id: workspaceId,
          id: eventId,
          type: 'webhook.test',
          data: JSON.stringify({ message: 'This is a test event from Warden' }),
          dispatched_at: new Date(),
        })
        .execute();
      const row = await trx
        .insertInto('webhook_deliveries')
        .values({
          workspace_id: workspaceId,
          id: randomUUID(),
          endpoint_id: endpointId,
          event_id: eventId,
          event_type: 'webhook.test',
          status: 'pending',
        })
        .returningAll()
        .executeTakeFirstOrThrow();
      return toDelivery(row);
    });
  }
}

/** The plans of the dashboard contract's `Plan` enum. */
export const PLANS: readonly dashboard.Plan[] = ['free', 'team', 'business', 'enterprise'];

/** Changes the workspace's plan; fires `billing.updated` in the same transaction. */
export async function setPlan(db: Kysely<DB>, workspaceId: string, plan: string) {
  if (!PLANS.includes(plan as dashboard.Plan)) throw new ApiError('invalid_request', `plan: '${plan}' is not one of ${PLANS.join(', ')}`);
  return db.transaction().execute(async (trx) => {
    const before = await trx
      .selectFrom('workspaces')
      .select(['plan', 'billing_status'])
      .where('id', '=', workspaceId)
      .forUpdate()
      .executeTakeFirst();
    if (!before) throw notFound('workspace', workspaceId);
    await trx.updateTable('workspaces').set({ plan }).where('id', '=', workspaceId).execute();
    const billing = { plan, previous_plan: before.plan, billing_status: before.billing_status };
    if (before.plan !== plan) await recordEvent(trx, workspaceId, 'billing.updated', billing);
    return billing;
  });
}
