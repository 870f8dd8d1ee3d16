import type { Kysely } from 'kysely';
import type { DB } from '../../db/schema.ts';

export const findBilling = (db: Kysely<DB>, workspaceId: string) =>
  db.selectFrom('workspaces').select(['plan', 'billing_status']).where('id', '=', workspaceId).executeTakeFirstOrThrow();

/** The workspace's billing row, locked for the rest of the transaction. */
export const lockBilling = (trx: Kysely<DB>, workspaceId: string) =>
  trx.selectFrom('workspaces').select(['plan', 'billing_status']).where('id', '=', workspaceId).forUpdate().executeTakeFirst();

export const updatePlan = (db: Kysely<DB>, workspaceId: string, plan: string) =>
  db.updateTable('workspaces').set({ plan }).where('id', '=', workspaceId).execute();
