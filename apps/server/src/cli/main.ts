#!/usr/bin/env -S npx tsx
/**
 * The `warden` CLI (`npm run warden -- …`):
 *   warden workspaces create --slug S [--name N] [--json]
 *   warden keys create --workspace S --permissions a,b|* [--name N] [--json]
 *   warden keys list --workspace S [--json]
 *   warden keys revoke ID [--json]
 *   warden migrate [--json]
 * With DATABASE_URL it talks to PostgreSQL directly. On the embedded database it goes
 * through the running server's admin channel when a server holds the data directory, and
 * opens the directory itself otherwise.
 */
import { parseArgs } from 'node:util';
import { sendAdminCommand } from '../admin/channel.ts';
import { type AdminCommand, isAdminCommand, runAdminCommand } from '../admin/commands.ts';
import { loadConfig } from '../config.ts';
import { lockHolder } from '../db/data-dir-lock.ts';
import { openDatabase } from '../db/database.ts';
import { migrate } from '../db/migrate.ts';
import { AdminError } from '../features/workspaces/workspaces.service.ts';

const USAGE = `usage:
  warden workspaces create --slug S [--name N] [--json]
  warden keys create --workspace S --permissions a,b|* [--name N] [--json]
  warden keys list --workspace S [--json]
  warden keys revoke ID [--json]
  warden migrate [--json]`;

async function run(command: AdminCommand, args: Record<string, string | undefined>): Promise<unknown> {
  const config = loadConfig();
  if (!config.databaseUrl && lockHolder(config.dataDir) !== null) return sendAdminCommand(config.dataDir, command, args);
  const database = await openDatabase({ databaseUrl: config.databaseUrl, dataDir: config.dataDir, poolSize: 1 });
  try {
    if (command !== 'migrate') await migrate(database);
    return await runAdminCommand(database, command, args);
  } finally {
    await database.close();
  }
}

function printHuman(command: AdminCommand, result: unknown): void {
  const r = result as Record<string, unknown>;
  switch (command) {
    case 'keys.create':
      console.log(`key ${r.id} for workspace ${r.workspace} (${(r.permissions as string[]).join(', ')})`);
      console.log(`${r.key}\n(shown once: store it now)`);
      break;
    case 'workspaces.create':
      console.log(`workspace ${r.slug} created (${r.id})`);
      break;
    case 'keys.revoke':
      console.log(`key ${r.id} revoked`);
      break;
    case 'migrate':
      console.log((r.applied as string[]).length ? `applied: ${(r.applied as string[]).join(', ')}` : 'up to date');
      break;
    default:
      console.log(JSON.stringify(result, null, 2));
  }
}

async function main(argv: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      json: { type: 'boolean' },
      slug: { type: 'string' },
      name: { type: 'string' },
      workspace: { type: 'string' },
      permissions: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  const [group, verb, id] = positionals;
  const command = verb && group !== 'migrate' ? `${group}.${verb}` : (group ?? '');
  if (values.help || !isAdminCommand(command)) {
    console.error(USAGE);
    return values.help ? 0 : 2;
  }
  const { json, help: _help, ...args } = values;
  const result = await run(command, { ...args, id });
  if (json) console.log(JSON.stringify(result));
  else printHuman(command, result);
  return 0;
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (error: unknown) => {
    if (error instanceof AdminError || (error as Error).name === 'TypeError') console.error(`warden: ${(error as Error).message}`);
    else console.error(error);
    process.exit(1);
  },
);
