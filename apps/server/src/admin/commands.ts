/**
 * Admin commands (workspaces, keys, migrations, the audit export): what the CLI does. They run
 * wherever the database is open: in the CLI process itself, or, when a server holds the
 * embedded database, inside that server through the admin channel.
 */
import { loadConfig } from '../config.ts';
import type { Database } from '../db/database.ts';
import { migrate } from '../db/migrate.ts';
import { type AuditLogKeys, auditLogKeys, ExportCursorError, exportPage } from '../features/audit/audit-export.ts';
import { billingService } from '../features/billing/billing.service.ts';
import type { CredentialsService } from '../features/credentials/credentials.service.ts';
import { AdminError, parsePermissions, workspacesService } from '../features/identity/workspaces.service.ts';
import type { WebhookService } from '../features/webhooks/webhooks.service.ts';
import { CLI_ACTOR } from '../shared/context.ts';
import { ApiError } from '../shared/errors.ts';

type Args = Record<string, string | undefined>;

/** What admin commands act on: the database and the webhook service built on it. */
export interface AdminContext {
  database: Database;
  webhooks: WebhookService;
  /** Upstream credentials (`credentials set|list|delete`): absent where no master key is loaded. */
  credentials?: CredentialsService;
  /**
   * The audit log's name and signing key, for the export's header; without them (the admin
   * channel's context) they are read from this process's configuration, a key never created.
   */
  auditLog?: AuditLogKeys;
}

/**
 * The services the commands use, on the context's database: stateless, so built per command
 * here rather than by the server's composition root, which the CLI does not load.
 */
const adminServices = ({ database }: AdminContext) => ({
  workspaces: workspacesService(database.db),
  billing: billingService(database.db),
});

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

function credentialsOf(context: AdminContext): CredentialsService {
  if (!context.credentials) throw new AdminError('upstream credentials are not available here');
  return context.credentials;
}

/** The brokered secret: `--header H` makes it an API-key header, else a bearer token. It never comes from argv (cli.ts reads it from stdin or the environment). */
const authOf = (args: Args) =>
  args.header
    ? { type: 'header' as const, header: args.header, secret: required(args, 'secret') }
    : { type: 'bearer' as const, secret: required(args, 'secret') };

/** The id of the workspace named by --workspace. */
const workspaceId = (context: AdminContext, args: Args) => adminServices(context).workspaces.workspaceIdOf(required(args, 'workspace'));

export const adminCommands = {
  'workspaces.create': (context: AdminContext, args: Args) =>
    adminServices(context).workspaces.createWorkspace(required(args, 'slug'), args.name),
  'keys.create': (context: AdminContext, args: Args) =>
    adminServices(context).workspaces.createApiKey(
      {
        workspace: required(args, 'workspace'),
        permissions: parsePermissions(required(args, 'permissions')),
        name: args.name,
      },
      CLI_ACTOR,
    ),
  'keys.revoke': (context: AdminContext, args: Args) => adminServices(context).workspaces.revokeApiKey(required(args, 'id'), CLI_ACTOR),
  'keys.list': (context: AdminContext, args: Args) => adminServices(context).workspaces.listApiKeys(required(args, 'workspace')),
  migrate: async ({ database }: AdminContext) => ({ applied: await migrate(database) }),
  'webhooks.create': async (context: AdminContext, args: Args) => {
    const created = await asAdmin(
      context.webhooks.create(
        await workspaceId(context, args),
        {
          url: required(args, 'url'),
          events: required(args, 'events')
            .split(',')
            .map((e) => e.trim()),
          description: args.description,
        },
        CLI_ACTOR,
      ),
    );
    return { ...created.endpoint, secret: created.secret };
  },
  'webhooks.list': async (context: AdminContext, args: Args) =>
    (await context.webhooks.list(await workspaceId(context, args), { limit: 100 })).data,
  'webhooks.pause': async (context: AdminContext, args: Args) =>
    asAdmin(context.webhooks.update(await workspaceId(context, args), required(args, 'id'), { paused: true }, CLI_ACTOR)),
  'webhooks.resume': async (context: AdminContext, args: Args) =>
    asAdmin(context.webhooks.update(await workspaceId(context, args), required(args, 'id'), { paused: false }, CLI_ACTOR)),
  'webhooks.delete': async (context: AdminContext, args: Args) =>
    asAdmin(context.webhooks.remove(await workspaceId(context, args), required(args, 'id'), CLI_ACTOR)),
  /** Stores a credential, or rotates its secret (and replaces its hosts when --hosts is given). */
  'credentials.set': async (context: AdminContext, args: Args) => {
    const credentials = credentialsOf(context);
    const id = await workspaceId(context, args);
    const name = required(args, 'name');
    const hosts = args.hosts?.split(',').map((h) => h.trim());
    const exists = await credentials.get(id, name).then(
      () => true,
      () => false,
    );
    if (exists) return asAdmin(credentials.update(id, name, { auth: authOf(args), ...(hosts ? { hosts } : {}) }, CLI_ACTOR));
    return asAdmin(credentials.create(id, { name, hosts: hosts ?? [required(args, 'hosts')], auth: authOf(args) }, CLI_ACTOR));
  },
  'credentials.list': async (context: AdminContext, args: Args) =>
    (await credentialsOf(context).list(await workspaceId(context, args), { limit: 100 })).data,
  'credentials.delete': async (context: AdminContext, args: Args) =>
    asAdmin(credentialsOf(context).remove(await workspaceId(context, args), required(args, 'name'), CLI_ACTOR)),
  'billing.set-plan': async (context: AdminContext, args: Args) =>
    asAdmin(adminServices(context).billing.setPlan(await workspaceId(context, args), required(args, 'plan'), CLI_ACTOR)),
  /** One page of the export (`cursor`: the previous page's); the CLI asks until the cursor is null. */
  'audit.export': async (context: AdminContext, args: Args) => {
    const id = await workspaceId(context, args);
    try {
      return await exportPage(context.database.db, context.auditLog ?? auditLogKeys(loadConfig()), id, args.cursor);
    } catch (error) {
      if (error instanceof ExportCursorError) throw new AdminError(error.message);
      throw error;
    }
  },
} satisfies Record<string, (context: AdminContext, args: Args) => Promise<unknown>>;

export type AdminCommand = keyof typeof adminCommands;

export function isAdminCommand(name: string): name is AdminCommand {
  return Object.hasOwn(adminCommands, name);
}

export async function runAdminCommand(context: AdminContext, name: string, args: Args): Promise<unknown> {
  if (!isAdminCommand(name)) throw new AdminError(`unknown command '${name}'`);
  return adminCommands[name](context, args);
}
