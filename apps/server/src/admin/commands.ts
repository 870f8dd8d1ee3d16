/**
 * Admin commands (workspaces, keys, migrations): what the CLI does. They run wherever the
 * database is open: in the CLI process itself, or, when a server holds the embedded
 * database, inside that server through the admin channel.
 */
import type { Database } from '../db/database.ts';
import { migrate } from '../db/migrate.ts';
import { AdminError, createApiKey, createWorkspace, listApiKeys, parsePermissions, revokeApiKey } from '../features/workspaces/workspaces.service.ts';

type Args = Record<string, string | undefined>;

function required(args: Args, name: string): string {
  const value = args[name];
  if (!value) throw new AdminError(`--${name} is required`);
  return value;
}

export const adminCommands = {
  'workspaces.create': (database: Database, args: Args) => createWorkspace(database.db, required(args, 'slug'), args.name),
  'keys.create': (database: Database, args: Args) =>
    createApiKey(database.db, { workspace: required(args, 'workspace'), permissions: parsePermissions(required(args, 'permissions')), name: args.name }),
  'keys.revoke': (database: Database, args: Args) => revokeApiKey(database.db, required(args, 'id')),
  'keys.list': (database: Database, args: Args) => listApiKeys(database.db, required(args, 'workspace')),
  migrate: async (database: Database) => ({ applied: await migrate(database) }),
} satisfies Record<string, (database: Database, args: Args) => Promise<unknown>>;

export type AdminCommand = keyof typeof adminCommands;

export function isAdminCommand(name: string): name is AdminCommand {
  return Object.hasOwn(adminCommands, name);
}

export async function runAdminCommand(database: Database, name: string, args: Args): Promise<unknown> {
  if (!isAdminCommand(name)) throw new AdminError(`unknown command '${name}'`);
  return adminCommands[name](database, args);
}
