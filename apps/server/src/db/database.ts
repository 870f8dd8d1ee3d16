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
  /** Runs a script of several statements (migrations). */
  exec(script: string): Promise<void>;
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
    // An idle client that loses its connection must not crash the process.
    pool.on('error', () => {});
    return {
      db: new Kysely<DB>({ dialect: new PostgresDialect({ pool }) }),
      kind: 'postgres',
      pool,
      exec: async (script) => {
        await pool.query(script);
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
    exec: async (script) => {
      await pglite.exec(script);
    },
    close: async () => {
      await db.destroy();
      release();
    },
  };
}
