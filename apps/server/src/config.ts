import { DEFAULT_MAX_MESSAGE_BYTES } from './features/execution/mcp-fetch.ts';
import { DEFAULT_RETRY_SCHEDULE } from './features/webhooks/delivery-worker.ts';
import { type LogLevel, parseLogLevel } from './logger.ts';

/** Configuration from the environment (the operating interface of DESIGN.md). */
export interface Config {
  port: number;
  host: string;
  databaseUrl: string | undefined;
  dataDir: string;
  /**
   * WARDEN_VIA_WITH_NODE24 (set by tools/with-node24 when the machine's own Node.js is older):
   * the commands Warden prints for this machine go through tools/with-node24 too.
   */
  viaWithNode24: boolean;
  bootstrapKey: string | undefined;
  rateLimitPerMinute: number;
  /** Validate every response against the spec: on except in production (it costs CPU). */
  validateResponses: boolean;
  egressAllowlist: string[];
  /** WARDEN_LOG_REQUESTS=true: one line per request at level info (otherwise at debug, written when WARDEN_LOG_LEVEL=debug). */
  logRequests: boolean;
  /** WARDEN_LOG_LEVEL: trace, debug, info (default), warn, error, fatal or silent. */
  logLevel: LogLevel;
  /** WARDEN_SHUTDOWN_TIMEOUT_MS: how long a SIGTERM'd server may drain before it exits anyway (default 10000). */
  shutdownTimeoutMs: number;
  /**
   * WARDEN_SHUTDOWN_DRAIN_MS: after SIGTERM, how long the listener stays open with readiness
   * answering 503, so that a load balancer takes the process out before connections are refused
   * (default 5000; at most half of the shutdown timeout).
   */
  shutdownDrainMs: number;
  /** WARDEN_METRICS_PORT: Prometheus metrics on a listener of their own (off unless set; 0 picks a free port). */
  metricsPort: number | undefined;
  /** WARDEN_METRICS_HOST: the metrics listener's address (default 127.0.0.1). */
  metricsHost: string;
  /** OpenTelemetry traces: on when OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set, unless OTEL_SDK_DISABLED=true (observability/tracing.ts). */
  tracing: boolean;
  /** How often queued audit events are sealed into their workspace's Merkle tree. */
  auditSealIntervalMs: number;
  /** How often a grown tree gets a signed checkpoint (WARDEN_AUDIT_CHECKPOINT_INTERVAL_MS, default 1000). */
  auditCheckpointIntervalMs: number;
  /** WARDEN_AUDIT_SIGNING_KEY: the Ed25519 key that signs checkpoints (else `audit-signing.key` in the data directory). */
  auditSigningKey: string | undefined;
  /** WARDEN_AUDIT_ML_DSA_SIGNING_KEY: the ML-DSA-44 key that signs checkpoints beside it (else `audit-signing-ml-dsa-44.key`). */
  auditMlDsaSigningKey: string | undefined;
  /** WARDEN_AUDIT_CHECKPOINT_FILE: where every checkpoint is appended (default `audit-checkpoints.ndjson` in the data directory; none in memory). */
  auditCheckpointFile: string | undefined;
  /** WARDEN_AUDIT_LOG_NAME: the first part of each log's origin, `<name>/audit/<workspace id>` (default `warden`). */
  auditLogName: string;
  /** WARDEN_AUDIT_WITNESSES: `<url> <witness vkey>` pairs (comma- or newline-separated) each checkpoint is sent to for a cosignature. */
  auditWitnesses: string | undefined;
  /** WARDEN_AUDIT_WITNESS_QUORUM: the k of n witnesses a checkpoint needs to count as witnessed (default: all). */
  auditWitnessQuorum: number | undefined;
  /** WARDEN_AUDIT_WITNESS_TIMEOUT_MS: how long one witness may take to answer (default 3000). */
  auditWitnessTimeoutMs: number;
  /** WARDEN_AUDIT_SEARCH_SCAN_ROWS: how many events one page of an audit search may read (default 20000). */
  auditSearchScanRows: number;
  /** On PostgreSQL, seal in a worker thread of its own (WARDEN_AUDIT_SEALER_THREAD, default true; see sealer-thread.ts). */
  auditSealerThread: boolean;
  /** WARDEN_MASTER_KEY: base64 of 32 bytes that encrypts stored secrets (see secrets.ts). */
  masterKey: string | undefined;
  webhookRetrySchedule: string;
  webhookPollMs: number;
  webhookTimeoutMs: number;
  /** REDIS_URL: shared rate-limit counters in Redis instead of PostgreSQL. */
  redisUrl: string | undefined;
  /** WARDEN_WORKERS: server processes sharing the port (more than 1 needs DATABASE_URL; see main.ts). */
  workers: number;
  /** WARDEN_MCP_APPROVAL_WAIT_MS: how long the MCP gateway holds a tool call open for its approval (default 30000). */
  mcpApprovalWaitMs: number;
  /** WARDEN_MCP_UPSTREAM_IDLE_MS: how long an unused upstream MCP session is kept before it is terminated (default 300000). */
  mcpUpstreamIdleMs: number;
  /** WARDEN_MCP_CLIENT_SESSION_IDLE_MS: how long an MCP gateway client session (Mcp-Session-Id) is kept unused before it ends (default 86400000). */
  mcpClientSessionIdleMs: number;
  /** WARDEN_MCP_STREAM_CHECK_MS: how often a session's GET stream is checked (its caller still allowed, its session alive) and gets a keep-alive comment (default 25000). */
  mcpStreamCheckMs: number;
  /**
   * WARDEN_MCP_ALLOWED_ORIGINS: browser origins the MCP gateway serves besides loopback ones
   * (comma-separated, e.g. `https://warden.example.com`; `*` for any). Requests without an
   * Origin (non-browser clients) are always served.
   */
  mcpAllowedOrigins: string[];
  /**
   * WARDEN_MCP_MAX_MESSAGE_BYTES: the most Warden reads of one message an upstream MCP server
   * sends (a JSON answer, an SSE event); past it the answer is cut off and the call fails (default 4 MiB).
   */
  mcpMaxMessageBytes: number;
  /**
   * WARDEN_PUBLIC_URL: the origin clients reach Warden at (e.g. `https://warden.example.com`): the
   * MCP endpoints' OAuth resource identifiers and the built-in authorization server's issuer.
   * Unset: the origin of each request (its Host header), right for loopback use.
   */
  publicUrl: string | undefined;
  /** WARDEN_OAUTH_BUILTIN: the built-in OAuth authorization server (default true; `false` turns it off). */
  oauthBuiltin: boolean;
  /** WARDEN_OAUTH_ISSUER: the issuer URL of the organisation's OAuth authorization server, whose JWT access tokens the MCP endpoints accept. */
  oauthIssuer: string | undefined;
  /** WARDEN_OAUTH_WORKSPACE: the slug of the workspace that tokens of WARDEN_OAUTH_ISSUER act in (required with it). */
  oauthWorkspace: string | undefined;
  /** WARDEN_OAUTH_AGENT_CLAIM: the claim of those tokens that holds the acting agent's slug (default `warden_agent`). */
  oauthAgentClaim: string;
}

