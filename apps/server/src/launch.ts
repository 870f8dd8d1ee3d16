/**
 * `npm start` (through main.ts, which checks the Node.js version first): open the database,
 * migrate, bootstrap, serve.
 *
 * With WARDEN_WORKERS=N (N > 1) the process is a supervisor of N server processes sharing
 * the port (node:cluster): one Node.js process uses one core, and everything the servers share
 * lives in PostgreSQL (and Redis), which several processes already use safely: rate-limit
 * counters, the key cache's invalidation notices, the sealer's chain-head lock, the webhook
 * outbox's leases. The embedded database admits one process, so N > 1 needs DATABASE_URL.
 * The first server starts (and migrates) before the others; a server that dies is replaced;
 * SIGINT/SIGTERM stop every server gracefully, then the supervisor.
 *
 * A server stops within WARDEN_SHUTDOWN_TIMEOUT_MS (default 10 s) of SIGTERM/SIGINT (any number
 * of copies: one drain): readiness answers 503 and answers close their connections while the
 * port still accepts for WARDEN_SHUTDOWN_DRAIN_MS (default 5 s, at most half the bound); then
 * calls held for an approval are answered, the port stops accepting, requests under way finish (with their audit commits),
 * webhook deliveries under way finish or have their leases released, the sealer runs a last
 * round, then it exits 0; if that takes longer than the bound, it exits 1 anyway.
 * With WARDEN_METRICS_PORT the supervisor serves the metrics of all its servers, aggregated.
 */
import cluster, { type Worker } from 'node:cluster';
import { type Config, checkBootstrapKey, loadConfig } from './config.ts';
import { createLogger } from './logger.ts';

let config: Config;
try {
  config = loadConfig();
  checkBootstrapKey(config.bootstrapKey);
} catch (error) {
  // A configuration mistake: one line saying what to fix, no stack.
  process.stderr.write(`warden: ${(error as Error).message}\n`);
  process.exit(1);
}
const logger = createLogger(false, { level: config.logLevel });

if (config.workers > 1 && !config.databaseUrl) {
  logger.error('WARDEN_WORKERS > 1 needs DATABASE_URL: the embedded database can be opened by one process only', {
    workers: config.workers,
  });
  process.exit(1);
}

if (config.workers > 1 && cluster.isPrimary) await supervise(config.workers);
else await serve();

async function serve(): Promise<void> {
  // Before the server: its spans need the SDK (loaded only when traces are on).
  const tracing = config.tracing ? (await import('./observability/tracing.ts')).startTracing() : undefined;
  // Loaded here, not above: the supervisor does not serve, so it does not load the server.
  const { startServer } = await import('./server.ts');
  const { startFailure, portFailure, keyHint } = await import('./start-up.ts');
  // A busy port is found before the database is opened, so nothing is left half started.
  const busy = cluster.isPrimary ? await portFailure(config) : undefined;
  if (busy) exitWith(busy);
  const server = await startServer(config, logger).catch((error: unknown) => {
    const failure = startFailure(error, config);
    if (failure) exitWith(failure);
    throw error;
  });
  // Supervised, the first server alone says it.
  const hint =
    config.bootstrapKey || (cluster.worker && cluster.worker.id !== 1)
      ? undefined
      : await keyHint(server.database, server.webhooks, config);
  if (hint) logger.info(hint);
  // A signal often arrives twice (Ctrl-C or systemd's control-group kill reach tsx and the server
  // both, and tsx relays its copy; a supervisor relays too): close once, and keep the handler,
  // since a second signal finding none would end the process on the spot, answers in flight lost.
  let closing = false;
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.on(signal, () => {
      if (closing) return;
      closing = true;
      const started = Date.now();
      const bound = config.shutdownTimeoutMs;
      // the drain leaves at least half of the bound to the requests under way and the rest
      const drainMs = Math.min(config.shutdownDrainMs, Math.floor(bound / 2));
      logger.info('warden stopping', { signal, timeoutMs: bound, drainMs });
      setTimeout(() => {
        logger.error('warden did not stop within WARDEN_SHUTDOWN_TIMEOUT_MS; exiting', { timeoutMs: bound });
        process.exit(1);
      }, bound).unref();
      // The drain gets the bound minus what closing the sealer and the database is given.
      void server
        .close(bound - Math.min(2_000, bound / 4), drainMs)
        .then(() => tracing?.shutdown().catch(() => undefined))
        .then(
          () => {
            logger.info('warden stopped', { durationMs: Date.now() - started });
            process.exit(0);
          },
          (error: unknown) => {
            logger.error('warden did not stop cleanly', { cause: error });
            process.exit(1);
          },
        );
    });
  }
}

