import { type Insertable, type Kysely, sql } from 'kysely';
import type { Approvals, DB } from '../../db/schema.ts';

export type ApprovalRow = Awaited<ReturnType<typeof findApproval>> & {};

export const findApproval = (db: Kysely<DB>, workspaceId: string, id: string) =>
  db.selectFrom('approvals').selectAll().where('workspace_id', '=', workspaceId).where('id', '=', id).executeTakeFirst();

export const findApprovalForUpdate = (db: Kysely<DB>, workspaceId: string, id: string) =>
  db.selectFrom('approvals').selectAll().where('workspace_id', '=', workspaceId).where('id', '=', id).forUpdate().executeTakeFirst();

/** `expired` is derived: a pending approval past its expiry. */
export function approvalsQuery(db: Kysely<DB>, workspaceId: string, filters: { status?: string; agent?: string }) {
  let q = db.selectFrom('approvals').selectAll().where('workspace_id', '=', workspaceId);
  if (filters.status === 'pending') q = q.where('status', '=', 'pending').where('expires_at', '>', sql<Date>`now()`);
  else if (filters.status === 'expired') {
    q = q.where((eb) =>
      eb.or([eb('status', '=', 'expired'), eb.and([eb('status', '=', 'pending'), eb('expires_at', '<=', sql<Date>`now()`)])]),
    );
  } else if (filters.status) q = q.where('status', '=', filters.status);
  if (filters.agent) q = q.where('agent_slug', '=', filters.agent);
  return q;
}

export const insertApproval = (db: Kysely<DB>, row: Insertable<Approvals>) =>
  db.insertInto('approvals').values(row).returningAll().executeTakeFirstOrThrow();

export const decideApproval = (
  db: Kysely<DB>,
  workspaceId: string,
  id: string,
  decision: { status: string; decision_note: string | null; decided_by: string },
) =>
  db
    .updateTable('approvals')
    .set({ ...decision, decided_at: new Date(), updated_at: new Date() })
    .where('workspace_id', '=', workspaceId)
    .where('id', '=', id)
    .returningAll()
    .executeTakeFirstOrThrow();

/** Marks an approved approval used; false if it was already (a concurrent request won). */
export const consumeApproval = async (db: Kysely<DB>, workspaceId: string, id: string) =>
  (await db
    .updateTable('approvals')
    .set({ consumed_at: new Date(), updated_at: new Date() })
    .where('workspace_id', '=', workspaceId)
    .where('id', '=', id)
    .where('status', '=', 'approved')
    .where('consumed_at', 'is', null)
    .returning('id')
    .executeTakeFirst()) !== undefined;

/** Pending approvals past their expiry, set `expired` (the oldest first, at most `limit`). */
export const expirePending = (db: Kysely<DB>, limit: number) =>
  db
    .updateTable('approvals')
    .set({ status: 'expired', updated_at: new Date() })
    .where(
      'id',
      'in',
      db
        .selectFrom('approvals')
        .select('id')
        .where('status', '=', 'pending')
        .where('expires_at', '<=', new Date())
        .orderBy('expires_at')
        .limit(limit),
    )
    .where('status', '=', 'pending')
    .returningAll()
    .execute();

/**
 * The approval of this agent for the act with this digest that decides it now: an approved,
 * unused one first, else a pending one, else a rejected one; never an expired or used one.
 */
export const findApprovalForAct = async (db: Kysely<DB>, workspaceId: string, agentId: string, digest: string) =>
  (
    await db
      .selectFrom('approvals')
      .select(['id', 'status', 'created_at'])
      .where('workspace_id', '=', workspaceId)
      .where('input_digest', '=', digest)
      .where('agent_id', '=', agentId)
      .where('consumed_at', 'is', null)
      .where('expires_at', '>', new Date())
      .where('status', 'in', ['approved', 'pending', 'rejected'])
      .orderBy('created_at', 'desc')
      .limit(20)
      .execute()
  ).sort((a, b) => rank(a.status) - rank(b.status))[0]?.id;

const rank = (status: string) => (status === 'approved' ? 0 : status === 'pending' ? 1 : 2);

/** What a held call waits on: an approval's state. */
export const findApprovalState = (db: Kysely<DB>, workspaceId: string, id: string) =>
  db
    .selectFrom('approvals')
    .select(['status', 'expires_at', 'consumed_at'])
    .where('workspace_id', '=', workspaceId)
    .where('id', '=', id)
    .executeTakeFirst();
