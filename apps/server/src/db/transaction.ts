/**
 * Units of work. A service decides what must be atomic (a change with its outbox event, a
 * decision with its approval's change, a sealed batch with its chain head) and that often
 * spans the repositories of several features, so services open transactions, here, and pass
 * the handle to repository functions; the queries themselves stay in the repositories, and no
 * repository function opens a transaction of its own.
 */
import type { IsolationLevel, Kysely } from 'kysely';
import type { DB } from './schema.ts';

export function inTransaction<T>(
  db: Kysely<DB>,
  work: (trx: Kysely<DB>) => Promise<T>,
  options: { isolation?: IsolationLevel } = {},
): Promise<T> {
  const transaction = db.transaction();
  return (options.isolation ? transaction.setIsolationLevel(options.isolation) : transaction).execute(work);
}
