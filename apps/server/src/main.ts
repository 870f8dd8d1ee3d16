/**
 * `npm start`: open the database, migrate, bootstrap, serve.
 *
 * With WARDEN_WORKERS=N (N > 1) the process is a supervisor of N server processes sharing
 * the port (node:cluster): one Node.js process uses one core, and everything the servers share
 * lives in PostgreSQL (and Redis), which several processes already use safely: rate-limit
 * counters, the key cache's invalidation notices, the sealer's chain-head lock, the webhook
 * outbox's leases. The embedded database admits one process, so N > 1 needs DATABASE_URL.
 * The first server starts (and migrates) before the others; a server that dies is replaced;
 * SIGINT/SIGTERM stop every server gracefully, then the supervisor.
 */
import cluster, { type Worker } from 'node:cluster';
import { loadConfig } from './config.ts';
import { createLogger } from './logger.ts';

const config = loadConfig();
const logger = createLogger();

if (config.workers > 1 && !config.databaseUrl) {
  logger.error('WARDEN_WORKERS > 1 needs DATABASE_URL: the embedded database can be opened by one process only', {
    workers: config.workers,
  });
  process.exit(1);
}

if (config.workers > 1 && cluster.isPrimary) await supervise(config.workers);
else await serve();

async function serve(): Promise<void> {
  // Loaded here, not above: the supervisor does not serve, so it does not load the server.
  const { startServer } = await import('./server.ts');
  const server = await startServer({}, logger);
  // Ctrl-C reaches a supervised server twice (from the terminal and from its supervisor): close once.
  let closing = false;
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      if (closing) return;
      closing = true;
      void server.close().then(() => process.exit(0));
    });
  }
}

async function supervise(count: number): Promise<void> {
  // Node's default round-robin: the supervisor accepts and hands connections to the servers in
  // turn, which spreads long-lived connections evenly (measured against SCHED_NONE, where the
  // kernel picks: 4,057 vs 3,689 decisions/s, the servers' load uneven). The price: a connection
  // handed to a server in the instant it dies gets no answer, like the requests that server was
  // answering; clients retry after their timeout.
  let stopping = false;
  const serving = new Set<Worker>();
  const fork = (): Promise<Worker> =>
    new Promise((resolve, reject) => {
      const worker = cluster.fork();
      const failed = (code: number | null) => reject(new Error(`a server process exited during start (code ${code})`));
      worker.once('exit', failed);
      worker.once('listening', () => {
        worker.off('exit', failed);
        serving.add(worker);
        resolve(worker);
      });
    });
  const stopAll = (exitCode: number) => {
    stopping = true;
    const workers = Object.values(cluster.workers ?? {}).filter((w): w is Worker => w !== undefined);
    let left = workers.length;
    if (left === 0) process.exit(exitCode);
    for (const worker of workers) {
      worker.once('exit', () => {
        if (--left === 0) process.exit(exitCode);
      });
      worker.process.kill('SIGTERM');
    }
  };

  // A server that had started and then died is replaced; one that fails to start is not (its
  // error is in the log), and with no server left the supervisor exits 1 for its own supervisor.
  cluster.on('exit', (worker, code, signal) => {
    const hadStarted = serving.delete(worker);
    if (stopping || !hadStarted) return;
    logger.error('a server process exited; starting another', { pid: worker.process.pid, code, signal });
    fork().catch((error: unknown) => {
      logger.error('could not replace a server process', { cause: error });
      if (serving.size === 0) stopAll(1);
    });
  });

  for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, () => stopAll(0));
  try {
    await fork(); // migrates and bootstraps alone, before the others start
    await Promise.all(Array.from({ length: count - 1 }, fork));
  } catch (error) {
    logger.error('warden did not start', { cause: error });
    stopAll(1);
    return;
  }
  logger.info('warden supervising server processes', { workers: count, pids: [...serving].map((w) => w.process.pid) });
}