/** A start-up failure with a known fix: one line saying what to do, no stack. */
function exitWith(line: string): never {
  process.stderr.write(`warden: ${line}\n`);
  process.exit(1);
}

/** How long a server may take to close gracefully before the supervisor kills it (beyond its own bound). */
const STOP_GRACE_MS = Math.max(30_000, config.shutdownTimeoutMs + 5_000);
/** Wait before starting a server again after a replacement failed to start. */
const RETRY_MS = 5_000;

async function supervise(count: number): Promise<void> {
  // Node's default round-robin: the supervisor accepts and hands connections to the servers in
  // turn, which spreads long-lived connections evenly (SCHED_NONE, where the kernel picks, left
  // the servers' load uneven: docs/decisions/0007-server-processes.md). The price: a connection
  // handed to a server in the instant it dies gets no answer, like the requests that server was
  // answering; clients retry after their timeout.
  let stopping = false;
  /** Serving servers, with when they started serving. */
  const serving = new Map<Worker, number>();
  const fork = (): Promise<Worker> =>
    new Promise((resolve, reject) => {
      const worker = cluster.fork();
      const failed = (code: number | null) => reject(new Error(`a server process exited during start (code ${code})`));
      worker.once('exit', failed);
      worker.once('listening', () => {
        worker.off('exit', failed);
        serving.set(worker, Date.now());
        resolve(worker);
      });
    });
  const stopAll = (exitCode: number) => {
    if (stopping) return;
    stopping = true;
    // A worker that has exited may stay listed until its channel closes too: wait for the living only.
    const living = Object.values(cluster.workers ?? {}).filter((w): w is Worker => w !== undefined && !w.isDead());
    let left = living.length;
    if (left === 0) process.exit(exitCode);
    for (const worker of living) {
      worker.once('exit', () => {
        if (--left === 0) process.exit(exitCode);
      });
      worker.process.kill('SIGTERM');
    }
    setTimeout(() => {
      for (const worker of living) if (!worker.isDead()) worker.process.kill('SIGKILL');
    }, STOP_GRACE_MS).unref();
  };
  // A server that had started and then died is replaced (if the replacement fails to start, it
  // is tried again every RETRY_MS while another server still serves; with none left the
  // supervisor exits 1, for its own supervisor to act). One that fails at first start is not.
  const replace = (): void => {
    if (stopping) return;
    fork().catch((error: unknown) => {
      logger.error('could not replace a server process', { cause: error });
      if (serving.size === 0) stopAll(1);
      else setTimeout(replace, RETRY_MS);
    });
  };
  cluster.on('exit', (worker, code, signal) => {
    const startedAt = serving.get(worker);
    serving.delete(worker);
    if (stopping || startedAt === undefined) return;
    // the dead process's pid under its own name: `pid` is the supervisor's (every line carries it)
    logger.error('a server process exited; starting another', { worker_pid: worker.process.pid, code, signal });
    // One that dies soon after starting is started again after a pause, not in a tight loop.
    if (Date.now() - startedAt < RETRY_MS * 2) setTimeout(replace, RETRY_MS);
    else replace();
  });

  // kept for every copy of the signal (see the server's handler above): the first stops, the rest wait
  for (const signal of ['SIGINT', 'SIGTERM'] as const) process.on(signal, () => stopAll(0));
  if (config.metricsPort !== undefined) {
    // The supervisor answers the scrape with every server process's metrics, aggregated.
    const { clusterMetrics } = await import('./observability/metrics.ts');
    const { startMetricsListener } = await import('./observability/listener.ts');
    const listener = await startMetricsListener(
      clusterMetrics(() => [...serving.keys()]),
      config.metricsPort,
      config.metricsHost,
    );
    logger.info('warden metrics listening', { metrics: listener.url });
  }
  try {
    await fork(); // migrates and bootstraps alone, before the others start
    await Promise.all(Array.from({ length: count - 1 }, fork));
  } catch (error) {
    logger.error('warden did not start', { cause: error });
    stopAll(1);
    return;
  }
  logger.info('warden supervising server processes', { workers: count, pids: [...serving.keys()].map((w) => w.process.pid) });
}
