/** The service's health: up, and whether its database answers. */
import type { Health } from '@warden/contract';
import type { Kysely } from 'kysely';
import type { DB } from '../../db/schema.ts';
import { loadSpec } from '../../spec.ts';
import { pingDatabase } from './health.repository.ts';

const VERSION = loadSpec().info.version;

export function healthService(db: Kysely<DB>) {
  return {
    check: async (): Promise<Health['data']> => {
      const database = await pingDatabase(db)
        .then(() => 'ok' as const)
        .catch(() => 'unreachable' as const);
      return {
        status: database === 'ok' ? ('ok' as const) : ('degraded' as const),
        version: VERSION,
        database,
        time: new Date().toISOString(),
      };
    },
  };
}

export type HealthService = ReturnType<typeof healthService>;
