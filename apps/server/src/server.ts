/**
 * Starts Warden: database → migrations → bootstrap key → HTTP API, and, on the embedded
 * database, the local admin channel through which the CLI reaches it while the server holds it.
 */
import type { AddressInfo } from 'node:net';
import { createApp } from './app.ts';
import { startAdminChannel } from './admin/channel.ts';
import { type Config, loadConfig } from './config.ts';
import { type Database, openDatabase } from './db/database.ts';
import { migrate } from './db/migrate.ts';
import { ensureBootstrapKey } from './features/workspaces/workspaces.service.ts';
import { createLogger, type Logger } from './logger.ts';

export interface RunningServer {
  url: string;
  database: Database;
  close(): Promise<void>;
}

export async function startServer(overrides: Partial<Config> = {}, logger: Logger = createLogger()): Promise<RunningServer> {
  const config = { ...loadConfig(), ...overrides };
  const database = await openDatabase({ databaseUrl: config.databaseUrl, dataDir: config.dataDir });
  await migrate(database);
  if (config.bootstrapKey) await ensureBootstrapKey(database.db, config.bootstrapKey);
  const app = createApp({ config, database, logger });
  const http = app.listen(config.port, config.host);
  await new Promise<void>((resolve, reject) => {
    http.once('listening', resolve);
    http.once('error', reject);
  });
  const admin = database.kind === 'pglite' && !config.dataDir.startsWith('memory://') ? await startAdminChannel(config.dataDir, database, logger) : undefined;
  const { port } = http.address() as AddressInfo;
  const url = `http://${config.host}:${port}/api/v1`;
  logger.info('warden listening', { url, database: database.kind });
  return {
    url,
    database,
    close: async () => {
      await admin?.close();
      await new Promise<void>((resolve) => {
        http.close(() => resolve());
        http.closeAllConnections();
      });
      await database.close();
    },
  };
}
