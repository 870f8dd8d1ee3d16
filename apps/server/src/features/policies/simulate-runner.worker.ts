/** The what-if replay thread (started by ReplayThread): replays on a connection of its own, one at a time. */
import { serveOnThread } from '../../db/database-thread.ts';
import { type Replayed, replayDecisions } from './simulate.ts';
import type { ReplayRequest } from './simulate-runner.ts';

/** Decisions per query: large pages, few round trips (this thread holds nothing else up). */
const PAGE_SIZE = 10_000;

await serveOnThread<ReplayRequest, Replayed>((database, { workspaceId, request, facts }) =>
  replayDecisions(database.db, workspaceId, request, facts, { pageSize: PAGE_SIZE }),
);
