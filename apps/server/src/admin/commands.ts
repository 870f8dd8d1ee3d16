/**
 * Admin commands (workspaces, keys, migrations): what the CLI does. They run wherever the
 * database is open: in the CLI process itself, or, when a server holds the embedded
 * database, inside that server through the admin channel.
 */
import type { Database } from '../db/database.ts';
import { migrate } from '../db/migrate.ts';
import { setPlan, type WebhookService } from '../features/webhooks/webhooks.service.ts';
import { findWorkspaceBySlug } from '../features/workspaces/workspaces.repository.ts';
import {
  AdminError,
  createApiKey,
  createWorkspace,
  listApiKeys,
  parsePermissions,
  revokeApiKey,
} from '../features/workspaces/workspaces.service.ts';
import { ApiError } from '../http/errors.ts';

type Args = Record<string, string | undefined>;

/** What admin commands act on: the database and the services built on it. */
export interface AdminContext {
  database: Database;
  webhooks: WebhookService;
}

async function workspaceId(database: Database, args: Args): Promise<string> {
  const slug = required(args, 'workspace');
  const workspace = await findWorkspaceBySlug(database.db, slug);
  if (!workspace) throw new AdminError(`workspace '${slug}' does not exist`);
  return workspace.id;
}

/** Service errors (bad URL, unknown event…) reach the CLI user as plain messages. */
async function asAdmin<T>(work: Promise<T>): Promise<T> {
  try {
    return await work;
  } catch (error) {
    if (error instanceof ApiError && error.status < 500) throw new AdminError(error.message);
    throw error;
  }
}

function required(args: Args, name: string): string {
  const value = args[name];
  if (!value) throw new AdminError(`--${name} is required`);
  return value;
}

export const adminCommands = {
  'workspaces.create': ({ database }: AdminContext, args: Args) => createWorkspace(database.db, required(args, 'slug'), args.name),
  'keys.create': ({ database }: AdminContext, args: Args) =>
    createApiKey(database.db, {
      workspace: required(args, 'workspace'),
      permissions: parsePermissions(required(args, 'permissions')),
      name: args.name,
    }),
  'keys.revoke': ({ database }: AdminContext, args: Args) => revokeApiKey(database.db, required(args, 'id')),
  'keys.list': ({ database }: AdminContext, args: Args) => listApiKeys(database.db, required(args, 'workspace')),
  migrate: async ({ database }: AdminContext) => ({ applied: await migrate(database) }),
  'webhooks.create': async ({ database, webhooks }: AdminContext, args: Args) => {
    const created = await asAdmin(
      webhooks.create(await workspaceId(database, args), {
        url: required(args, 'url'),
        events: required(args, 'events')
          .split(',')
          .map((e) => e.trim()),
        description: args.description,
      }),
    );
    return { ...created.endpoint, secret: created.secret };
  },
  'webhooks.list': async ({ database, webhooks }: AdminContext, args: Args) =>
    (await webhooks.list(await workspaceId(database, args), { limit: 100 })).data,
  'webhooks.pause': async ({ database, webhooks }: AdminContext, args: Args) =>
    asAdmin(webhooks.update(await workspaceId(database, args), required(args, 'id'), { paused: true })),
  'webhooks.resume': async ({ database, webhooks }: AdminContext, args: Args) =>
    asAdmin(webhooks.update(await workspaceId(database, args), required(args, 'id'), { paused: false })),
  'webhooks.delete': async ({ database, webhooks }: AdminContext, args: Args) =>
    asAdmin(webhooks.remove(await workspaceId(database, args), required(args, 'id'))),
  'billing.set-plan': async ({ database }: AdminContext, args: Args) =>
    asAdmin(setPlan(database.db, await workspaceId(database, args), required(args, 'plan'))),
} satisfies Record<string, (context: AdminContext, args: Args) => Promise<unknown>>;

export type AdminCommand = keyof typeof adminCommands;

export function isAdminCommand(name: string): name is AdminCommand {
  return Object.hasOwn(adminCommands, name);
}

export async function runAdminCommand(context: AdminContext, name: string, args: Args): Promise<unknown> {
  if (!isAdminCommand(name)) throw new AdminError(`unknown command '${name}'`);
  return adminCommands[name](context, args);
}
