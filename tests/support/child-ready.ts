/**
 * Waiting for a Warden started as a child process (`apps/server/src/main.ts`) to serve.
 *
 * A fixed deadline on polling GET /health failed on a loaded machine ("the server did not answer
 * GET /health within 45 s") although the server was only slow to start: tsx compiling, PGlite
 * creating its database and two vitest workers competing for two cores. So the wait follows the
 * process itself instead:
 *
 * - ready as soon as the server says so: its log line `warden listening` (server.ts, written once
 *   the port listens; `warden supervising server processes` with WARDEN_WORKERS), then one GET
 *   /health confirms it answers; GET /health is also polled, for a server started with its logs
 *   off;
 * - failed at once when the process exits, with the end of its output;
 * - failed only after a generous overall cap, START_CAP_MS: 120 s (WARDEN_TEST_START_CAP_MS
 *   overrides it), a bound for a hang rather than a speed target.
 */
import type { ChildProcess } from 'node:child_process';

/** The overall cap on a start (see above). Tests that wait for a start allow this much plus their own work. */
export const START_CAP_MS = Number(process.env.WARDEN_TEST_START_CAP_MS || 120_000);

/** The server's own readiness signal: a JSON log line on stderr (logger.ts). */
export const READY_LINE = /"message":"warden (listening|supervising server processes)"/;

export interface WaitOptions {
  /** The server's GET /health URL (…/api/v1/health). */
  healthUrl: string;
  /** Everything the child wrote to stdout and stderr so far. */
  output: () => string;
  /** The overall cap (START_CAP_MS unless given). */
  capMs?: number;
  /** Names the process in errors ('the server'). */
  what?: string;
}

const healthy = async (url: string): Promise<boolean> => {
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(2_000) });
    await res.body?.cancel();
    return res.status === 200;
  } catch {
    return false; // not listening yet, or too busy to answer within 2 s
  }
};

/**
 * Resolves once `child` is ready (its readiness line, or GET /health 200, then GET /health 200);
 * rejects at once when it exits, or after the cap. The caller stops the child on a rejection.
 */
export function waitForServer(child: ChildProcess, options: WaitOptions): Promise<void> {
  const capMs = options.capMs ?? START_CAP_MS;
  const what = options.what ?? 'the server';
  const tail = () => options.output().slice(-3000);
  const started = Date.now();

  return new Promise<void>((resolve, reject) => {
    let settled = false;
    let said = false;
    let poll: NodeJS.Timeout | undefined;
    const finish = (error?: Error) => {
      if (settled) return;
      settled = true;
      clearTimeout(cap);
      clearTimeout(poll);
      child.off('exit', onExit);
      child.stdout?.off('data', onOutput);
      child.stderr?.off('data', onOutput);
      if (error) reject(error);
      else resolve();
    };
    const onExit = (code: number | null, signal: NodeJS.Signals | null) => {
      // What it wrote last may still be in its pipes at 'exit': wait for them to close (briefly).
      const report = () => finish(new Error(`${what} exited while starting (${JSON.stringify({ code, signal })}):\n${tail()}`));
      const timer = setTimeout(report, 1_000);
      child.once('close', () => {
        clearTimeout(timer);
        report();
      });
    };
    const onOutput = () => {
      if (!said && READY_LINE.test(options.output())) {
        said = true;
        clearTimeout(poll);
        void check(); // confirm at once
      }
    };
    /** One GET /health; again after a pause until it answers (faster once the server said it listens). */
    const check = async () => {
      if (settled) return;
      if (await healthy(options.healthUrl)) return finish();
      if (!settled) poll = setTimeout(check, said ? 100 : 500);
    };
    const cap = setTimeout(
      () =>
        finish(
          new Error(
            `${what} did not become ready within ${Math.round(capMs / 1000)} s (${said ? 'it logged that it listens, but GET /health did not answer 200' : 'no "warden listening" line, and GET /health did not answer'}; WARDEN_TEST_START_CAP_MS waits longer):\n${tail()}`,
          ),
        ),
      Math.max(0, capMs - (Date.now() - started)),
    );

    if (child.exitCode !== null || child.signalCode !== null) {
      finish(
        new Error(`${what} exited while starting (${JSON.stringify({ code: child.exitCode, signal: child.signalCode })}):\n${tail()}`),
      );
      return;
    }
    child.once('exit', onExit);
    child.stdout?.on('data', onOutput);
    child.stderr?.on('data', onOutput);
    onOutput();
    if (!said) poll = setTimeout(check, 250);
  });
}
