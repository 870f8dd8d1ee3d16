#!/usr/bin/env -S npx tsx
/**
 * The `warden` CLI (`npm run warden -- …`):
 *   warden workspaces create --slug S [--name N] [--json]
 *   warden keys create --workspace S --permissions a,b|* [--name N] [--json]
 *   warden keys list --workspace S [--json]
 *   warden keys revoke ID [--json]
 *   warden migrate [--json]
 *   warden webhooks create --workspace S --url U --events '*'|a,b [--description D] [--json]
 *   warden webhooks list --workspace S [--json]
 *   warden webhooks pause|resume|delete ID --workspace S [--json]
 *   warden billing set-plan --workspace S --plan P [--json]
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
import { createEgressGuard } from '../egress/guard.ts';
import { createSecretBox, loadMasterKey } from '../features/webhooks/secrets.ts';
import { WebhookService } from '../features/webhooks/webhooks.service.ts';
import { AdminError } from '../features/workspaces/workspaces.service.ts';

const USAGE = `usage:
  warden workspaces create --slug S [--name N] [--json]
  warden keys create --workspace S --permissions a,b|* [--name N] [--json]
  warden keys list --workspace S [--json]
  warden keys revoke ID [--json]
  warden migrate [--json]
  warden webhooks create --workspace S --url U --events '*'|a,b [--description D] [--json]
  warden webhooks list --workspace S [--json]
  warden webhooks pause|resume|delete ID --workspace S [--json]
  warden billing set-plan --workspace S --plan P [--json]`;

async function run(command: AdminCommand, args: Record<string, string | undefined>): Promise<unknown> {
  const config = loadConfig();
  if (!config.databaseUrl && lockHolder(config.dataDir) !== null) return sendAdminCommand(config.dataDir, command, args);
  const database = await openDatabase({ databaseUrl: config.databaseUrl, dataDir: config.dataDir, poolSize: 1 });
  const egress = createEgressGuard(config.egressAllowlist);
  try {
    if (command !== 'migrate') await migrate(database);
    const webhooks = new WebhookService(database.db, createSecretBox(loadMasterKey(config.masterKey, config.dataDir)), egress);
    return await runAdminCommand({ database, webhooks }, command, args);
  } finally {
    await egress.close();
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
    case 'webhooks.create':
      console.log(`webhook ${r.id} → ${r.url} (${(r.events as string[]).join(', ')})`);
      console.log(`signing secret: ${r.secret}\n(shown once: store it now)`);
      break;
    case 'billing.set-plan':
      console.log(`plan: ${r.previous_plan} → ${r.plan}`);
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
      url: { type: 'string' },
      events: { type: 'string' },
      description: { type: 'string' },
      plan: { type: 'string' },
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
