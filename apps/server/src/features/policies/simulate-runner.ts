/**
 * Where what-if replays run, and how workspaces share them.
 *
 * A replay of 100,000 decisions reads and decides for a second or more. On PostgreSQL it runs
 * in a worker thread with its own connection, so that its parsing, deciding and garbage never
 * delay another request (as the audit sealer: docs/decisions/0003-audit-sealing.md); on the
 * embedded database (one in-process session) it runs on this thread in small pages, yielding
 * between them. Either way one replay runs at a time per process, in arrival order, and a
 * workspace has at most one running or waiting: a second is refused (429 `rate_limited`), so
 * no workspace can queue work ahead of the others.
 */
import type { PolicyRule, PolicySimulation, PolicySimulationRequest } from '@warden/contract';
import type { Kysely } from 'kysely';
import { DatabaseThread } from '../../db/database-thread.ts';
import type { DB } from '../../db/schema.ts';
import type { Logger } from '../../logger.ts';
import { ApiError } from '../../shared/errors.ts';
import { siblingModule } from '../../shared/thread-boot.ts';
import { loadDefaultDecisions } from '../settings/settings.service.ts';
import { enabledPolicies } from './policies.repository.ts';
import { workspaceAgents } from './simulate.repository.ts';
import { checkDraft, type Replayed, type ReplayFacts, replayDecisions } from './simulate.ts';

/** Runs a checked replay somewhere. */
export interface ReplayRunner {
  run(workspaceId: string, request: PolicySimulationRequest, facts: ReplayFacts): Promise<Replayed>;
  close(): Promise<void>;
}

/** A replay as the thread receives it. */
export interface ReplayRequest {
  workspaceId: string;
  request: PolicySimulationRequest;
  facts: ReplayFacts;
}

/** Decisions per query on this thread: each page is decided without yielding, so small. */
const INLINE_PAGE_SIZE = 1_000;
/** Replays waiting for their turn in a process (each of another workspace). */
const MAX_WAITING = 16;

const yieldToOthers = () => new Promise<void>((resolve) => setImmediate(resolve));

/** On this thread (the embedded database), yielding to other requests between pages. */
export const inlineReplays = (db: Kysely<DB>): ReplayRunner => ({
  run: (workspaceId, request, facts) =>
    replayDecisions(db, workspaceId, request, facts, { pageSize: INLINE_PAGE_SIZE, pause: yieldToOthers }),
  close: async () => {},
});

const ENTRY = siblingModule('simulate-runner.worker', import.meta.url);

/**
 * On a worker thread of its own with one PostgreSQL connection (db/database-thread.ts), started
 * at the first replay and kept. If no thread ever answers (it cannot start), replays run on `fallback`.
 */
export class ReplayThread implements ReplayRunner {
  private readonly thread: DatabaseThread<ReplayRequest, Replayed>;

  constructor(databaseUrl: string, logger: Logger, fallback: ReplayRunner, entry = ENTRY) {
    this.thread = new DatabaseThread(
      {
        name: 'the what-if replay thread',
        entry,
        databaseUrl,
        onStopped: (cause, inline) => logger.error('what-if replay thread stopped', { cause, replayingOnRequestThread: inline }),
      },
      ({ workspaceId, request, facts }) => fallback.run(workspaceId, request, facts),
    );
  }

  run(workspaceId: string, request: PolicySimulationRequest, facts: ReplayFacts): Promise<Replayed> {
    return this.thread.call({ workspaceId, request, facts });
  }

  close(): Promise<void> {
    return this.thread.close();
  }
}

/** The replay service: checks the draft, then queues the replay fairly (see the top of this file). */
export class Simulations {
  private readonly busy = new Set<string>();
  private readonly waiting: Array<() => void> = [];
  private running = false;

  constructor(
    private readonly db: Kysely<DB>,
    private readonly runner: ReplayRunner,
  ) {}

  async simulate(workspaceId: string, request: PolicySimulationRequest): Promise<PolicySimulation> {
    const started = performance.now();
    checkDraft(request);
    if (this.busy.has(workspaceId)) {
      throw new ApiError('rate_limited', 'A what-if replay of this workspace is already running; a workspace replays one at a time', {
        headers: { 'Retry-After': '1' },
      });
    }
    if (this.running && this.waiting.length >= MAX_WAITING) {
      throw new ApiError('rate_limited', 'The server is replaying other workspaces’ decisions; retry shortly', {
        headers: { 'Retry-After': '2' },
      });
    }
    this.busy.add(workspaceId);
    try {
      await this.turn();
      try {
        const [policies, agents, defaults] = await Promise.all([
          enabledPolicies(this.db, workspaceId),
          workspaceAgents(this.db, workspaceId),
          loadDefaultDecisions(this.db, workspaceId),
        ]);
        // The current set as the policy cache compiles it (policy-cache.ts), as plain data for the thread.
        const current = policies.map(({ name, mode, priority, version, rules }) => ({
          name,
          mode,
          priority,
          version,
          rules: rules as PolicyRule[],
        }));
        const result = await this.runner.run(workspaceId, request, { policies: current, agents, defaults });
        return { ...result, duration_ms: Math.round(performance.now() - started) };
      } finally {
        this.running = false;
        this.waiting.shift()?.();
      }
    } finally {
      this.busy.delete(workspaceId);
    }
  }

  close(): Promise<void> {
    return this.runner.close();
  }

  /** Resolves when no other replay runs, in arrival order. */
  private turn(): Promise<void> {
    if (!this.running) {
      this.running = true;
      return Promise.resolve();
    }
    return new Promise((resolve) =>
      this.waiting.push(() => {
        this.running = true;
        resolve();
      }),
    );
  }
}
