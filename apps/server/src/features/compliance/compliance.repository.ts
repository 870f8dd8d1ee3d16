import { type Kysely, sql } from 'kysely';
import type { DB } from '../../db/schema.ts';

/** Every agent of the workspace, with what the controls look at. */
export const complianceAgents = (db: Kysely<DB>, workspaceId: string) =>
  db
    .selectFrom('agents')
    .select(['id', 'slug', 'name', 'status', 'environment', 'risk_level', 'api_key_hash'])
    .where('workspace_id', '=', workspaceId)
    .execute();

/** The rules of the workspace's enabled enforcing policies. */
export const enforcingPolicyRules = (db: Kysely<DB>, workspaceId: string) =>
  db
    .selectFrom('policies')
    .select(['name', 'priority', 'rules'])
    .where('workspace_id', '=', workspaceId)
    .where('enabled', '=', true)
    .where('mode', '=', 'enforce')
    .execute();

/** Decisions of the last 24 hours (manual records, configuration changes and approvals' own events aside): how many, and how many blocked. */
export const recentDecisionCounts = (db: Kysely<DB>, workspaceId: string) =>
  db
    .selectFrom('audit_events')
    .select((eb) => [eb.fn.countAll<number>().as('total'), eb.fn.count<number>(sql`CASE WHEN result = 'blocked' THEN 1 END`).as('blocked')])
    .where('workspace_id', '=', workspaceId)
    .where('source', 'not in', ['manual', 'configuration', 'approval'])
    .where('event_timestamp', '>', sql<Date>`now() - interval '24 hours'`)
    .executeTakeFirstOrThrow();

/** How far back compliance judges what agents did. */
export const RECENT_ACTS_DAYS = 7;
/** The most distinct acts read per workspace (the most frequent first): a bounded read, whatever the traffic. */
const MAX_RECENT_ACTS = 5_000;

/**
 * The distinct acts agents were decided on in the last RECENT_ACTS_DAYS days (evaluations,
 * executions and MCP operations; an execution's outcome event is not a second act), each with
 * how often it was decided and what policy matches of its execution.
 */
export const recentActs = (db: Kysely<DB>, workspaceId: string) =>
  db
    .selectFrom('audit_events')
    .select((eb) => [
      'agent_id',
      'action',
      'resource',
      'tool',
      'environment',
      sql<string | null>`context->'execution'->>'mode'`.as('mode'),
      sql<string | null>`context->'execution'->>'server'`.as('server'),
      sql<string | null>`context->'execution'->>'method'`.as('method'),
      sql<string | null>`context->'execution'->>'host'`.as('host'),
      sql<string | null>`context->'execution'->>'path'`.as('path'),
      sql<string | null>`context->'execution'->>'url'`.as('url'),
      eb.fn.countAll<string>().as('count'),
    ])
    .where('workspace_id', '=', workspaceId)
    .where('source', 'in', ['evaluation', 'execution', 'mcp'])
    .where('agent_id', 'is not', null)
    .where('event_timestamp', '>', sql<Date>`now() - make_interval(days => ${RECENT_ACTS_DAYS})`)
    .where(sql<boolean>`NOT (context ? 'decision_event_id')`)
    .groupBy(['agent_id', 'action', 'resource', 'tool', 'environment', 'mode', 'server', 'method', 'host', 'path', 'url'])
    .orderBy('count', 'desc')
    .limit(MAX_RECENT_ACTS)
    .execute();