/** Below this, a bootstrap key is guessable and its listed prefix gives a good part of it away. */
export const MIN_BOOTSTRAP_KEY_LENGTH = 32;

export function checkBootstrapKey(key: string | undefined): void {
  if (key !== undefined && key.length < MIN_BOOTSTRAP_KEY_LENGTH) {
    throw new Error(
      `WARDEN_BOOTSTRAP_KEY must be at least ${MIN_BOOTSTRAP_KEY_LENGTH} characters (it has ${key.length}), e.g. wk_$(openssl rand -hex 16)`,
    );
  }
}

function integer(env: NodeJS.ProcessEnv, name: string, fallback: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value <= 0) throw new Error(`${name} must be a positive integer, got '${raw}'`);
  return value;
}

/** A duration that may be 0 (a step turned off). */
function milliseconds(env: NodeJS.ProcessEnv, name: string, fallback: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < 0) throw new Error(`${name} must be a whole number of milliseconds (0 or more), got '${raw}'`);
  return value;
}

/** A whole number (0 or more), or undefined when unset. */
function optionalCount(env: NodeJS.ProcessEnv, name: string): number | undefined {
  const raw = env[name];
  if (raw === undefined || raw === '') return undefined;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < 0) throw new Error(`${name} must be a whole number (0 or more), got '${raw}'`);
  return value;
}

