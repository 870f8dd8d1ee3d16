/** Throw-away PostgreSQL databases for tests and tools (a server per test file, child servers, the soak). */
import { randomBytes } from 'node:crypto';
import pg from 'pg';

/** A fresh database on the PostgreSQL server of `baseUrl`; `drop` removes it (forcing out connections). */
export async function freshDatabase(
  baseUrl: string,
  prefix = 'warden_test',
): Promise<{ url: string; name: string; drop: () => Promise<void> }> {
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
