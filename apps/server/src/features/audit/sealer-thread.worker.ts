/** The sealer thread (started by SealerThread): sealing rounds on a connection of its own. */
import { parentPort, workerData } from 'node:worker_threads';
import { openDatabase } from '../../db/database.ts';
import type { RoundReply, RoundRequest } from './sealer-thread.ts';
import { sealRound } from './tree.ts';

const port = parentPort;
if (!port) throw new Error('sealer-thread.worker.ts runs only as a worker thread');
const { databaseUrl } = workerData as { databaseUrl: string };

// One connection: a round seals one workspace after another.
const database = await openDatabase({ databaseUrl, dataDir: '', poolSize: 1 });

// Rounds arrive one at a time (the sealer waits for each reply before the next).
port.on('message', async (message: RoundRequest | 'close') => {
  if (message === 'close') {
    await database.close();
    port.close();
    return;
  }
  const failures: RoundReply['failures'] = [];
  const again = await sealRound(database.db, message.workspaceIds, (workspaceId, cause) =>
    failures.push({ workspaceId, cause: cause instanceof Error ? cause : new Error(String(cause)) }),
  );
  port.postMessage({ round: message.round, again, failures } satisfies RoundReply);
});
