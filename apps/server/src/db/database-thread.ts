/**
 * Long work on a worker thread with a PostgreSQL connection of its own (docs/decisions/
 * 0003-audit-sealing.md): its parsing, hashing and garbage then never delay a request, however
 * often it would yield. `DatabaseThread` is the side that sends work; `serveOnThread` the
 * thread's side. The thread does one request at a time, in arrival order. The embedded database has
 * one in-process session, so there the caller runs the same work inline instead.
 */
import { once } from 'node:events';
import { parentPort, Worker, workerData } from 'node:worker_threads';
import type { ErrorCode } from '@warden/contract';
import { ApiError } from '../shared/errors.ts';
import { threadBoot } from '../shared/thread-boot.ts';
import { type Database, openDatabase } from './database.ts';
import { isDatabaseUnavailable } from './unavailable.ts';

/** Errors cross the thread as their code (an ApiError's, or `service_unavailable` for a lost database) and message. */
type Reply<Result> =
  | { id: number; result: Result }
  | { id: number; progress: unknown }
  | { id: number; error: { code: ErrorCode | null; message: string; stack?: string } };

const CLOSE_TIMEOUT_MS = 5_000;

export interface DatabaseThreadOptions {
  /** What the thread is, for its errors ("the audit verifier thread"). */
  name: string;
  /** The thread's module (a file:// URL, `.ts` from source or `.js` built: shared/thread-boot.ts): it calls serveOnThread. */
  entry: string;
  databaseUrl: string;
  /** More for the thread to start with (structured-cloneable). */
  data?: Record<string, unknown>;
  /** Told when the thread stops; `inline` is true when none ever answered, so work goes to the fallback. */
  onStopped: (cause: unknown, inline: boolean) => void;
}

/** Sends work to a thread of its own, started at the first call and kept; `fallback` runs it if no thread ever answers. */
export class DatabaseThread<Request, Result, Progress = never> {
  private worker: Worker | undefined;
  private answered = false;
  private inline = false;
  private next = 0;
  private readonly pending = new Map<
    number,
    { resolve: (result: Result) => void; reject: (cause: unknown) => void; progress?: (progress: Progress) => void }
  >();

  constructor(
    private readonly options: DatabaseThreadOptions,
    private readonly fallback: (request: Request, progress?: (progress: Progress) => void) => Promise<Result>,
  ) {}

  call(request: Request, progress?: (progress: Progress) => void): Promise<Result> {
    if (this.inline) return this.fallback(request, progress);
    if (!this.worker) this.worker = this.start();
    const worker = this.worker;
    const id = this.next++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject, progress });
      worker.postMessage({ id, request });
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
    const { entry, databaseUrl, data, name } = this.options;
    const worker = new Worker(threadBoot(entry), { eval: true, workerData: { ...data, databaseUrl } });
    worker.unref(); // the server's own handles keep the process alive; a forgotten thread must not
    worker.on('message', (reply: Reply<Result>) => {
      this.answered = true;
      const waiting = this.pending.get(reply.id);
      if (!waiting) return;
      if ('progress' in reply) return waiting.progress?.(reply.progress as Progress);
      this.pending.delete(reply.id);
      if ('result' in reply) return waiting.resolve(reply.result);
      const { code, message, stack } = reply.error;
      const error = code ? new ApiError(code, message) : new Error(`${name} failed: ${message}`);
      if (stack) error.stack = stack;
      waiting.reject(error);
    });
    const stopped = (cause: unknown) => {
      if (this.worker !== worker) return;
      this.worker = undefined;
      this.inline = !this.answered;
      this.options.onStopped(cause, this.inline);
      for (const { reject } of this.pending.values()) reject(cause);
      this.pending.clear();
    };
    worker.on('error', stopped);
    worker.on('exit', (code) => stopped(new Error(`${name} exited with code ${code}`)));
    return worker;
  }
}

/**
 * The thread's side: opens one connection and answers each request, one after another, with
 * `work`'s result (or its error), passing on the progress it reports.
 */
export async function serveOnThread<Request, Result, Progress = never>(
  work: (database: Database, request: Request, progress: (progress: Progress) => void) => Promise<Result>,
): Promise<void> {
  const port = parentPort;
  if (!port) throw new Error('serveOnThread runs only in a worker thread');
  const { databaseUrl } = workerData as { databaseUrl: string };
  const database = await openDatabase({ databaseUrl, dataDir: '', poolSize: 1 });
  const answer = async (message: { id: number; request: Request } | 'close') => {
    if (message === 'close') {
      await database.close();
      port.close();
      return;
    }
    const { id, request } = message;
    try {
      const result = await work(database, request, (progress) => port.postMessage({ id, progress }));
      port.postMessage({ id, result });
    } catch (error) {
      const code = error instanceof ApiError ? error.code : isDatabaseUnavailable(error) ? 'service_unavailable' : null;
      const { message: text, stack } = error instanceof Error ? error : new Error(String(error));
      const shown = code === 'service_unavailable' ? 'The database is unavailable; retry later' : text;
      port.postMessage({ id, error: { code, message: shown, stack } });
    }
  };
  // One connection, one request at a time, in arrival order.
  let turn = Promise.resolve();
  port.on('message', (message) => {
    turn = turn.then(() => answer(message));
  });
}
