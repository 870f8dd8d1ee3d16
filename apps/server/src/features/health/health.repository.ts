import { type Kysely, sql } from 'kysely';
import type { DB } from '../../db/schema.ts';

/** One round trip to the database; rejects if it cannot be made. */
export const pingDatabase = (db: Kysely<DB>) => sql`SELECT 1`.execute(db);
