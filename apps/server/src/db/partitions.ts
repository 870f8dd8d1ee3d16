/**
 * Audit events are partitioned by month. Partitions for the current and the next month are
 * created at start and daily; retention is `DROP TABLE audit_events_yYYYYmMM` (never DELETE).
 * The default partition only catches events outside the created months.
 */
import { sql } from 'kysely';
import type { Database } from './database.ts';

const monthStart = (year: number, month: number) => new Date(Date.UTC(year, month, 1));

export async function ensureAuditPartitions(database: Database, now = new Date()): Promise<string[]> {
  const created: string[] = [];
  for (const offset of [0, 1]) {
    const from = monthStart(now.getUTCFullYear(), now.getUTCMonth() + offset);
    const to = monthStart(from.getUTCFullYear(), from.getUTCMonth() + 1);
    const name = `audit_events_y${from.getUTCFullYear()}m${String(from.getUTCMonth() + 1).padStart(2, '0')}`;
    try {
      await sql
        .raw(
          `CREATE TABLE IF NOT EXISTS ${name} PARTITION OF audit_events FOR VALUES FROM ('${from.toISOString()}') TO ('${to.toISOString()}')`,
        )
        .execute(database.db);
      // Row triggers reach partitions by inheritance; statement-level TRUNCATE triggers do not.
      await sql
        .raw(
          `CREATE OR REPLACE TRIGGER audit_events_no_truncate BEFORE TRUNCATE ON ${name} FOR EACH STATEMENT EXECUTE FUNCTION refuse_audit_change()`,
        )
        .execute(database.db);
      created.push(name);
    } catch {
      // The default partition already holds rows of that month (the server was down over a
      // month boundary): they stay there, still immutable and queryable.
    }
  }
  return created;
}
