/** Throw-away PostgreSQL databases for tests and tools (a server per test file, child servers, the soak). */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { type Database, openDatabase } from '../../apps/server/src/db/database.ts';
import { migrate } from '../../apps/server/src/db/migrate.ts';

/**
 * Throws in a file of vitest's `no-database` project (vitest.config.ts): the harness calls it
 * before it opens a database or starts a server, so a file listed there by mistake fails at
 * once instead of being skipped by CI's PostgreSQL run.
 */
export function assertDatabaseAllowed(): void {
  if (process.env.WARDEN_TEST_NO_DATABASE === 'true')
    throw new Error('this test file opens a database: move it out of NO_DATABASE in vitest.config.ts');
}

/** A fresh database on the PostgreSQL server of `baseUrl`; `drop` removes it (forcing out connections). */
export async function freshDatabase(
  baseUrl: string,
  prefix = 'warden_test',
): Promise<{ url: string; name: string; drop: () => Promise<void> }> {
  assertDatabaseAllowed();
  const name = `${prefix}_${Date.now()}_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: baseUrl });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  await admin.end();
  const url = new URL(baseUrl);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    name,
    drop: async () => {
      const client = new pg.Client({ connectionString: baseUrl });
      await client.connect();
      await client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await client.end();
    },
  };
}

/**
 * A migrated database of the server's own for one test file: embedded in memory, or a fresh
 * one on the PostgreSQL server of DATABASE_URL when it is set (`url`). `close` drops it.
 */
export async function migratedDatabase(): Promise<{ database: Database; url?: string; close: () => Promise<void> }> {
  const fresh = process.env.DATABASE_URL ? await freshDatabase(process.env.DATABASE_URL) : undefined;
  const database = await openDatabase({ dataDir: 'memory://', databaseUrl: fresh?.url });
  await migrate(database);
  return {
    database,
    url: fresh?.url,
    close: async () => {
      await database.close();
      await fresh?.drop();
    },
  };
}
