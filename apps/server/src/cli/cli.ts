/**
 * The `warden` CLI (`npm run warden -- …`); its commands and options: usage.ts.
 * `--json` prints one JSON document on stdout and nothing else (messages go to stderr); npm's own
 * `--json` (before `--`) counts too. Run through npm, use `npm run -s warden -- …` (or `npx warden
 * …`): plain `npm run` prints its banner on stdout first.
 * With DATABASE_URL it talks to PostgreSQL directly. On the embedded database it goes
 * through the running server's admin channel when a server holds the data directory, and
 * opens the directory itself otherwise. `audit export` reads the log a page per request (so
 * through the channel too) and writes it here, to --out or stdout. `audit verify` needs no
 * database: it checks an export against signed checkpoints with the public key alone
 * (docs/decisions/0011-audit-merkle-tree.md); it exits 0 when the log verifies, 1 when it
 * finds a problem, 2 on a usage error.
 */
import { once } from 'node:events';
import { createWriteStream, rmSync } from 'node:fs';
import { parseArgs } from 'node:util';
import type { AdminCommand } from '../admin/commands.ts';
import type { Config } from '../config.ts';
import type { ExportPage } from '../features/audit/audit-export.ts';
import { auditVerify } from './audit-verify.ts';
import { CliError, describeFailure, isChannelClosed, UsageError } from './cli-errors.ts';
import { printHuman } from './print-human.ts';
import { USAGE } from './usage.ts';

/**
 * What the commands on the database use, loaded by them only: `audit verify` runs without a
 * database and starts without loading its drivers.
 */
const databaseModules = async () => {
  const [channel, commands, lock, database, migrations, egress, auditExport, secrets, webhooks, credentials] = await Promise.all([
    import('../admin/channel.ts'),
    import('../admin/commands.ts'),
    import('../db/data-dir-lock.ts'),
    import('../db/database.ts'),
    import('../db/migrate.ts'),
    import('../egress/guard.ts'),
    import('../features/audit/audit-export.ts'),
    import('../features/webhooks/secrets.ts'),
    import('../features/webhooks/webhooks.service.ts'),
    import('../features/credentials/credentials.service.ts'),
  ]);
  return {
    ...channel,
    ...commands,
    ...lock,
    ...database,
    ...migrations,
    ...egress,
    ...auditExport,
    ...secrets,
    ...webhooks,
    ...credentials,
  };
};

type Args = Record<string, string | undefined>;

/** Where admin commands run, opened once for as many commands as the CLI sends. */
interface Connection {
  call(command: AdminCommand, args: Args): Promise<unknown>;
  close(): Promise<void>;
}

/** How long a command waits for a starting server's admin channel (it opens after the migrations), polled. */
const CHANNEL_WAIT_MS = 20_000;
const CHANNEL_POLL_MS = 200;
/** Whether this process opened the database itself (then it checks egress with its own environment). */
let direct = false;

/**
 * Through the admin channel of the server holding the data directory, waiting (bounded) while it
 * starts. A server that stops meanwhile never got the command: the directory is opened here
 * (`openHere`) and the command runs on it.
 */
function viaChannel(m: Awaited<ReturnType<typeof databaseModules>>, dataDir: string, openHere: () => Promise<Connection>): Connection {
  let opened: Promise<Connection> | undefined;
  const call = async (name: AdminCommand, args: Args): Promise<unknown> => {
    if (opened) return (await opened).call(name, args);
    const deadline = Date.now() + CHANNEL_WAIT_MS;
    for (;;) {
      try {
        return await m.sendAdminCommand(dataDir, name, args);
      } catch (error) {
        // refused or absent: the command was never delivered, so sending it again is safe
        if (!isChannelClosed(error)) throw error;
        const holder = m.lockHolder(dataDir);
        if (holder === null) {
          opened = openHere();
          return (await opened).call(name, args);
        }
        if (Date.now() >= deadline)
          throw new CliError(
            `the server (process ${holder}) holding ${dataDir} is still starting: its admin channel is not open yet; retry in a moment`,
          );
        await new Promise((later) => setTimeout(later, CHANNEL_POLL_MS));
      }
    }
  };
  return { call, close: async () => (opened ? (await opened).close() : undefined) };
}

async function connect(config: Config, command: AdminCommand): Promise<Connection> {
  const m = await databaseModules();
  const openHere = () => openDirect(m, config, command);
  if (!config.databaseUrl && m.lockHolder(config.dataDir) !== null) return viaChannel(m, config.dataDir, openHere);
  return openHere();
}

