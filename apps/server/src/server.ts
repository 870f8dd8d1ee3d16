/**
 * Starts Warden: database → migrations → what the composition root builds on it
 * (composition.ts) → bootstrap key → background workers → HTTP API, and, on the embedded
 * database, the local admin channel through which the CLI reaches it while the server holds it.
 */
import cluster from 'node:cluster';
import type { Server } from 'node:http';
import net, { type AddressInfo, type Socket } from 'node:net';
import { Redis } from 'ioredis';
import { startAdminChannel } from './admin/channel.ts';
import { createApp } from './app.ts';
import { compose } from './composition.ts';
import { type Config, checkBootstrapKey, loadConfig } from './config.ts';
import { type Database, openDatabase } from './db/database.ts';
import { migrate } from './db/migrate.ts';
import { ensureAuditPartitions } from './db/partitions.ts';
import { RELAY_CHANNEL } from './features/execution/mcp-client-sessions.ts';
import type { WebhookService } from './features/webhooks/webhooks.service.ts';
import { createHttpServer } from './http/http-server.ts';
import { IDENTITY_CHANNEL } from './http/key-cache.ts';
import { createLogger, type Logger } from './logger.ts';
import { createHttpObserver, type HttpObserver } from './observability/http.ts';
import { startMetricsListener } from './observability/listener.ts';
import { createMetrics, shareWithSupervisor } from './observability/metrics.ts';
import { createProbes } from './observability/probes.ts';

export interface RunningServer {
  url: string;
  database: Database;
  webhooks: WebhookService;
  /** http://host:port/metrics, when this process serves the metrics itself (WARDEN_METRICS_PORT, not supervised). */
  metricsUrl?: string;
  /**
   * Stops. With `graceMs` (a shutdown: SIGTERM), first drains: readiness answers 503 and every
   * answer says Connection: close while the port still accepts for `drainMs`; then calls held
   * for an approval are answered, no new connection is accepted, requests under way finish
   * (their audit commits with them) and webhook deliveries under way finish or are released,
   * all within `graceMs`; without it, connections are closed at once.
   */
  close(graceMs?: number, drainMs?: number): Promise<void>;
}

