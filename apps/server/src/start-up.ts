/**
 * What `npm start` tells a person at start: one line with the fix for the failures that have
 * one (the data directory held by another process, the port taken or not permitted) instead
 * of a stack trace, and, when the server has no key to offer, the exact command that makes one.
 */
import { createServer } from 'node:net';
import { runAdminCommand } from './admin/commands.ts';
import type { Config } from './config.ts';
import { DataDirLockedError } from './db/data-dir-lock.ts';
import type { Database } from './db/database.ts';
import type { WebhookService } from './features/webhooks/webhooks.service.ts';

type StartConfig = Pick<Config, 'port' | 'host' | 'dataDir' | 'databaseUrl'> & Partial<Pick<Config, 'viaWithNode24'>>;

/** The line for a listen error, or undefined when it is not one with a known fix. */
function listenFailure(error: unknown, { port, host }: StartConfig): string | undefined {
  const code = (error as NodeJS.ErrnoException | undefined)?.code;
  if (code === 'EADDRINUSE') {
    return `port ${port} on ${host} is already in use: stop what listens there, or start on another port, e.g. PORT=${port < 65_535 ? port + 1 : 8080} npm start`;
  }
  if (code === 'EACCES') return `not permitted to listen on port ${port} on ${host}: use a port above 1023, e.g. PORT=8080 npm start`;
  if (code === 'EADDRNOTAVAIL')
    return `${host} is not an address of this machine: set HOST to one of its addresses, e.g. HOST=127.0.0.1 npm start`;
  return undefined;
}

/** Tries the port before the database is opened; the line to print when it cannot be used. */
export async function portFailure(config: StartConfig): Promise<string | undefined> {
  if (config.port === 0) return undefined;
  const probe = createServer();
  try {
    await new Promise<void>((resolve, reject) => {
      probe.once('error', reject);
      probe.listen({ port: config.port, host: config.host, exclusive: true }, resolve);
    });
  } catch (error) {
    return listenFailure(error, config);
  }
  await new Promise((resolve) => probe.close(resolve));
  return undefined;
}

/** The line for an error startServer threw, when it has a known fix (else undefined: the error as is). */
export function startFailure(error: unknown, config: StartConfig): string | undefined {
  if (error instanceof DataDirLockedError) {
    return (
      `the data directory ${error.dataDir} is in use by process ${error.pid} (another Warden server?): ` +
      `stop that process, or give this server a directory of its own, e.g. WARDEN_DATA_DIR=${error.dataDir.replace(/\/+$/, '')}-2 npm start`
    );
  }
  return listenFailure(error, config);
}

/**
 * How to get an API key when the server was started without WARDEN_BOOTSTRAP_KEY and workspace
 * `default` has no active key: the CLI command, for the same data directory. Undefined when
 * such a key exists.
 */
export async function keyHint(database: Database, webhooks: WebhookService, config: StartConfig): Promise<string | undefined> {
  let keys: { revoked_at: string | null }[] | undefined;
  try {
    keys = (await runAdminCommand({ database, webhooks }, 'keys.list', { workspace: 'default' })) as { revoked_at: string | null }[];
  } catch {
    keys = undefined; // no workspace `default`
  }
  if (keys?.some((key) => key.revoked_at === null)) return undefined;
  const dir = /^[\w./-]+$/.test(config.dataDir) ? config.dataDir : `'${config.dataDir.replace(/'/g, `'\\''`)}'`;
  const env = config.databaseUrl || config.dataDir === './.data' ? '' : `WARDEN_DATA_DIR=${dir} `;
  // a command that works as printed on this machine: through tools/with-node24 when its own Node is older
  const npm = config.viaWithNode24 ? 'tools/with-node24 npm' : 'npm';
  const create = `${env}${npm} run warden -- keys create --workspace default --permissions '*'`;
  const command = keys ? create : `${env}${npm} run warden -- workspaces create --slug default && ${create}`;
  const where = config.databaseUrl ? ' (with the same DATABASE_URL)' : '';
  return `no API key yet: create one in another terminal${where} with: ${command}`;
}