/** Origins as the browser sends them (`scheme://host[:port]`), or `*`. */
function origins(env: NodeJS.ProcessEnv, name: string): string[] {
  return (env[name] ?? '')
    .split(',')
    .map((entry) => entry.trim())
    .filter(Boolean)
    .map((entry) => {
      if (entry === '*') return entry;
      const url = URL.parse(entry);
      if (!url || (url.protocol !== 'http:' && url.protocol !== 'https:') || url.origin !== entry.replace(/\/$/, ''))
        throw new Error(`${name} lists origins such as https://warden.example.com (or *), got '${entry}'`);
      return url.origin;
    });
}

function port(env: NodeJS.ProcessEnv, name: string): number | undefined {
  const raw = env[name];
  if (raw === undefined || raw === '') return undefined;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < 0 || value > 65_535) throw new Error(`${name} must be a port number (0-65535), got '${raw}'`);
  return value;
}

/** An origin (`scheme://host[:port]`), or undefined when unset. */
function originOf(env: NodeJS.ProcessEnv, name: string): string | undefined {
  const raw = env[name];
  if (!raw) return undefined;
  const [origin] = origins({ [name]: raw }, name);
  if (origin === undefined || origin === '*') throw new Error(`${name} is an origin such as https://warden.example.com, got '${raw}'`);
  return origin;
}

/** WARDEN_OAUTH_ISSUER and what maps its tokens to a workspace and an agent. */
function externalIssuer(env: NodeJS.ProcessEnv): Pick<Config, 'oauthIssuer' | 'oauthWorkspace' | 'oauthAgentClaim'> {
  const issuer = env.WARDEN_OAUTH_ISSUER || undefined;
  const workspace = env.WARDEN_OAUTH_WORKSPACE || undefined;
  if (issuer !== undefined) {
    const url = URL.parse(issuer);
    if (!url || (url.protocol !== 'https:' && url.protocol !== 'http:') || url.search || url.hash)
      throw new Error(`WARDEN_OAUTH_ISSUER is the issuer's URL (https://idp.example.com/…), got '${issuer}'`);
    if (workspace === undefined)
      throw new Error('WARDEN_OAUTH_ISSUER needs WARDEN_OAUTH_WORKSPACE: the slug of the workspace its tokens act in');
  }
  return { oauthIssuer: issuer, oauthWorkspace: workspace, oauthAgentClaim: env.WARDEN_OAUTH_AGENT_CLAIM || 'warden_agent' };
}

