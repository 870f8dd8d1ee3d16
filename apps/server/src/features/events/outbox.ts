/**
 * The outbox: a webhook event is a row written in the same transaction as the change that
 * causes it, so an event exists if and only if its change committed. Delivery reads it later.
 */
import { randomUUID } from 'node:crypto';
import type { Kysely } from 'kysely';
import type { DB } from '../../db/schema.ts';

export type EventType = 'agent.created' | 'policy.updated' | 'audit.created' | 'approval.completed' | 'billing.updated' | 'webhook.test';

export const outboxRow = (workspaceId: string, type: EventType, data: unknown) => ({
  workspace_id: workspaceId,
  id: randomUUID(),
  type,
  data: JSON.stringify(data),
});

export async function recordEvent(db: Kysely<DB>, workspaceId: string, type: EventType, data: unknown): Promise<void> {
  await db
    .insertInto('outbox_events')
    .values(outboxRow(workspaceId, type, data))
    .execute();
}
