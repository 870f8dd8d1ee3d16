/**
 * What a database superuser can do to an audit log (triggers off), for the tests of issue 36:
 * rewrite a recorded event, add a forged one, and let Warden's own sealer rebuild the tree from
 * the events as they now are (seals and nodes deleted, the head set to 0, every event queued).
 */
import { type Kysely, sql } from 'kysely';
import type { DB } from '../../apps/server/src/db/schema.ts';

const EMPTY_ROOT = 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855';

/** Runs `work` as a superuser would: replication role replica (no trigger fires), the tree heads locked. */
export async function asAttacker(db: Kysely<DB>, work: (trx: Kysely<DB>) => Promise<void>): Promise<void> {
  await db.transaction().execute(async (trx) => {
    await sql`SET LOCAL session_replication_role = replica`.execute(trx);
    await sql`SELECT 1 FROM audit_tree_heads FOR UPDATE`.execute(trx);
    await work(trx);
  });
}

/** Lets Warden's own sealer rebuild the workspace's tree from its events as they now are. */
export async function resealEverything(trx: Kysely<DB>, workspaceId: string): Promise<void> {
  await sql`DELETE FROM audit_seals WHERE workspace_id = ${workspaceId}`.execute(trx);
  await sql`DELETE FROM audit_tree_nodes WHERE workspace_id = ${workspaceId}`.execute(trx);
  await sql`UPDATE audit_tree_heads SET tree_size = 0, root_hash = ${EMPTY_ROOT} WHERE workspace_id = ${workspaceId}`.execute(trx);
  await sql`INSERT INTO audit_unsealed (workspace_id, event_id, event_timestamp)
            SELECT workspace_id, id, event_timestamp FROM audit_events WHERE workspace_id = ${workspaceId}`.execute(trx);
}

/**
 * The first variant of issue 36: events of `action` rewritten as allowed, one forged event more
 * (so that the forged tree is larger than the signed one), the tree rebuilt by the sealer. The
 * forged event's time has milliseconds, as Warden writes them (PostgreSQL's now() has
 * microseconds, which no exported row could be matched with).
 */
export const rewriteAsAllowed = (db: Kysely<DB>, workspaceId: string, action: string) =>
  asAttacker(db, async (trx) => {
    await sql`UPDATE audit_events SET result = 'allowed' WHERE workspace_id = ${workspaceId} AND action = ${action}`.execute(trx);
    await sql`INSERT INTO audit_events (workspace_id, id, event_timestamp, source, agent, action, result, severity, message, context)
              SELECT workspace_id, gen_random_uuid(), date_trunc('milliseconds', now()), source, agent, 'forged', 'allowed', severity, message, context
              FROM audit_events WHERE workspace_id = ${workspaceId} AND action = ${action} LIMIT 1`.execute(trx);
    await resealEverything(trx, workspaceId);
  });
