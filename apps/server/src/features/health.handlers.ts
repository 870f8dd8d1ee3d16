import { sql } from 'kysely';
import type { HandlerDeps } from '../handlers.ts';
import type { Handlers } from '../http/router.ts';
import { loadSpec } from '../spec.ts';

const VERSION = loadSpec().info.version;

export const healthHandlers = ({ database: { db } }: HandlerDeps) =>
  ({
    getHealth: async () => {
      const database = await sql`SELECT 1`
        .execute(db)
        .then(() => 'ok' as const)
        .catch(() => 'unreachable' as const);
      const data = {
        status: database === 'ok' ? ('ok' as const) : ('degraded' as const),
        version: VERSION,
        database,
        time: new Date().toISOString(),
      };
      return database === 'ok' ? { status: 200, body: { data } } : { status: 503, body: { data } };
    },
  }) satisfies Partial<Handlers>;
