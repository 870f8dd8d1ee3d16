/** The sealer thread (started by SealerThread): sealing rounds on a connection of its own, one at a time. */
import { serveOnThread } from '../../db/database-thread.ts';
import type { RoundReply } from './sealer-thread.ts';
import { sealRound } from './tree.ts';

await serveOnThread<readonly string[], RoundReply>(async (database, workspaceIds) => {
  const failures: RoundReply['failures'] = [];
  const again = await sealRound(database.db, workspaceIds, (workspaceId, cause) =>
    failures.push({ workspaceId, cause: cause instanceof Error ? cause : new Error(String(cause)) }),
  );
  return { again, failures };
});
