/**
 * Sealing rounds in a worker thread with its own PostgreSQL connection (used on PostgreSQL;
 * the embedded database has one in-process session, so it seals inline).
 *
 * A round reads its events back, hashes them and writes their seals: on the request thread its
 * parsing, hashing and garbage delayed every request that arrived meanwhile, however often it
 * yielded. In a thread (and a heap) of its own, the operating system shares the cores instead
 * (docs/decisions/0003-audit-sealing.md; the thread itself: db/database-thread.ts).
 */
import { DatabaseThread } from '../../db/database-thread.ts';
import type { Logger } from '../../logger.ts';
import { siblingModule } from '../../shared/thread-boot.ts';
import type { SealingRounds } from './tree.ts';

/** What a round on the thread answers. Errors cross threads as Errors (name, message and stack: what the logger keeps of them). */
export interface RoundReply {
  again: string[];
  failures: { workspaceId: string; cause: Error }[];
}

const ENTRY = siblingModule('sealer-thread.worker', import.meta.url);

export class SealerThread implements SealingRounds {
  private readonly thread: DatabaseThread<readonly string[], RoundReply>;

  constructor(
    databaseUrl: string,
    private readonly logger: Logger,
    /** Where rounds run if the thread cannot start at all (sealing goes on, on this thread). */
    fallback: SealingRounds,
    entry = ENTRY,
  ) {
    this.thread = new DatabaseThread(
      {
        name: 'the audit sealer thread',
        entry,
        databaseUrl,
        // Its rounds' workspaces stay dirty (the sealer keeps them on a rejected round); the next
        // round starts a new thread — or, if none ever answered, seals on this thread.
        onStopped: (cause, inline) => logger.error('audit sealer thread stopped', { cause, sealingOnRequestThread: inline }),
      },
      async (workspaceIds): Promise<RoundReply> => ({ again: await fallback.run(workspaceIds), failures: [] }),
    );
  }

  async run(workspaceIds: readonly string[]): Promise<string[]> {
    const { again, failures } = await this.thread.call(workspaceIds);
    for (const { workspaceId, cause } of failures) this.logger.error('audit sealing failed', { workspaceId, cause });
    return again;
  }

  close(): Promise<void> {
    return this.thread.close();
  }
}
