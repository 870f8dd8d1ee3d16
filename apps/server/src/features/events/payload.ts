import type { Selectable } from 'kysely';
import type { OutboxEvents } from '../../db/schema.ts';

/** The body POSTed for an outbox event (Standard Webhooks' envelope), the same on every attempt and replay. */
export const webhookPayload = (event: Selectable<OutboxEvents>) => ({
  id: event.id,
  type: event.type,
  created_at: new Date(event.created_at).toISOString(),
  workspace_id: event.workspace_id,
  data: event.data as Record<string, unknown>,
});
