/**
 * Starts Warden: database → migrations → what the composition root builds on it
 * (composition.ts) → bootstrap key → background workers → HTTP API, and, on the embedded
 * database, the local admin channel through which the CLI reaches it while the server holds it.
 */
import cluster from 'node:cluster';
import type { AddressInfo } from 'node:net';
import { Redis } from 'ioredis';
import { startAdminChannel } from './admin/channel.ts';
import { createApp } from './app.ts';
import { compose } from './composition.ts';
import { type Config, checkBootstrapKey, loadConfig } from './config.ts';
import { type Database, openDatabase } from './db/database.ts';
import { migrate } from './db/migrate.ts';
import { ensureAuditPartitions } from './db/partitions.ts';
import type { WebhookService } from './features/webhooks/webhooks.service.ts';
import { createHttpServer } from './http/http-server.ts';
import { IDENTITY_CHANNEL } from './http/key-cache.ts';
import { createLogger, type Logger } from './logger.ts';
import { createHttpObserver } from './observability/http.ts';
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
   * Stops. With `graceMs` (a shutdown: SIGTERM), first drains: readiness answers 503, no new
   * connection is accepted, requests under way finish (their audit commits with them) and
   * webhook deliveries under way finish or are released, all within `graceMs`; without it,
   * connections are closed at once.
   */
  close(graceMs?: number): Promise<void>;
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
  const { services, keys, rateLimitStore, sealer, delivery, auditWriter, mcp, egress, simulations } = compose({
    config,
    database,
    logger,
    redis,
    telemetry: metrics,
  });
  if (config.bootstrapKey) await services.workspaces.ensureBootstrapKey(config.bootstrapKey);
  await sealer.start();
  delivery.start();
  // Start counting in Redis from the first request (until ready, the in-memory insurance counts).
  if (redis)
    await Promise.race([new Promise((ready) => redis.once('ready', ready)), new Promise((later) => setTimeout(later, 5_000).unref())]);
  const stopListening = await database.listen(IDENTITY_CHANNEL, keys.handlers);
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
  const app = createApp({ config, logger, services, rateLimitStore, keys, observer, probes });
  const http = createHttpServer(app).listen(config.port, config.host);
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
    close: async (graceMs?: number) => {
      const deadline = graceMs === undefined ? undefined : Date.now() + graceMs;
      probes.stopping();
      observer.startDraining();
      clearInterval(partitionTimer);
      // Stop accepting first; the admin channel closes meanwhile.
      const httpClosed = new Promise<void>((resolve) => {
        http.close(() => resolve());
        if (deadline === undefined) {
          http.closeAllConnections();
          return;
        }
        // Idle keep-alive connections close now, busy ones once their answer (Connection: close)
        // is written; whatever is still open at the deadline is cut.
        http.closeIdleConnections();
        const poll = setInterval(() => {
          http.closeIdleConnections();
          if (observer.inFlight() === 0 || Date.now() >= deadline) {
            clearInterval(poll);
            http.closeAllConnections();
          }
        }, 25);
      });
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
      await mcp.close();
      await egress.close();
      await sealer.stop();
      const t3 = performance.now();
      await simulations.close();
      await services.audit.close();
      await stopListening();
      await database.close();
      if (graceMs !== undefined) {
        const ms = (a: number, b: number) => Math.round(b - a);
        logger.info('warden closed', {
          requestsMs: ms(t0, t1),
          webhooksMs: ms(t1, t2),
          sealerMs: ms(t2, t3),
          restMs: ms(t3, performance.now()),
        });
      }
    },
  };
}
