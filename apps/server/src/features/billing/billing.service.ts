/** A workspace's billing plan, as the dashboard and the CLI change it; every change fires `billing.updated`. */
import type { dashboard } from '@warden/contract';
import type { Kysely } from 'kysely';
import type { DB } from '../../db/schema.ts';
import { inTransaction } from '../../db/transaction.ts';
import type { Actor } from '../../shared/context.ts';
import { ApiError, notFound } from '../../shared/errors.ts';
import { recordChange } from '../audit/audit.service.ts';
import { recordEvent } from '../events/outbox.repository.ts';
import * as repo from './billing.repository.ts';

/** The plans of the dashboard contract's `Plan` enum. */
export const PLANS: readonly dashboard.Plan[] = ['free', 'team', 'business', 'enterprise'];

export async function getBilling(db: Kysely<DB>, workspaceId: string) {
  const row = await repo.findBilling(db, workspaceId);
  return { plan: row.plan as 'free', billing_status: row.billing_status };
}

/**
 * Changes the workspace's plan; fires `billing.updated` and writes the `billing.plan_changed`
 * audit event in the same transaction. Setting the plan a workspace already has changes
 * nothing, and records nothing.
 */
export async function setPlan(db: Kysely<DB>, workspaceId: string, plan: string, actor: Actor) {
  if (!PLANS.includes(plan as dashboard.Plan)) throw new ApiError('invalid_request', `plan: '${plan}' is not one of ${PLANS.join(', ')}`);
  return inTransaction(db, async (trx) => {
    const before = await repo.lockBilling(trx, workspaceId);
    if (!before) throw notFound('workspace', workspaceId);
    if (before.plan !== plan) {
      await recordChange(trx, workspaceId, actor, {
        action: 'billing.plan_changed',
        resource: workspaceId,
        context: { plan, previous_plan: before.plan },
      });
    }
    await repo.updatePlan(trx, workspaceId, plan);
    const billing = { plan, previous_plan: before.plan, billing_status: before.billing_status };
    if (before.plan !== plan) await recordEvent(trx, workspaceId, 'billing.updated', billing);
    return billing;
  });
}

export function billingService(db: Kysely<DB>) {
  return {
    get: (workspaceId: string) => getBilling(db, workspaceId),
    setPlan: (workspaceId: string, plan: string, actor: Actor) => setPlan(db, workspaceId, plan, actor),
  };
}

export type BillingService = ReturnType<typeof billingService>;
