/**
 * SQL-first migrations: db/migrations/NNNN_name.sql, applied once each in name order, each in
 * its own transaction, recorded in schema_migrations. An advisory lock makes concurrent
 * starts of several server processes on one database apply each migration once.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { sql } from 'kysely';
import type { Database } from './database.ts';

const MIGRATIONS_DIR = new URL('./migrations/', import.meta.url);
const LOCK_ID = 7_140_001; // arbitrary, fixed: Warden's migration lock

export async function migrate(database: Database): Promise<string[]> {
  const files = readdirSync(MIGRATIONS_DIR)
    .filter((name) => name.endsWith('.sql'))
    .sort();
  const applied: string[] = [];
  await database.db.connection().execute(async (conn) => {
    await sql`SELECT pg_advisory_lock(${LOCK_ID})`.execute(conn);
    try {
      await sql`CREATE TABLE IF NOT EXISTS schema_migrations (name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`.execute(
        conn,
      );
      const done = new Set((await conn.selectFrom('schema_migrations').select('name').execute()).map((row) => row.name));
      for (const file of files) {
        const name = file.replace(/\.sql$/, '');
        if (done.has(name)) continue;
        const script = readFileSync(new URL(file, MIGRATIONS_DIR), 'utf8');
        // One multi-statement script per migration, inside its own transaction. `exec` runs it
        // as a simple query (extended-protocol queries take one statement only).
        await database.exec(`BEGIN;\n${script}\n;INSERT INTO schema_migrations (name) VALUES ('${name}');\nCOMMIT;`);
        applied.push(name);
      }
    } finally {
      await sql`SELECT pg_advisory_unlock(${LOCK_ID})`.execute(conn);
    }
  });
  return applied;
}
