import { type Kysely, sql } from 'kysely';
import type { DB } from '../../db/schema.ts';

/**
 * A recorded decision as the replay reads it: only what deciding again needs, as text. The
 * timestamp stays PostgreSQL's text (parsed only for the few decisions an answer lists, and
 * handed back as the next page's cursor); `input` and `execution` are the JSON text of the
 * context's parts (parsed once per distinct act); `recorded` is the result with an approval
 * that allowed the act counted as `approval_required`.
 */
export interface RecordedDecision {
  id: string;
  at: string;
  source: string;
  agent: string | null;
  action: string;
  resource: string | null;
  tool: string | null;
  environment: string | null;
  recorded: 'allowed' | 'blocked' | 'approval_required';
  input: string | null;
  execution: string | null;
}

/** Where the previous page ended (its last decision), newest first. */
export interface DecisionCursor {
  at: string;
  id: string;
}

/**
 * One page of the workspace's recorded decisions, newest first, after `cursor`: the audit
 * events of evaluations, executions and MCP operations, without the execution outcomes (they
 * carry the `decision_event_id` of their decision). Keyset on the primary key
 * (workspace_id, event_timestamp, id), scanned backwards.
 */
export async function decisionPage(
  db: Kysely<DB>,
  workspaceId: string,
  size: number,
  cursor: DecisionCursor | null,
): Promise<RecordedDecision[]> {
  const after = cursor ? sql`AND (event_timestamp, id) < (${cursor.at}::timestamptz, ${cursor.id}::uuid)` : sql``;
  const { rows } = await sql<RecordedDecision>`
    SELECT id, event_timestamp::text AS at, source, agent, action, resource, tool, environment,
      CASE WHEN result = 'allowed' AND approval_id IS NOT NULL THEN 'approval_required' ELSE result END AS recorded,
      (context -> 'input')::text AS input, (context -> 'execution')::text AS execution
    FROM audit_events
    WHERE workspace_id = ${workspaceId} ${after}
      AND source IN ('evaluation', 'execution', 'mcp')
      AND result IN ('allowed', 'blocked', 'approval_required')
      AND NOT (context ? 'decision_event_id')
    ORDER BY event_timestamp DESC, id DESC
    LIMIT ${size}`.execute(db);
  return rows;
}

export const workspaceAgents = (db: Kysely<DB>, workspaceId: string) =>
  db
    .selectFrom('agents')
    .select(['id', 'slug', 'name', 'status', 'environment', 'risk_level', 'provider', 'tags', 'allowed_tools', 'allowed_resources'])
    .where('workspace_id', '=', workspaceId)
    .execute();
