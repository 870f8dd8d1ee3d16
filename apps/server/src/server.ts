/**
 * Starts Warden: database → migrations → what the composition root builds on it
 * (composition.ts) → bootstrap key → background workers → HTTP API, and, on the embedded
 * database, the local admin channel through which the CLI reaches it while the server holds it.
 */
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

export interface RunningServer {
  url: string;
  database: Database;
  webhooks: WebhookService;
  close(): Promise<void>;
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
  const { services, keys, rateLimitStore, sealer, delivery, mcp, egress } = compose({ config, database, logger, redis });
  if (config.bootstrapKey) await services.workspaces.ensureBootstrapKey(config.bootstrapKey);
  await sealer.start();
  delivery.start();
  // Start counting in Redis from the first request (until ready, the in-memory insurance counts).
  if (redis)
    await Promise.race([new Promise((ready) => redis.once('ready', ready)), new Promise((later) => setTimeout(later, 5_000).unref())]);
  const stopListening = await database.listen(IDENTITY_CHANNEL, keys.handlers);
  const app = createApp({ config, logger, services, rateLimitStore, keys });
  const http = createHttpServer(app).listen(config.port, config.host);
  await new Promise<void>((resolve, reject) => {
    http.once('listening', resolve);
    http.once('error', reject);
  });
  const webhooks = services.webhooks;
  const admin =
    database.kind === 'pglite' && !config.dataDir.startsWith('memory://')
      ? await startAdminChannel(config.dataDir, { database, webhooks }, logger)
      : undefined;
  const { port } = http.address() as AddressInfo;
  const url = `http://${config.host}:${port}/api/v1`;
  logger.info('warden listening', { url, database: database.kind });
  return {
    url,
    database,
    webhooks,
    close: async () => {
      clearInterval(partitionTimer);
      await admin?.close();
      await new Promise<void>((resolve) => {
        http.close(() => resolve());
        http.closeAllConnections();
      });
      await delivery.stop();
      redis?.disconnect();
      await mcp.close();
      await egress.close();
      await sealer.stop();
      await stopListening();
      await database.close();
    },
  };
}