/** The database opened by this process; a server that took the directory meanwhile is used through its channel. */
async function openDirect(m: Awaited<ReturnType<typeof databaseModules>>, config: Config, command: AdminCommand): Promise<Connection> {
  let database: Awaited<ReturnType<typeof m.openDatabase>>;
  try {
    database = await m.openDatabase({ databaseUrl: config.databaseUrl, dataDir: config.dataDir, poolSize: 1 });
  } catch (error) {
    if (error instanceof m.DataDirLockedError)
      return viaChannel(m, config.dataDir, () =>
        Promise.reject(new CliError(`the server that held ${config.dataDir} has stopped; run the command again`)),
      );
    throw error;
  }
  direct = true;
  const egress = m.createEgressGuard(config.egressAllowlist);
  const close = async () => {
    await egress.close();
    await database.close();
  };
  try {
    if (command !== 'migrate') await m.migrate(database);
    const box = m.createSecretBox(m.loadMasterKey(config.masterKey, config.dataDir));
    const webhooks = new m.WebhookService(database.db, box, egress);
    const context = { database, webhooks, credentials: m.credentialsService(database.db, box), auditLog: m.auditLogKeys(config) };
    return { call: (name, args) => m.runAdminCommand(context, name, args), close };
  } catch (error) {
    await close();
    throw error;
  }
}

const loadConfig = async () => (await import('../config.ts')).loadConfig();

async function run(command: AdminCommand, args: Args): Promise<unknown> {
  const connection = await connect(await loadConfig(), command);
  try {
    return await connection.call(command, args);
  } finally {
    await connection.close();
  }
}

/**
 * `npm run warden -- … --json` prints npm's `> warden …` banner on stdout before the JSON; npm
 * leaves it out with `--silent` and moves it to stderr with its own `--json` (given before `--`,
 * which npm keeps and passes on as npm_config_json). Says so on stderr when the banner went to stdout.
 */
function warnAboutNpmBanner(what: string): void {
  const env = process.env;
  if (env.npm_lifecycle_event !== 'warden' || env.npm_config_loglevel === 'silent' || env.npm_config_json === 'true') return;
  console.error(
    `warden: npm printed its banner on stdout before the ${what}; for the ${what} alone run \`npm run -s warden -- …\` or \`npx warden …\``,
  );
}

// ---- audit export -------------------------------------------------------------------------------

async function auditExport(values: { workspace?: string | undefined; out?: string | undefined }, json: boolean): Promise<number> {
  if (!values.workspace) throw new UsageError('audit export needs --workspace S');
  const connection = await connect(await loadConfig(), 'audit.export');
  const out = values.out ? createWriteStream(values.out, { mode: 0o600 }) : process.stdout;
  const summary = {
    workspace: values.workspace,
    workspace_id: '',
    origin: '',
    tree_size: 0,
    events: 0,
    checkpoints: 0,
    out: values.out ?? null,
  };
  try {
    let cursor: string | undefined;
    do {
      const page = (await connection.call('audit.export', { workspace: values.workspace, cursor })) as ExportPage;
      let chunk = '';
      for (const line of page.lines) {
        chunk += `${JSON.stringify(line)}\n`;
        if (line.type === 'log')
          Object.assign(summary, { workspace_id: line.workspace_id, origin: line.origin, tree_size: line.tree_size });
        else if (line.type === 'event') summary.events++;
        else summary.checkpoints++;
      }
      if (!out.write(chunk)) await once(out, 'drain');
      cursor = page.cursor ?? undefined;
    } while (cursor !== undefined);
  } catch (error) {
    // A partial file would read as a log cut short: leave none.
    if (values.out) {
      out.destroy();
      rmSync(values.out, { force: true });
    }
    throw error;
  } finally {
    await connection.close();
  }
  if (!values.out) return 0; // stdout is the export itself
  await new Promise<void>((done, fail) => out.end((error?: Error | null) => (error ? fail(error) : done())));
  if (json) console.log(JSON.stringify(summary));
  else {
    console.log(
      `exported ${summary.origin}: ${summary.events} events (tree size ${summary.tree_size}), ${summary.checkpoints} checkpoints → ${values.out}`,
    );
  }
  return 0;
}