export async function startServer(overrides: Partial<Config> = {}, logger: Logger = createLogger()): Promise<RunningServer> {
  const config = { ...loadConfig(), ...overrides };
  checkBootstrapKey(config.bootstrapKey);
  const database = await openDatabase({ databaseUrl: config.databaseUrl, dataDir: config.dataDir });
  await migrate(database);
  await ensureAuditPartitions(database);
  const partitionTimer = setInterval(() => void ensureAuditPartitions(database), 24 * 3600 * 1000).unref();
  // Auto-pipelining: the rate-limit commands of requests arriving in the same tick go out in
  // one write (one syscall) instead of one each.
  const redis = config.redisUrl
    ? new Redis(config.redisUrl, {
        enableOfflineQueue: false,
        maxRetriesPerRequest: 1,
        lazyConnect: false,
        enableAutoPipelining: true,
        // A Redis that stops answering (a half-open connection) fails the command, so the rate
        // limiter falls back to its in-memory insurance instead of holding requests.
        commandTimeout: 1_000,
      })
    : undefined;
  redis?.on('error', (error) => logger.error('redis', { cause: error }));
  const metrics = config.metricsPort !== undefined ? createMetrics({ db: database.db, pool: database.pool }) : undefined;
  const { services, keys, rateLimitStore, sealer, checkpointer, delivery, auditWriter, mcp, clientSessions, egress, simulations } = compose(
    {
      config,
      database,
      logger,
      redis,
      telemetry: metrics,
    },
  );
  if (config.bootstrapKey) await services.workspaces.ensureBootstrapKey(config.bootstrapKey);
  await sealer.start();
  delivery.start();
  // Start counting in Redis from the first request (until ready, the in-memory insurance counts).
  if (redis)
    await Promise.race([new Promise((ready) => redis.once('ready', ready)), new Promise((later) => setTimeout(later, 5_000).unref())]);
  const stopListening = await database.listen(IDENTITY_CHANNEL, keys.handlers);
  const stopRelaying = await database.listen(RELAY_CHANNEL, clientSessions.handlers);
  const observer = createHttpObserver({
    logger,
    logRequests: config.logRequests,
    metrics,
    tracing: config.tracing,
    v1BasePath: '/api/v1',
  });
  const probes = createProbes({
    pingDatabase: async () => {
      const { database: state } = await services.health.check();
      if (state !== 'ok') throw new Error(`database ${state}`);
    },
    auditFailingSince: () => auditWriter.failingSince(),
  });
  metrics?.watchReadiness(async () => (await probes.check()).ready);
  const app = createApp({ config, logger, services, rateLimitStore, keys, observer, probes });
  const http = createHttpServer(app).listen(config.port, config.host);
  const connections = trackConnections(http);
  await new Promise<void>((resolve, reject) => {
    http.once('listening', resolve);
    http.once('error', reject);
  });
  const webhooks = services.webhooks;
  const admin =
    database.kind === 'pglite' && !config.dataDir.startsWith('memory://')
      ? await startAdminChannel(config.dataDir, { database, webhooks, credentials: services.credentials }, logger)
      : undefined;
  // Supervised (WARDEN_WORKERS > 1), the supervisor serves every process's metrics on the port.
  if (metrics && cluster.isWorker) shareWithSupervisor(metrics);
  const metricsListener =
    metrics && !cluster.isWorker ? await startMetricsListener(metrics, config.metricsPort as number, config.metricsHost) : undefined;
  const { port } = http.address() as AddressInfo;
  const url = `http://${config.host}:${port}/api/v1`;
  logger.info('warden listening', { url, database: database.kind, ...(metricsListener ? { metrics: metricsListener.url } : {}) });
  return {
    url,
    database,
    webhooks,
    metricsUrl: metricsListener?.url,
    close: async (graceMs?: number, drainMs = 0) => {
      const deadline = graceMs === undefined ? undefined : Date.now() + graceMs;
      probes.stopping();
      observer.startDraining();
      clearInterval(partitionTimer);
      // The drain: readiness answers 503 and every answer closes its connection, while the port
      // still accepts, so a load balancer takes this process out before anything is refused.
      if (deadline !== undefined && drainMs > 0) await new Promise((resolve) => setTimeout(resolve, drainMs));
      // Calls held open for an approval are answered now: pending, with where to decide it.
      services.mcpGateway.drain();
      const httpClosed = closeListener(http, connections, observer, deadline);
      const t0 = performance.now();
      await admin?.close();
      await httpClosed;
      const t1 = performance.now();
      await delivery.stop(deadline);
      const t2 = performance.now();
      await metricsListener?.close();
      metrics?.close();
      redis?.disconnect();
      services.mcpGateway.close();
      clientSessions.close();
      await mcp.close();
      await egress.close();
      await sealer.stop();
      await checkpointer.stop();
      const t3 = performance.now();
      await simulations.close();
      await services.audit.close();
      await stopListening();
      await stopRelaying();
      await database.close();
      if (graceMs !== undefined) {
        const ms = (a: number, b: number) => Math.round(b - a);
        logger.info('warden closed', {
          drainMs: deadline !== undefined ? drainMs : 0,
          requestsMs: ms(t0, t1),
          webhooksMs: ms(t1, t2),
          sealerMs: ms(t2, t3),
          restMs: ms(t3, performance.now()),
        });
      }
    },
  };
}

/** The open connections (for the close, below). */
function trackConnections(http: Server): Set<Socket> {
  const open = new Set<Socket>();
  http.on('connection', (socket: Socket) => {
    open.add(socket);
    socket.once('close', () => open.delete(socket));
  });
  return open;
}

/**
 * Stops accepting and resolves once every connection has ended. Without a deadline,
 * connections are cut at once. With one, no connection is cut under a request: answers under
 * way finish (each closes its connection, as the drain said Connection: close), a connection
 * that has not sent anything yet (its request may be on its way) is waited for, then the idle
 * ones left are closed; whatever is still open at the deadline is cut.
 */
async function closeListener(http: Server, open: Set<Socket>, observer: HttpObserver, deadline: number | undefined): Promise<void> {
  // Closing a listening socket resets the connections still in its accept queue: close right
  // after the event loop has accepted what was waiting (setImmediate runs after the poll phase).
  await new Promise((resolve) => setImmediate(resolve));
  // net's close, not http's: http's also closes idle connections at once, among them one whose
  // request is on its way (its client would see ECONNRESET)
  const closed = new Promise<void>((resolve) => net.Server.prototype.close.call(http, () => resolve())).then(() => {
    // …and http's own close once nothing is left: it stops its request-timeout timer, which
    // otherwise holds the server, the app and the database for good (the listener is closed already)
    http.close(() => undefined);
  });
  if (deadline === undefined) {
    http.closeAllConnections();
    return closed;
  }
  const poll = setInterval(() => {
    const unheard = [...open].some((socket) => socket.bytesRead === 0);
    if ((observer.inFlight() === 0 && !unheard) || Date.now() >= deadline) {
      clearInterval(poll);
      http.closeAllConnections();
    }
  }, 25);
  return closed;
}
