/** The dashboard's own queries: the charts' figures, aggregated by the database. */
import { type Kysely, sql } from 'kysely';
import type { DB } from '../../db/schema.ts';

/** Decision events: not configuration changes or approvals' own events, not the outcome events of executions (those name their decision). */
const DECISIONS = sql`source NOT IN ('configuration', 'approval') AND context->>'decision_event_id' IS NULL`;

export interface DecisionBucketRow {
  start: Date | string;
  allowed: string | number;
  blocked: string | number;
  approval_required: string | number;
}

/** Every bucket from `from`'s to `to`'s (UTC), with the decisions of each by result, zeros included. */
export async function decisionBuckets(db: Kysely<DB>, workspaceId: string, from: Date, to: Date, unit: 'hour' | 'day') {
  const step = unit === 'hour' ? sql`interval '1 hour'` : sql`interval '24 hours'`;
  const { rows } = await sql<DecisionBucketRow>`
    WITH counts AS (
      SELECT date_trunc(${unit}, event_timestamp, 'UTC') AS start, result, count(*) AS n
      FROM audit_events
      WHERE workspace_id = ${workspaceId} AND event_timestamp >= ${from} AND event_timestamp <= ${to} AND ${DECISIONS}
      GROUP BY 1, 2
    )
    SELECT s.start,
      coalesce(sum(c.n) FILTER (WHERE c.result = 'allowed'), 0) AS allowed,
      coalesce(sum(c.n) FILTER (WHERE c.result = 'blocked'), 0) AS blocked,
      coalesce(sum(c.n) FILTER (WHERE c.result = 'approval_required'), 0) AS approval_required
    FROM generate_series(date_trunc(${unit}, ${from}::timestamptz, 'UTC'), ${to}::timestamptz, ${step}) AS s (start)
    LEFT JOIN counts c ON c.start = s.start
    GROUP BY s.start
    ORDER BY s.start`.execute(db);
  return rows;
}

/**
 * What a chart calls a decision's act: an MCP act by its server and its tool, prompt, resource or
 * method (`github → create_issue`: every gateway call is `mcp.call`), anything else by its action.
 */
const ACT_NAME = sql`CASE WHEN context->'execution'->>'server' IS NOT NULL
  THEN (context->'execution'->>'server') || ' → ' || coalesce(context->'execution'->>'tool', context->'execution'->>'prompt',
    context->'execution'->>'uri', context->'execution'->>'method', action)
  ELSE action END`;

/** The ten acts (see ACT_NAME) or agents with the most blocked decisions since `from`, most first. */
export async function topBlocked(db: Kysely<DB>, workspaceId: string, column: 'action' | 'agent', from: Date, to: Date) {
  const name = column === 'action' ? ACT_NAME : sql.ref('agent');
  const { rows } = await sql<{ name: string; count: string | number }>`
    SELECT ${name} AS name, count(*) AS count
    FROM audit_events
    WHERE workspace_id = ${workspaceId} AND event_timestamp >= ${from} AND event_timestamp <= ${to}
      AND result = 'blocked' AND ${sql.ref(column)} IS NOT NULL AND ${DECISIONS}
    GROUP BY 1
    ORDER BY 2 DESC, 1
    LIMIT 10`.execute(db);
  return rows;
}

/** Pending approvals that have not expired at `now`: how many, the oldest, and by how long they have waited. */
export async function approvalsWaiting(db: Kysely<DB>, workspaceId: string, now: Date) {
  const { rows } = await sql<{
    count: string | number;
    oldest: Date | string | null;
    under_1h: string | number;
    from_1h_to_24h: string | number;
    over_24h: string | number;
  }>`
    SELECT count(*) AS count, min(created_at) AS oldest,
      count(*) FILTER (WHERE created_at > ${now}::timestamptz - interval '1 hour') AS under_1h,
      count(*) FILTER (WHERE created_at <= ${now}::timestamptz - interval '1 hour'
        AND created_at > ${now}::timestamptz - interval '24 hours') AS from_1h_to_24h,
      count(*) FILTER (WHERE created_at <= ${now}::timestamptz - interval '24 hours') AS over_24h
    FROM approvals
    WHERE workspace_id = ${workspaceId} AND status = 'pending' AND expires_at > ${now}`.execute(db);
  return rows[0];
}
