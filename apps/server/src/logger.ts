/** Structured JSON lines on stderr. Never log a secret: callers pass ids and codes, not keys. */
export interface Logger {
  info(message: string, fields?: Record<string, unknown>): void;
  error(message: string, fields?: Record<string, unknown>): void;
}

function serialise(fields: Record<string, unknown> | undefined): Record<string, unknown> {
  if (!fields) return {};
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(fields)) {
    out[key] = value instanceof Error ? { name: value.name, message: value.message, stack: value.stack } : value;
  }
  return out;
}

export function createLogger(silent = false): Logger {
  const write = (level: string, message: string, fields?: Record<string, unknown>) => {
    if (silent) return;
    process.stderr.write(`${JSON.stringify({ time: new Date().toISOString(), level, message, ...serialise(fields) })}\n`);
  };
  return { info: (m, f) => write('info', m, f), error: (m, f) => write('error', m, f) };
}
