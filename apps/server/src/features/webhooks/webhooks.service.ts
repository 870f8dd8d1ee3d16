/**
 * Webhook endpoints and their deliveries, as the dashboard and the CLI manage them. The v1 API
 * has no webhook operations (the reference keeps them out of the versioned API).
 */
import { randomUUID } from 'node:crypto';
import type { dashboard } from '@warden/contract';
import type { Kysely } from 'kysely';
import { iso, isoOrNull, type PageRequest, paginate } from '../../db/paginate.ts';
import type { DB } from '../../db/schema.ts';
import { inTransaction } from '../../db/transaction.ts';
import type { EgressGuard } from '../../egress/guard.ts';
import type { Actor } from '../../shared/context.ts';
import { ApiError, notFound } from '../../shared/errors.ts';
import { redactSecrets } from '../../shared/redact.ts';
import { recordChange } from '../audit/audit.service.ts';
import { type EventType, findEvent, insertDispatchedEvent } from '../events/outbox.repository.ts';
import { webhookPayload } from '../events/payload.ts';
import { generateWebhookSecret, type SecretBox } from './secrets.ts';
import * as repo from './webhooks.repository.ts';

export const SUBSCRIBABLE_EVENTS: readonly EventType[] = [
  'agent.created',
  'policy.updated',
  'audit.created',
  'audit.checkpoint',
  'audit.integrity_failed',
  'approval.requested',
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

  /*
   * Every change writes its `configuration` audit event (audit.service.ts recordChange) first,
   * in the change's transaction. The events name what changed, never a secret or the URL (which
   * may carry credentials).
   */

  /** Returns the endpoint and its secret: the only time the secret is shown. */
  async create(workspaceId: string, input: { url: string; events: string[]; description?: string | null }, actor: Actor) {
    const secret = generateWebhookSecret();
    const url = this.checkUrl(input.url);
    const events = checkEvents(input.events);
    const id = randomUUID();
    const row = await inTransaction(this.db, async (trx) => {
      await recordChange(trx, workspaceId, actor, { action: 'webhook_endpoint.created', resource: id, context: { events } });
      return repo.insertEndpoint(trx, {
        workspace_id: workspaceId,
        id,
        url,
        description: input.description ?? null,
        events,
        secret_encrypted: this.box.seal(secret),
      });
    });
    return { endpoint: toEndpoint(row), secret };
  }

  /** A change of `paused` alone is recorded as `webhook_endpoint.paused` or `.resumed`, any other as `.updated`. */
  async update(
    workspaceId: string,
    id: string,
    input: { url?: string; events?: string[]; description?: string | null; paused?: boolean },
    actor: Actor,
  ) {
    const fields = Object.keys(input).filter((field) => input[field as keyof typeof input] !== undefined);
    const action =
      fields.length === 1 && fields[0] === 'paused'
        ? `webhook_endpoint.${input.paused ? 'paused' : 'resumed'}`
        : 'webhook_endpoint.updated';
    const changes = {
      ...(input.url !== undefined ? { url: this.checkUrl(input.url) } : {}),
      ...(input.events !== undefined ? { events: checkEvents(input.events) } : {}),
      ...(input.description !== undefined ? { description: input.description } : {}),
      // resuming also re-enables an endpoint disabled by a 410
      ...(input.paused !== undefined ? { paused: input.paused, ...(input.paused ? {} : { disabled_at: null }) } : {}),
    };
    const row = await inTransaction(this.db, async (trx) => {
      await recordChange(trx, workspaceId, actor, { action, resource: id, context: { fields } });
      const updated = await repo.updateEndpoint(trx, workspaceId, id, changes);
      if (!updated) throw notFound('webhook endpoint', id);
      return updated;
    });
    return toEndpoint(row);
  }

  async remove(workspaceId: string, id: string, actor: Actor) {
    await inTransaction(this.db, async (trx) => {
      await recordChange(trx, workspaceId, actor, { action: 'webhook_endpoint.deleted', resource: id, severity: 'medium' });
      if (!(await repo.deleteEndpoint(trx, workspaceId, id))) throw notFound('webhook endpoint', id);
    });
    return { id, deleted: true as const };
  }

  /** New secret now; the previous one keeps signing (second signature) for the overlap. */
  async rotateSecret(workspaceId: string, id: string, actor: Actor, overlapSeconds = DEFAULT_ROTATION_OVERLAP_SECONDS) {
    const existing = await repo.findEndpoint(this.db, workspaceId, id);
    if (!existing) throw notFound('webhook endpoint', id);
    const secret = generateWebhookSecret();
    const row = await inTransaction(this.db, async (trx) => {
      await recordChange(trx, workspaceId, actor, {
        action: 'webhook_endpoint.secret_rotated',
        resource: id,
        context: { overlap_seconds: overlapSeconds },
      });
      const updated = await repo.updateEndpoint(trx, workspaceId, id, {
        secret_encrypted: this.box.seal(secret),
        previous_secret_encrypted: overlapSeconds > 0 ? existing.secret_encrypted : null,
        previous_secret_expires_at: overlapSeconds > 0 ? new Date(Date.now() + overlapSeconds * 1000) : null,
      });
      if (!updated) throw notFound('webhook endpoint', id);
      return updated;
    });
    return { endpoint: toEndpoint(row), secret };
  }

  async deliveries(workspaceId: string, endpointId: string, page: PageRequest) {
    await this.get(workspaceId, endpointId);
    return paginate(repo.deliveriesQuery(this.db, workspaceId, endpointId), 'created_at', page, toDelivery);
  }

  /** One delivery of the endpoint, with the body it POSTs (secret-looking values redacted, as the dashboard shows contexts). */
  async delivery(workspaceId: string, endpointId: string, deliveryId: string) {
    const row = await repo.findDelivery(this.db, workspaceId, deliveryId);
    if (!row || row.endpoint_id !== endpointId) throw notFound('delivery', deliveryId);
    const event = await findEvent(this.db, workspaceId, row.event_id);
    if (!event) throw notFound('delivery', deliveryId);
    const payload = webhookPayload(event);
    return { delivery: toDelivery(row), payload: { ...payload, data: redactSecrets(payload.data) as Record<string, unknown> } };
  }

  /** Sends a delivery's event again (same webhook-id), as a new delivery. */
  async replay(workspaceId: string, endpointId: string, deliveryId: string): Promise<WebhookDelivery> {
    const original = await repo.findDelivery(this.db, workspaceId, deliveryId);
    if (!original || original.endpoint_id !== endpointId) throw notFound('delivery', deliveryId);
    const row = await repo.insertDelivery(this.db, {
      workspace_id: workspaceId,
      id: randomUUID(),
      endpoint_id: endpointId,
      event_id: original.event_id,
      event_type: original.event_type,
      status: 'pending',
    });
    return toDelivery(row);
  }

  /** A `webhook.test` event, delivered to this endpoint only (whatever it subscribes to). */
  async sendTest(workspaceId: string, endpointId: string): Promise<WebhookDelivery> {
    await this.get(workspaceId, endpointId);
    return inTransaction(this.db, async (trx) => {
      const eventId = randomUUID();
      await insertDispatchedEvent(trx, {
        workspace_id: workspaceId,
        id: eventId,
        type: 'webhook.test',
        data: { message: 'This is a test event from Warden' },
      });
      const row = await repo.insertDelivery(trx, {
        workspace_id: workspaceId,
        id: randomUUID(),
        endpoint_id: endpointId,
        event_id: eventId,
        event_type: 'webhook.test',
        status: 'pending',
      });
      return toDelivery(row);
    });
  }
}