/** The secret of `credentials set`: WARDEN_CREDENTIAL_SECRET, else stdin (one trailing newline dropped), else a usage error. */
async function readSecret(): Promise<string> {
  const fromEnv = process.env.WARDEN_CREDENTIAL_SECRET;
  if (fromEnv) return fromEnv;
  if (process.stdin.isTTY) throw new UsageError('credentials set reads the secret from stdin or WARDEN_CREDENTIAL_SECRET');
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  const secret = Buffer.concat(chunks)
    .toString('utf8')
    .replace(/\r?\n$/, '');
  if (!secret) throw new UsageError('credentials set: no secret on stdin or in WARDEN_CREDENTIAL_SECRET');
  return secret;
}

// ---- main ---------------------------------------------------------------------------------------

function parse(argv: string[]) {
  try {
    return parseArgs({
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
        hosts: { type: 'string' },
        header: { type: 'string' },
        out: { type: 'string' },
        export: { type: 'string' },
        checkpoint: { type: 'string', multiple: true },
        proof: { type: 'string' },
        policy: { type: 'string' },
        'public-key': { type: 'string' },
        witness: { type: 'string', multiple: true },
        'witness-quorum': { type: 'string' },
        'data-dir': { type: 'string' },
        listen: { type: 'string' },
        'log-key': { type: 'string', multiple: true },
        'origin-prefix': { type: 'string' },
        'key-algorithm': { type: 'string' },
        junit: { type: 'string' },
        prune: { type: 'boolean' },
        force: { type: 'boolean' },
        'from-audit': { type: 'boolean' },
        since: { type: 'string' },
        limit: { type: 'string' },
        'what-if': { type: 'boolean' },
        'max-changed': { type: 'string' },
        'what-if-limit': { type: 'string' },
        yes: { type: 'boolean' },
        help: { type: 'boolean', short: 'h' },
      },
    });
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
}

async function main(argv: string[]): Promise<number> {
  const { values, positionals } = parse(argv);
  const [group, verb, id] = positionals;
  // npm's own --json (`npm run warden --json -- …`, or after the command without `--`) asks for JSON too.
  if (process.env.npm_config_json === 'true') values.json = true;
  if (values.json) warnAboutNpmBanner('JSON');
  else if (group === 'audit' && verb === 'export' && !values.out) warnAboutNpmBanner('export');
  const command = verb && group !== 'migrate' ? `${group}.${verb}` : (group ?? '');
  if (values.help) {
    console.error(USAGE);
    return 0;
  }
  if (command === 'audit.verify') return auditVerify(values, values.json === true);
  if (command === 'audit.prove') return (await import('./audit-prove.ts')).auditProve(id, values, values.json === true);
  if (command === 'witness') return (await import('./witness-command.ts')).runWitness(values, values.json === true);
  if (command === 'audit.export') return auditExport(values, values.json === true);
  if (command === 'policies.test') return (await import('./policies-command.ts')).policiesTest(id, values, values.json === true);
  if (command === 'policies.diff' || command === 'policies.apply')
    return (await import('./policies-command.ts')).policiesSync(verb as 'diff' | 'apply', id, values, values.json === true);
  if (command === 'policies.export') return (await import('./policies-workspace.ts')).policiesExport(id, values, values.json === true);
  if (command === 'policies.fixtures') return (await import('./policies-workspace.ts')).policiesFixtures(values, values.json === true);
  if (!(await import('../admin/commands.ts')).isAdminCommand(command)) {
    console.error(USAGE);
    return 2;
  }
  const {
    json,
    help: _help,
    checkpoint: _checkpoint,
    witness: _witness,
    'log-key': _logKey,
    junit: _junit,
    prune: _prune,
    force: _force,
    'from-audit': _fromAudit,
    'what-if': _whatIf,
    yes: _yes,
    ...args
  } = values;
  // a credential's NAME is the positional; its secret never comes from argv
  const extra =
    command === 'credentials.set' ? { name: id, secret: await readSecret() } : command === 'credentials.delete' ? { name: id } : {};
  const result = await run(command, { ...args, id, ...extra });
  if (json) console.log(JSON.stringify(result));
  else printHuman(command, result);
  return 0;
}

main(process.argv.slice(2)).then(
  async (code) => {
    // Piped stdout may still hold an export's last lines: exit once they are written.
    await new Promise<void>((done) => process.stdout.write('', () => done()));
    process.exit(code);
  },
  async (error: unknown) => {
    if (error instanceof UsageError) {
      console.error(`warden: ${error.message}\n${USAGE}`);
      process.exit(2);
    }
    console.error(describeFailure(error, process.env, direct));
    if (process.env.WARDEN_LOG_LEVEL === 'debug' || process.env.WARDEN_LOG_LEVEL === 'trace') console.error(error);
    process.exit(1);
  },
);
