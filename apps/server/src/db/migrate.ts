/**
 * SQL-first migrations: db/migrations/NNNN_name.sql, applied once each in name order, each in
 * its own transaction, recorded in schema_migrations. An advisory lock makes concurrent
 * starts of several server processes (and the CLI) on one database apply each migration once.
 */
import { readdirSync, readFileSync } from 'node:fs';
import type { Database } from './database.ts';

const MIGRATIONS_DIR = new URL('./migrations/', import.meta.url);
const LOCK_ID = 7_140_001; // arbitrary, fixed: Warden's migration lock

/** `directory` (a file: URL ending in `/`) is for the schema generator's tests: a copy with a migration more. */
export async function migrate(database: Database, directory: URL = MIGRATIONS_DIR): Promise<string[]> {
  const files = readdirSync(directory)
    .filter((name) => name.endsWith('.sql'))
    .sort();
  return database.session(async (exec) => {
    await exec(`SELECT pg_advisory_lock(${LOCK_ID})`);
    try {
      await exec('CREATE TABLE IF NOT EXISTS schema_migrations (name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())');
      const done = new Set((await exec('SELECT name FROM schema_migrations')).map((row) => String(row.name)));
      const applied: string[] = [];
      for (const file of files) {
        const name = file.replace(/\.sql$/, '');
        if (done.has(name)) continue;
        const script = readFileSync(new URL(file, directory), 'utf8');
        await exec(`BEGIN;\n${script}\n;INSERT INTO schema_migrations (name) VALUES ('${name}');\nCOMMIT;`);
        applied.push(name);
      }
      return applied;
    } finally {
      await exec(`SELECT pg_advisory_unlock(${LOCK_ID})`);
    }
  });
}
