/** Configuration from the environment (the operating interface of DESIGN.md). */
export interface Config {
  port: number;
  host: string;
  databaseUrl: string | undefined;
  dataDir: string;
  bootstrapKey: string | undefined;
  rateLimitPerMinute: number;
  /** Validate every response against the spec: on except in production (it costs CPU). */
  validateResponses: boolean;
  egressAllowlist: string[];
  logRequests: boolean;
  /** How often new audit events are sealed into the hash chain. */
  auditSealIntervalMs: number;
}

function integer(name: string, fallback: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value <= 0) throw new Error(`${name} must be a positive integer, got '${raw}'`);
  return value;
}

export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  return {
    port: integer('PORT', 8080),
    host: env.HOST ?? '127.0.0.1',
    databaseUrl: env.DATABASE_URL || undefined,
    dataDir: env.WARDEN_DATA_DIR || './.data',
    bootstrapKey: env.WARDEN_BOOTSTRAP_KEY || undefined,
    rateLimitPerMinute: integer('WARDEN_RATE_LIMIT_PER_MINUTE', 1200),
    validateResponses: env.WARDEN_VALIDATE_RESPONSES ? env.WARDEN_VALIDATE_RESPONSES === 'true' : env.NODE_ENV !== 'production',
    egressAllowlist: (env.WARDEN_EGRESS_ALLOWLIST ?? '')
      .split(',')
      .map((entry) => entry.trim())
      .filter(Boolean),
    logRequests: env.WARDEN_LOG_REQUESTS === 'true',
    auditSealIntervalMs: integer('WARDEN_AUDIT_SEAL_INTERVAL_MS', 500),
  };
}
