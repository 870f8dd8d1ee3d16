/**
 * The database: Kysely over either an embedded PGlite (data under WARDEN_DATA_DIR, default
 * ./.data) or PostgreSQL through a `pg` pool (when DATABASE_URL is set). Both are real
 * Postgres, so the same SQL and migrations serve both.
 */
import { chmodSync, mkdirSync } from 'node:fs';
import { PGlite } from '@electric-sql/pglite';
import { CompiledQuery, Kysely, PostgresDialect } from 'kysely';
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
  /**
   * Subscribes to NOTIFY on `channel` (a fixed identifier). `state(false)` says notifications
   * may be missed from now on (the listening connection was lost; it reconnects by itself with
   * backoff), `state(true)` that they are delivered again. Resolves to a function that stops.
   */
  listen(channel: string, handlers: NotificationHandlers): Promise<() => Promise<void>>;
  /**
   * Runs one fixed statement of the hot path outside any transaction. On PostgreSQL it is a
   * named prepared statement: each pooled connection parses and plans it once, not on every
   * execution (this needs session-level pooling if a pooler sits in between). On PGlite it goes
   * through Kysely, which serialises the use of its one session. Resolves to its rows.
   */
  run(name: string, text: string, values: unknown[]): Promise<Record<string, unknown>[]>;
  close(): Promise<void>;
}

export interface NotificationHandlers {
  notify(payload: string): void;
  state(listening: boolean): void;
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

/** The files of a fresh in-memory database, as the first one in this process had them after initdb. */
let initialised: Promise<Blob> | undefined;

/**
 * A throw-away in-memory PGlite (tests, the schema generator). The first in a process runs
 * initdb; the others start from a copy of its files, 0.55 s of CPU instead of 2.3 s each
 * (docs/decisions/0016-ci-time.md).
 */
async function inMemoryPglite(): Promise<PGlite> {
  // a copy that could not be made is no copy: this one runs initdb itself
  const files = await initialised?.catch(() => undefined);
  if (files) return PGlite.create({ loadDataDir: files });
  const pglite = await PGlite.create();
  const dump = pglite.dumpDataDir('none').then((files) => files as Blob);
  initialised = dump;
  await dump.catch(() => {
    initialised = undefined; // the next one runs initdb itself
  });
  return pglite;
}

export async function openDatabase(options: DatabaseOptions): Promise<Database> {
  if (options.databaseUrl) {
    // connectionTimeoutMillis bounds the wait for a connection (a new one, or a free one of a
    // busy pool): while the database is unreachable a request fails fast (503) instead of
    // hanging on the operating system's TCP timeout.
    const pool = new pg.Pool({ connectionString: options.databaseUrl, max: options.poolSize ?? 10, connectionTimeoutMillis: 5_000 });
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
      listen: postgresListener(options.databaseUrl),
      run: async (name, text, values) => (await pool.query({ name, text, values })).rows,
      close: () => pool.end(),
    };
  }
  const inMemory = options.dataDir.startsWith('memory://');
  const release = inMemory ? () => {} : acquireDataDirLock(options.dataDir);
  const pgdata = inMemory ? undefined : `${options.dataDir}/pgdata`;
  if (pgdata) {
    // PGlite would create it 0755 (and its files 0644): owner-only, like the data directory.
    mkdirSync(pgdata, { recursive: true, mode: 0o700 });
    chmodSync(pgdata, 0o700);
  }
  const pglite = inMemory ? await inMemoryPglite() : await PGlite.create(pgdata);
  const db = new Kysely<DB>({ dialect: new PGliteDialect(pglite) });
  return {
    db,
    kind: 'pglite',
    // PGlite is one session; the dialect serialises Kysely's use of it.
    session: (work) => work(async (script) => ((await pglite.exec(script)).at(-1)?.rows ?? []) as Record<string, unknown>[]),
    run: async (_name, text, values) => (await db.executeQuery(CompiledQuery.raw(text, values))).rows as Record<string, unknown>[],
    // One in-process instance: its notifications cannot be lost while it is open.
    listen: async (channel, handlers) => {
      const stop = await pglite.listen(channel, (payload) => handlers.notify(payload));
      handlers.state(true);
      return async () => {
        handlers.state(false);
        await stop();
      };
    },
    close: async () => {
      await db.destroy();
      // Kysely closes the instance only if its driver ever started: one only migrated would stay open
      if (!pglite.closed) await pglite.close();
      release();
    },
  };
}

/**
 * LISTEN on one connection of its own for every channel subscribed (outside the pool, which
 * would recycle it). A lost connection is reported to every subscriber and replaced: retries
 * back off from 0.5 s to 5 s; the connection ends when the last subscription stops.
 */
function postgresListener(connectionString: string): Database['listen'] {
  const channels = new Map<string, NotificationHandlers>();
  let current: pg.Client | undefined;
  let connecting: Promise<void> | undefined;
  let retry: NodeJS.Timeout | undefined;
  let delayMs = 500;

  const connect = async () => {
    if (channels.size === 0) return;
    const client = new pg.Client({
      connectionString,
      keepAlive: true,
      connectionTimeoutMillis: 5_000,
      application_name: 'warden-listener',
    });
    let lost = false;
    const onLost = () => {
      if (lost) return;
      lost = true;
      if (current === client) current = undefined;
      for (const handlers of channels.values()) handlers.state(false);
      void client.end().catch(() => {});
      if (channels.size > 0) {
        retry = setTimeout(() => {
          connecting = connect();
        }, delayMs);
        retry.unref();
        delayMs = Math.min(delayMs * 2, 5_000);
      }
    };
    client.on('error', onLost);
    client.on('end', onLost);
    client.on('notification', (message) => channels.get(message.channel)?.notify(message.payload ?? ''));
    try {
      await client.connect();
      for (const channel of channels.keys()) await client.query(`LISTEN ${channel}`);
      if (channels.size === 0 || lost) return void client.end().catch(() => {});
      current = client;
      delayMs = 500;
      for (const handlers of channels.values()) handlers.state(true);
    } catch {
      onLost();
    }
  };

  return async (channel, handlers) => {
    channels.set(channel, handlers);
    await connecting;
    if (current) {
      // already listening for other channels: this one joins the same connection
      try {
        await current.query(`LISTEN ${channel}`);
        handlers.state(true);
      } catch {
        // the connection is being lost: the reconnect listens on every channel
      }
    } else if (!retry || channels.size === 1) {
      connecting = connect();
      await connecting;
    }
    return async () => {
      if (channels.get(channel) !== handlers) return;
      channels.delete(channel);
      handlers.state(false);
      if (channels.size > 0) {
        await current?.query(`UNLISTEN ${channel}`).catch(() => {});
        return;
      }
      clearTimeout(retry);
      const client = current;
      current = undefined;
      await client?.end().catch(() => {});
    };
  };
}
