/**
 * Sealing rounds in a worker thread with its own PostgreSQL connection (used on PostgreSQL;
 * the embedded database has one in-process session, so it seals inline).
 *
 * A round reads its events back, hashes them and writes their seals: on the request thread its
 * parsing, hashing and garbage delayed every request that arrived meanwhile, however often it
 * yielded. In a thread (and a heap) of its own, the operating system shares the cores instead
 * (docs/decisions/0003-audit-sealing.md).
 */
import { once } from 'node:events';
import { Worker } from 'node:worker_threads';
import type { Logger } from '../../logger.ts';
import { siblingModule, threadBoot } from '../../shared/thread-boot.ts';
import type { SealingRounds } from './tree.ts';

export interface RoundRequest {
  round: number;
  workspaceIds: readonly string[];
}
export interface RoundReply {
  round: number;
  again: string[];
  /** Errors cross threads as Errors (name, message and stack: what the logger keeps of them). */
  failures: { workspaceId: string; cause: Error }[];
}

const CLOSE_TIMEOUT_MS = 5_000;
const ENTRY = siblingModule('sealer-thread.worker', import.meta.url);

export class SealerThread implements SealingRounds {
  private worker: Worker | undefined;
  /** Whether a thread has ever answered a round (if none could, rounds go to the fallback). */
  private answered = false;
  private useFallback = false;
  private readonly pending = new Map<number, { resolve: (again: string[]) => void; reject: (cause: unknown) => void }>();
  private next = 0;

  constructor(
    private readonly databaseUrl: string,
    private readonly logger: Logger,
    /** Where rounds run if the thread cannot start at all (sealing goes on, on this thread). */
    private readonly fallback: SealingRounds,
    private readonly entry = ENTRY,
  ) {}

  run(workspaceIds: readonly string[]): Promise<string[]> {
    if (this.useFallback) return this.fallback.run(workspaceIds);
    if (!this.worker) this.worker = this.start();
    const worker = this.worker;
    const round = this.next++;
    return new Promise((resolve, reject) => {
      this.pending.set(round, { resolve, reject });
      worker.postMessage({ round, workspaceIds } satisfies RoundRequest);
    });
  }

  async close(): Promise<void> {
    const worker = this.worker;
    this.worker = undefined;
    if (!worker) return;
    const exited = once(worker, 'exit');
    worker.postMessage('close');
    // It closes its connection and ends; one that hangs must not hold the shutdown.
    const timeout = setTimeout(() => void worker.terminate(), CLOSE_TIMEOUT_MS);
    await exited;
    clearTimeout(timeout);
  }

  private start(): Worker {
    const worker = new Worker(threadBoot(this.entry), { eval: true, workerData: { databaseUrl: this.databaseUrl } });
    // The server's own handles keep the process alive; a forgotten thread must not.
    worker.unref();
    worker.on('message', (reply: RoundReply) => {
      this.answered = true;
      for (const { workspaceId, cause } of reply.failures) this.logger.error('audit sealing failed', { workspaceId, cause });
      this.pending.get(reply.round)?.resolve(reply.again);
      this.pending.delete(reply.round);
    });
    const stopped = (cause: unknown) => {
      if (this.worker !== worker) return;
      this.worker = undefined;
      // Its rounds' workspaces stay dirty (the sealer keeps them on a rejected round); the
      // next round starts a new thread — or, if none ever answered, seals on this thread.
      this.useFallback = !this.answered;
      this.logger.error('audit sealer thread stopped', { cause, sealingOnRequestThread: this.useFallback });
      for (const { reject } of this.pending.values()) reject(cause);
      this.pending.clear();
    };
    worker.on('error', stopped);
    worker.on('exit', (code) => stopped(new Error(`the audit sealer thread exited with code ${code}`)));
    return worker;
  }
}
