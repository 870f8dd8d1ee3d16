/** The what-if replay thread (started by ReplayThread): replays on a connection of its own, one at a time. */
import { parentPort, workerData } from 'node:worker_threads';
import { openDatabase } from '../../db/database.ts';
import { isDatabaseUnavailable } from '../../db/unavailable.ts';
import { ApiError } from '../../shared/errors.ts';
import { replayDecisions } from './simulate.ts';
import type { ReplayReply, ReplayRequest } from './simulate-runner.ts';

/** Decisions per query: large pages, few round trips (this thread holds nothing else up). */
const PAGE_SIZE = 10_000;

const port = parentPort;
if (!port) throw new Error('simulate-runner.worker.ts runs only as a worker thread');
const { databaseUrl } = workerData as { databaseUrl: string };

// One connection: the next page is read while this one is decided, one query at a time.
const database = await openDatabase({ databaseUrl, dataDir: '', poolSize: 1 });

// Simulations (simulate-runner.ts) sends one replay at a time.
port.on('message', async (message: ReplayRequest | 'close') => {
  if (message === 'close') {
    await database.close();
    port.close();
    return;
  }
  let reply: ReplayReply;
  try {
    const result = await replayDecisions(database.db, message.workspaceId, message.request, message.facts, { pageSize: PAGE_SIZE });
    reply = { id: message.id, result };
  } catch (error) {
    const code = error instanceof ApiError ? error.code : isDatabaseUnavailable(error) ? 'service_unavailable' : null;
    const { message: text, stack } = error instanceof Error ? error : new Error(String(error));
    reply = {
      id: message.id,
      error: { code, message: code === 'service_unavailable' ? 'The database is unavailable; retry later' : text, stack },
    };
  }
  port.postMessage(reply);
});