export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  return {
    port: integer(env, 'PORT', 8080),
    host: env.HOST ?? '127.0.0.1',
    databaseUrl: env.DATABASE_URL || undefined,
    dataDir: env.WARDEN_DATA_DIR || './.data',
    viaWithNode24: env.WARDEN_VIA_WITH_NODE24 === '1',
    bootstrapKey: env.WARDEN_BOOTSTRAP_KEY || undefined,
    rateLimitPerMinute: integer(env, 'WARDEN_RATE_LIMIT_PER_MINUTE', 1200),
    validateResponses: env.WARDEN_VALIDATE_RESPONSES ? env.WARDEN_VALIDATE_RESPONSES === 'true' : env.NODE_ENV !== 'production',
    egressAllowlist: (env.WARDEN_EGRESS_ALLOWLIST ?? '')
      .split(',')
      .map((entry) => entry.trim())
      .filter(Boolean),
    logRequests: env.WARDEN_LOG_REQUESTS === 'true',
    logLevel: parseLogLevel(env.WARDEN_LOG_LEVEL),
    shutdownTimeoutMs: integer(env, 'WARDEN_SHUTDOWN_TIMEOUT_MS', 10_000),
    shutdownDrainMs: milliseconds(env, 'WARDEN_SHUTDOWN_DRAIN_MS', 5_000),
    metricsPort: port(env, 'WARDEN_METRICS_PORT'),
    metricsHost: env.WARDEN_METRICS_HOST || '127.0.0.1',
    tracing: env.OTEL_SDK_DISABLED !== 'true' && Boolean(env.OTEL_EXPORTER_OTLP_ENDPOINT || env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT),
    // Sealing more often spreads its bursts, but each round also scans the sealing queue, whose
    // dead rows pile up between vacuums: a shorter interval cost more than it gained
    // (docs/decisions/0003-audit-sealing.md).
    auditSealIntervalMs: integer(env, 'WARDEN_AUDIT_SEAL_INTERVAL_MS', 500),
    auditSealerThread: env.WARDEN_AUDIT_SEALER_THREAD !== 'false',
    auditCheckpointIntervalMs: integer(env, 'WARDEN_AUDIT_CHECKPOINT_INTERVAL_MS', 1000),
    auditSigningKey: env.WARDEN_AUDIT_SIGNING_KEY || undefined,
    auditMlDsaSigningKey: env.WARDEN_AUDIT_ML_DSA_SIGNING_KEY || undefined,
    auditCheckpointFile: env.WARDEN_AUDIT_CHECKPOINT_FILE || undefined,
    auditLogName: env.WARDEN_AUDIT_LOG_NAME || 'warden',
    auditSearchScanRows: integer(env, 'WARDEN_AUDIT_SEARCH_SCAN_ROWS', 20_000),
    auditWitnesses: env.WARDEN_AUDIT_WITNESSES || undefined,
    auditWitnessQuorum: optionalCount(env, 'WARDEN_AUDIT_WITNESS_QUORUM'),
    auditWitnessTimeoutMs: integer(env, 'WARDEN_AUDIT_WITNESS_TIMEOUT_MS', 3000),
    masterKey: env.WARDEN_MASTER_KEY || undefined,
    webhookRetrySchedule: env.WARDEN_WEBHOOK_RETRY_SCHEDULE || DEFAULT_RETRY_SCHEDULE,
    webhookPollMs: integer(env, 'WARDEN_WEBHOOK_POLL_MS', 1000),
    webhookTimeoutMs: integer(env, 'WARDEN_WEBHOOK_TIMEOUT_MS', 15_000),
    redisUrl: env.REDIS_URL || undefined,
    workers: integer(env, 'WARDEN_WORKERS', 1),
    mcpApprovalWaitMs: integer(env, 'WARDEN_MCP_APPROVAL_WAIT_MS', 30_000),
    mcpUpstreamIdleMs: integer(env, 'WARDEN_MCP_UPSTREAM_IDLE_MS', 300_000),
    mcpClientSessionIdleMs: integer(env, 'WARDEN_MCP_CLIENT_SESSION_IDLE_MS', 86_400_000),
    mcpStreamCheckMs: integer(env, 'WARDEN_MCP_STREAM_CHECK_MS', 25_000),
    mcpAllowedOrigins: origins(env, 'WARDEN_MCP_ALLOWED_ORIGINS'),
    mcpMaxMessageBytes: integer(env, 'WARDEN_MCP_MAX_MESSAGE_BYTES', DEFAULT_MAX_MESSAGE_BYTES),
    publicUrl: originOf(env, 'WARDEN_PUBLIC_URL'),
    oauthBuiltin: env.WARDEN_OAUTH_BUILTIN !== 'false',
    ...externalIssuer(env),
  };
}
