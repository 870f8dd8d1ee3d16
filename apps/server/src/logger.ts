/**
 * Structured JSON lines on stderr (pino): `{"level":"info","time":"…","pid":…,"message":"…",…fields}`.
 * Never log a secret: callers pass ids and codes, not keys; and whatever a caller passes by
 * mistake under a secret's name (or a request's credential headers) is redacted by the one list
 * below, LOG_REDACT_PATHS, not by each caller's habit.
 */
import pino, { type DestinationStream, type Level, type LevelWithSilent } from 'pino';

export type LogLevel = LevelWithSilent;
export const LOG_LEVELS: readonly LogLevel[] = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'];

/** What callers log through; the optional members are there on createLogger's loggers (a test's stand-in may omit them). */
export interface Logger {
  info(message: string, fields?: Record<string, unknown>): void;
  error(message: string, fields?: Record<string, unknown>): void;
  warn?(message: string, fields?: Record<string, unknown>): void;
  debug?(message: string, fields?: Record<string, unknown>): void;
  /** Whether a line at `level` would be written (so callers skip building one that would not); absent: info and error are. */
  enabled?(level: Level): boolean;
}

/** Field names whose values are secrets wherever they appear (top level or one object down). */
const SECRET_FIELDS = [
  'secret',
  'secrets',
  'key',
  'api_key',
  'apiKey',
  'agentKey',
  'agent_key',
  'password',
  'token',
  'access_token',
  'refresh_token',
  'authorization',
  'cookie',
  'set-cookie',
  'x-warden-agent-key',
  'master_key',
  'masterKey',
  'bootstrapKey',
  'signing_key',
  'signingKey',
  'csrf',
  'csrf_token',
  'x-csrf-token',
];

/** The one place that says what is never written: secret fields and credential headers, however nested in a `headers` object. */
export const LOG_REDACT_PATHS: readonly string[] = [
  ...SECRET_FIELDS.flatMap((name) => [`["${name}"]`, `*["${name}"]`]),
  ...['authorization', 'cookie', 'set-cookie', 'x-warden-agent-key', 'x-csrf-token'].flatMap((header) => [
    `headers["${header}"]`,
    `*.headers["${header}"]`,
  ]),
];

/** An Error as a plain object (name, message, code, stack; its cause one level down). */
function errorFields(error: Error, depth = 0): Record<string, unknown> {
  const out: Record<string, unknown> = { name: error.name, message: error.message };
  const code = (error as { code?: unknown }).code;
  if (typeof code === 'string' || typeof code === 'number') out.code = code;
  out.stack = error.stack;
  if (depth === 0 && error.cause instanceof Error) out.cause = errorFields(error.cause, 1);
  return out;
}

function serialise(fields: Record<string, unknown> | undefined): Record<string, unknown> {
  if (!fields) return {};
  let out: Record<string, unknown> | undefined;
  for (const [key, value] of Object.entries(fields)) {
    if (value instanceof Error) {
      out ??= { ...fields };
      out[key] = errorFields(value);
    }
  }
  return out ?? fields;
}

export interface LoggerOptions {
  /** WARDEN_LOG_LEVEL (default info). */
  level?: LogLevel;
  /** Where lines go (default stderr, written synchronously so that no line is lost at exit). */
  destination?: DestinationStream;
}

export function createLogger(silent = false, options: LoggerOptions = {}): Logger {
  const log = pino(
    {
      level: silent ? 'silent' : (options.level ?? 'info'),
      messageKey: 'message',
      base: { pid: process.pid },
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
      redact: { paths: [...LOG_REDACT_PATHS], censor: '[redacted]' },
    },
    options.destination ?? pino.destination({ fd: 2, sync: true }),
  );
  return {
    info: (message, fields) => log.info(serialise(fields), message),
    error: (message, fields) => log.error(serialise(fields), message),
    warn: (message, fields) => log.warn(serialise(fields), message),
    debug: (message, fields) => log.debug(serialise(fields), message),
    enabled: (level) => log.isLevelEnabled(level),
  };
}

export function parseLogLevel(raw: string | undefined): LogLevel {
  if (raw === undefined || raw === '') return 'info';
  const level = raw.toLowerCase() as LogLevel;
  if (!LOG_LEVELS.includes(level)) throw new Error(`WARDEN_LOG_LEVEL must be one of ${LOG_LEVELS.join(', ')}, got '${raw}'`);
  return level;
}
