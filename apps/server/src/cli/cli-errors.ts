/**
 * What the CLI prints when a command fails: one line on stderr, never a stack trace (set
 * WARDEN_LOG_LEVEL=debug for it), each error code once, and in the seconds while a server
 * starts a line that says so instead of a socket's or a driver's error.
 */

/** A failure the CLI explains itself: printed as it is. */
export class CliError extends Error {}

/** Bad arguments: exit 2. */
export class UsageError extends Error {}

/** Errors of a socket that nothing listens on: the command was not delivered. */
const CONNECTION_CODES = new Set(['ECONNREFUSED', 'ENOENT']);

/** Whether a send to the server's admin channel failed because nothing listens there (yet, or any more). */
export const isChannelClosed = (error: unknown): boolean => CONNECTION_CODES.has((error as NodeJS.ErrnoException | null)?.code ?? '');

/** `a: a: b` → `a: b`: a message wrapped twice by layers that each prefixed the same code. */
export function onceEach(message: string): string {
  let text = message;
  for (let i = 0; i < 10; i++) {
    const repeated = /^(.{1,80}?: )\1/.exec(text);
    if (!repeated) break;
    text = text.slice((repeated[1] as string).length);
  }
  return text;
}

/** One line for a failed command, from what it threw. */
export function describeFailure(error: unknown, env: NodeJS.ProcessEnv, direct: boolean): string {
  const err = error instanceof Error ? error : new Error(String(error));
  const code = (err as NodeJS.ErrnoException).code;
  let message: string;
  if (err instanceof CliError) message = err.message;
  else if (code === 'ECONNREFUSED' && env.DATABASE_URL)
    message = 'cannot reach the database at DATABASE_URL (connection refused): is PostgreSQL running?';
  else if (code === '57P03' || /the database system is (starting up|shutting down)/.test(err.message))
    message = 'the database is starting up or shutting down; retry in a moment';
  else message = err.message || err.name;
  message = onceEach(message.split('\n')[0]?.trim() ?? '');
  // On PostgreSQL the CLI checks egress with its own environment: say which variable it needs.
  if (direct && message.includes('WARDEN_EGRESS_ALLOWLIST')) {
    const own = env.WARDEN_EGRESS_ALLOWLIST ? `is '${env.WARDEN_EGRESS_ALLOWLIST}'` : 'is not set';
    message += `; this command checks with its own environment, where WARDEN_EGRESS_ALLOWLIST ${own}: run it with the server's WARDEN_EGRESS_ALLOWLIST`;
  }
  return `warden: ${message}`;
}
