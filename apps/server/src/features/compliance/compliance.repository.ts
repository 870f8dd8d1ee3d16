import { type Kysely, sql } from 'kysely';
import type { DB } from '../../db/schema.ts';

/** Every agent of the workspace, with what the controls look at. */
export const complianceAgents = (db: Kysely<DB>, workspaceId: string) =>
  db
    .selectFrom('agents')
    .select(['slug', 'name', 'status', 'environment', 'risk_level', 'api_key_hash'])
    .where('workspace_id', '=', workspaceId)
    .execute();

/** The rules of the workspace's enabled enforcing policies. */
export const enforcingPolicyRules = (db: Kysely<DB>, workspaceId: string) =>
  db
    .selectFrom('policies')
    .select(['rules'])
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
