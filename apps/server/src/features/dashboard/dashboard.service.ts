/**
 * What only the dashboard needs besides the v1 services: the charts' figures (aggregated in
 * SQL) and the egress check of an MCP server's URL when it is registered.
 */
import type { Kysely } from 'kysely';
import { iso } from '../../db/paginate.ts';
import type { DB } from '../../db/schema.ts';
import { EgressDenied, type EgressGuard } from '../../egress/guard.ts';
import { ApiError } from '../../shared/errors.ts';
import * as repo from './dashboard.repository.ts';

const HOUR_MS = 3_600_000;
const count = (value: string | number | null | undefined) => Number(value ?? 0);

export async function insights(db: Kysely<DB>, workspaceId: string, days: number, now = new Date()) {
  const from = new Date(now.getTime() - days * 24 * HOUR_MS);
  const unit: 'hour' | 'day' = days <= 2 ? 'hour' : 'day';
  const [buckets, actions, agents, waiting] = await Promise.all([
    repo.decisionBuckets(db, workspaceId, from, now, unit),
    repo.topBlocked(db, workspaceId, 'action', from, now),
    repo.topBlocked(db, workspaceId, 'agent', from, now),
    repo.approvalsWaiting(db, workspaceId, now),
  ]);
  return {
    from: iso(from),
    to: iso(now),
    bucket: unit,
    decisions: buckets.map((b) => ({
      start: iso(b.start),
      allowed: count(b.allowed),
      blocked: count(b.blocked),
      approval_required: count(b.approval_required),
    })),
    top_blocked_actions: actions.map((r) => ({ name: r.name, count: count(r.count) })),
    top_blocked_agents: agents.map((r) => ({ name: r.name, count: count(r.count) })),
    approvals_waiting: {
      count: count(waiting?.count),
      oldest_created_at: waiting?.oldest ? iso(waiting.oldest) : null,
      under_1h: count(waiting?.under_1h),
      from_1h_to_24h: count(waiting?.from_1h_to_24h),
      over_24h: count(waiting?.over_24h),
    },
  };
}

/**
 * The dashboard puts an MCP server's URL through the egress guard when it is saved, as webhook
 * endpoints are, so an admin learns at once what the runtime would refuse.
 */
export function checkMcpUrl(guard: Pick<EgressGuard, 'checkUrl'>, url: string): void {
  try {
    guard.checkUrl(url);
  } catch (error) {
    const message = (error as Error).message;
    const hint =
      error instanceof EgressDenied && !message.includes('WARDEN_EGRESS_ALLOWLIST')
        ? ' (unless the operator adds it to WARDEN_EGRESS_ALLOWLIST)'
        : '';
    throw new ApiError('invalid_request', `transport_url: ${message}${hint}`);
  }
}

export function dashboardService(db: Kysely<DB>, guard: Pick<EgressGuard, 'checkUrl'>) {
  return {
    insights: (workspaceId: string, days = 7) => insights(db, workspaceId, days),
    checkMcpUrl: (url: string) => checkMcpUrl(guard, url),
  };
}

export type DashboardService = ReturnType<typeof dashboardService>;
