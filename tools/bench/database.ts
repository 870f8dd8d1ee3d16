/** The run's own database on the given PostgreSQL server: created fresh, dropped at the end. */
import pg from 'pg';

export interface BenchDatabase {
  name: string;
  url: string;
  /** A small pool on the bench database, for counts and server facts. */
  pool: pg.Pool;
  drop(): Promise<void>;
}

/** `wanted`: the database name (lower-case letters, digits, underscores); default `warden_bench_<time>_<pid>`. */
export async function createBenchDatabase(baseUrl: string, wanted?: string): Promise<BenchDatabase> {
  const now = new Date();
  const stamp = now.toISOString().replace(/[-:T]/g, '').replace(/\..*$/, '');
  const name = wanted ?? `warden_bench_${stamp}_${process.pid}`;
  if (!/^[a-z_][a-z0-9_]{0,62}$/.test(name)) throw new Error(`not a database name for the benchmark: ${name}`);
  const admin = new pg.Client({ connectionString: baseUrl });
  try {
    await admin.connect();
  } catch (error) {
    throw new Error(`cannot connect to DATABASE_URL (${redact(baseUrl)}): ${(error as Error).message}`);
  }
  try {
    await admin.query(`CREATE DATABASE ${name}`);
  } finally {
    await admin.end();
  }
  const url = new URL(baseUrl);
  url.pathname = `/${name}`;
  const pool = new pg.Pool({ connectionString: url.toString(), max: 2, application_name: 'bench-orchestrator' });
  pool.on('error', () => {});
  let dropped = false;
  return {
    name,
    url: url.toString(),
    pool,
    drop: async () => {
      if (dropped) return;
      dropped = true;
      await pool.end().catch(() => undefined);
      const client = new pg.Client({ connectionString: baseUrl });
      await client.connect();
      try {
        await client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      } finally {
        await client.end();
      }
    },
  };
}

export async function serverFacts(pool: pg.Pool): Promise<Record<string, string>> {
  const facts: Record<string, string> = {};
  const { rows } = await pool.query('SELECT version() AS v');
  facts.version = String(rows[0].v).split(' on ')[0] ?? '';
  for (const setting of ['synchronous_commit', 'fsync', 'wal_sync_method', 'shared_buffers', 'max_connections']) {
    const r = await pool.query(`SHOW ${setting}`);
    facts[setting] = String(Object.values(r.rows[0])[0]);
  }
  return facts;
}

/** PostgreSQL backends of this database with the given application_name. */
export async function backendPids(pool: pg.Pool, applicationName: string): Promise<number[]> {
  const { rows } = await pool.query('SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1', [
    applicationName,
  ]);
  return rows.map((row) => Number(row.pid));
}

export function redact(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = '***';
    return parsed.toString();
  } catch {
    return '<invalid url>';
  }
}
