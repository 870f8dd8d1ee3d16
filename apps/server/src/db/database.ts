/**
 * The database: Kysely over either an embedded PGlite (data under WARDEN_DATA_DIR, default
 * ./.data) or PostgreSQL through a `pg` pool (when DATABASE_URL is set). Both are real
 * Postgres, so the same SQL and migrations serve both.
 */
import { mkdirSync } from 'node:fs';
import { PGlite } from '@electric-sql/pglite';
import { Kysely, PostgresDialect } from 'kysely';
import { PGliteDialect } from 'kysely-pglite-dialect';
import pg from 'pg';
import { acquireDataDirLock } from './data-dir-lock.ts';
import type { DB } from './schema.ts';

export interface Database {
  db: Kysely<DB>;
  kind: 'pglite' | 'postgres';
  /** The pg pool, on PostgreSQL (shared stores such as rate limits use it directly). */
  pool?: pg.Pool;
  /**
   * Runs `work` on one dedicated session, whose `exec` runs scripts of several statements
   * (simple query protocol) and returns the rows of the last one. Migrations use it: the
   * advisory lock and the scripts must share a session, whatever the pool size.
   */
  session<T>(work: (exec: (script: string) => Promise<Record<string, unknown>[]>) => Promise<T>): Promise<T>;
  close(): Promise<void>;
}

export interface DatabaseOptions {
  databaseUrl?: string;
  /** Embedded data directory; `memory://` for a throw-away in-memory database (tests). */
  dataDir: string;
  poolSize?: number;
}

// timestamptz and bigint arrive as strings from pg unless told otherwise; keep ISO strings
// out of the way by parsing int8 (counts) as numbers: no count here nears 2^53.
pg.types.setTypeParser(pg.types.builtins.INT8, (value) => Number(value));

export async function openDatabase(options: DatabaseOptions): Promise<Database> {
  if (options.databaseUrl) {
    const pool = new pg.Pool({ connectionString: options.databaseUrl, max: options.poolSize ?? 10 });
    // A client that loses its connection (idle or checked out) must not crash the process:
    // the query in flight fails with the error and the pool replaces the client.
    pool.on('error', () => {});
    pool.on('connect', (client) => client.on('error', () => {}));
    return {
      db: new Kysely<DB>({ dialect: new PostgresDialect({ pool }) }),
      kind: 'postgres',
      pool,
      session: async (work) => {
        const client = await pool.connect();
        try {
          return await work(async (script) => {
            const result = (await client.query(script)) as pg.QueryResult | pg.QueryResult[];
            return (Array.isArray(result) ? result.at(-1)?.rows : result.rows) ?? [];
          });
        } finally {
          client.release();
        }
      },
      close: () => pool.end(),
    };
  }
  const inMemory = options.dataDir.startsWith('memory://');
  const release = inMemory ? () => {} : acquireDataDirLock(options.dataDir);
  if (!inMemory) mkdirSync(options.dataDir, { recursive: true });
  const pglite = await PGlite.create(inMemory ? undefined : `${options.dataDir}/pgdata`);
  const db = new Kysely<DB>({ dialect: new PGliteDialect(pglite) });
  return {
    db,
    kind: 'pglite',
    // PGlite is one session; the dialect serialises Kysely's use of it.
    session: (work) => work(async (script) => ((await pglite.exec(script)).at(-1)?.rows ?? []) as Record<string, unknown>[]),
    close: async () => {
      await db.destroy();
      release();
    },
  };
}
