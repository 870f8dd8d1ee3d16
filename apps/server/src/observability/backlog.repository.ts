/** What is waiting in the database, read when Prometheus scrapes (one round trip). */
import { type Kysely, sql } from 'kysely';
import type { DB } from '../db/schema.ts';

export interface Backlog {
  /** Audit events written but not sealed into their tree yet, and the age (s) of the oldest. */
  unsealed: number;
  unsealedAgeS: number;
  /** Leaves sealed into trees but not covered by a signed checkpoint yet (all workspaces). */
  uncheckpointed: number;
  /** Workspaces whose audit tree the signer refuses to sign (its history was rewritten). */
  signingRefused: number;
  /** Webhook deliveries still to send (pending), and the age (s) of the oldest. */
  pendingDeliveries: number;
  pendingDeliveryAgeS: number;
  /** Outbox events not fanned out to deliveries yet, and the age (s) of the oldest. */
  undispatched: number;
  undispatchedAgeS: number;
}

export async function readBacklog(db: Kysely<DB>): Promise<Backlog> {
  const { rows } = await sql<Record<string, string | number | null>>`
    SELECT
      (SELECT count(*) FROM audit_unsealed) AS unsealed,
      (SELECT extract(epoch FROM now() - min(event_timestamp)) FROM audit_unsealed) AS unsealed_age,
      (SELECT coalesce(sum(h.tree_size - coalesce(c.size, 0)), 0)
         FROM audit_tree_heads h
         LEFT JOIN (SELECT workspace_id, max(tree_size) AS size FROM audit_checkpoints GROUP BY workspace_id) c
           ON c.workspace_id = h.workspace_id) AS uncheckpointed,
      (SELECT count(*) FROM audit_signing_refusals) AS refused,
      (SELECT count(*) FROM webhook_deliveries WHERE status = 'pending') AS pending,
      (SELECT extract(epoch FROM now() - min(created_at)) FROM webhook_deliveries WHERE status = 'pending') AS pending_age,
      (SELECT count(*) FROM outbox_events WHERE dispatched_at IS NULL) AS undispatched,
      (SELECT extract(epoch FROM now() - min(created_at)) FROM outbox_events WHERE dispatched_at IS NULL) AS undispatched_age
  `.execute(db);
  const row = rows[0] ?? {};
  const n = (value: string | number | null | undefined) => Math.max(0, Number(value ?? 0) || 0);
  return {
    unsealed: n(row.unsealed),
    unsealedAgeS: n(row.unsealed_age),
    uncheckpointed: n(row.uncheckpointed),
    signingRefused: n(row.refused),
    pendingDeliveries: n(row.pending),
    pendingDeliveryAgeS: n(row.pending_age),
    undispatched: n(row.undispatched),
    undispatchedAgeS: n(row.undispatched_age),
  };
}
