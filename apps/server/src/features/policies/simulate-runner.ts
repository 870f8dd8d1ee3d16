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
import { once } from 'node:events';
import { Worker } from 'node:worker_threads';
import type { ErrorCode, PolicySimulation, PolicySimulationRequest } from '@warden/contract';
import type { Kysely } from 'kysely';
import type { DB } from '../../db/schema.ts';
import type { Logger } from '../../logger.ts';
import { ApiError } from '../../shared/errors.ts';
import { siblingModule, threadBoot } from '../../shared/thread-boot.ts';
import { loadDefaultDecisions } from '../settings/settings.service.ts';
import { workspaceAgents } from './simulate.repository.ts';
import { checkDraft, type Replayed, type ReplayFacts, replayDecisions } from './simulate.ts';

/** Runs a checked replay somewhere. */
export interface ReplayRunner {
  run(workspaceId: string, request: PolicySimulationRequest, facts: ReplayFacts): Promise<Replayed>;
  close(): Promise<void>;
}

export interface ReplayRequest {
  id: number;
  workspaceId: string;
  request: PolicySimulationRequest;
  facts: ReplayFacts;
}
/** Errors cross the thread as their code (an ApiError's, or `service_unavailable` for a lost database) and message. */
export type ReplayReply =
  | { id: number; result: Replayed }
  | { id: number; error: { code: ErrorCode | null; message: string; stack?: string } };

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
const CLOSE_TIMEOUT_MS = 5_000;

/**
 * On a worker thread of its own with one PostgreSQL connection, started at the first replay
 * and kept. If no thread ever answers (it cannot start), replays run on `fallback`.
 */
export class ReplayThread implements ReplayRunner {
  private worker: Worker | undefined;
  private answered = false;
  private useFallback = false;
  private next = 0;
  private readonly pending = new Map<number, { resolve: (result: Replayed) => void; reject: (cause: unknown) => void }>();

  constructor(
    private readonly databaseUrl: string,
    private readonly logger: Logger,
    private readonly fallback: ReplayRunner,
    private readonly entry = ENTRY,
  ) {}

  run(workspaceId: string, request: PolicySimulationRequest, facts: ReplayFacts): Promise<Replayed> {
    if (this.useFallback) return this.fallback.run(workspaceId, request, facts);
    if (!this.worker) this.worker = this.start();
    const worker = this.worker;
    const id = this.next++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      worker.postMessage({ id, workspaceId, request, facts } satisfies ReplayRequest);
    });
  }

  async close(): Promise<void> {
    const worker = this.worker;
    this.worker = undefined;
    if (!worker) return;
    const exited = once(worker, 'exit');
    worker.postMessage('close');
    const timeout = setTimeout(() => void worker.terminate(), CLOSE_TIMEOUT_MS);
    await exited;
    clearTimeout(timeout);
  }

  private start(): Worker {
    const worker = new Worker(threadBoot(this.entry), { eval: true, workerData: { databaseUrl: this.databaseUrl } });
    worker.unref(); // the server's own handles keep the process alive
    worker.on('message', (reply: ReplayReply) => {
      this.answered = true;
      const waiting = this.pending.get(reply.id);
      this.pending.delete(reply.id);
      if (!waiting) return;
      if ('result' in reply) return waiting.resolve(reply.result);
      const { code, message, stack } = reply.error;
      const error = code ? new ApiError(code, message) : new Error(`what-if replay failed: ${message}`);
      if (stack) error.stack = stack;
      waiting.reject(error);
    });
    const stopped = (cause: unknown) => {
      if (this.worker !== worker) return;
      this.worker = undefined;
      this.useFallback = !this.answered;
      this.logger.error('what-if replay thread stopped', { cause, replayingOnRequestThread: this.useFallback });
      for (const { reject } of this.pending.values()) reject(cause);
      this.pending.clear();
    };
    worker.on('error', stopped);
    worker.on('exit', (code) => stopped(new Error(`the what-if replay thread exited with code ${code}`)));
    return worker;
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
        const [agents, defaults] = await Promise.all([workspaceAgents(this.db, workspaceId), loadDefaultDecisions(this.db, workspaceId)]);
        const result = await this.runner.run(workspaceId, request, { agents, defaults });
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
