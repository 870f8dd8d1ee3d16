/**
 * The composition root: the one module that builds what works on the database — the caches,
 * the services and the background workers — and wires them together. Handlers and the HTTP
 * layer get the services (services.ts) and nothing below them; server.ts starts and stops what
 * is built here; app.ts builds only the HTTP layer. (The CLI, which opens the database for one
 * command, wires the few stateless services its commands use itself: admin/commands.ts.)
 */
import { createHmac } from 'node:crypto';
import type { Redis } from 'ioredis';
import type { Config } from './config.ts';
import type { Database } from './db/database.ts';
import { createEgressGuard, type EgressGuard } from './egress/guard.ts';
import { agentsService } from './features/agents/agents.service.ts';
import { ApprovalExpiry, approvalsService } from './features/approvals/approvals.service.ts';
import { auditService } from './features/audit/audit.service.ts';
import { AuditWriter } from './features/audit/audit-writer.ts';
import { Checkpointer, loadAuditSigner } from './features/audit/checkpointer.ts';
import { SealerThread } from './features/audit/sealer-thread.ts';
import { AuditSealer, inlineRounds } from './features/audit/tree.ts';
import { AuditVerifications } from './features/audit/verification-runs.ts';
import { billingService } from './features/billing/billing.service.ts';
import { complianceService } from './features/compliance/compliance.service.ts';
import { credentialsService } from './features/credentials/credentials.service.ts';
import { UpstreamOAuth } from './features/credentials/upstream-oauth.ts';
import { oauthFetch } from './features/credentials/upstream-oauth-client.ts';
import { UpstreamTokens } from './features/credentials/upstream-tokens.ts';
import { dashboardService } from './features/dashboard/dashboard.service.ts';
import { DecisionService } from './features/decisions/decisions.ts';
import { ExecutionService } from './features/execution/execution.service.ts';
import { McpClientSessions } from './features/execution/mcp-client-sessions.ts';
import { McpConnector } from './features/execution/mcp-connector.ts';
import { paramHeaderStore } from './features/execution/mcp-param-headers.repository.ts';
import { McpRegistry } from './features/execution/mcp-registry.ts';
import { McpTasks } from './features/execution/mcp-tasks.ts';
import { ActPipeline } from './features/execution/pipeline.ts';
import { healthService } from './features/health/health.service.ts';
import { idempotencyService } from './features/idempotency/idempotency.service.ts';
import { AgentDirectory } from './features/identity/agent-identity.ts';
import { LOGIN_WINDOW_S, LoginGuard, MAX_FAILED_LOGINS, sessionsService } from './features/identity/sessions.service.ts';
import { workspacesService } from './features/identity/workspaces.service.ts';
import { McpGateway } from './features/mcp-gateway/mcp-gateway.service.ts';
import { ParamHeaders } from './features/mcp-gateway/param-headers.ts';
import { mcpServersService } from './features/mcp-servers/mcp-servers.service.ts';
import { AccessTokens } from './features/oauth/access-tokens.ts';
import { BuiltinAuthorizationServer } from './features/oauth/builtin-server.ts';
import { ExternalIssuer } from './features/oauth/external-issuer.ts';
import { policiesService } from './features/policies/policies.service.ts';
import { PolicyCache } from './features/policies/policy-cache.ts';
import { inlineReplays, ReplayThread, Simulations } from './features/policies/simulate-runner.ts';
import { settingsService } from './features/settings/settings.service.ts';
import { DeliveryWorker, parseSchedule } from './features/webhooks/delivery-worker.ts';
import { createSecretBox, loadMasterKey } from './features/webhooks/secrets.ts';
import { WebhookService } from './features/webhooks/webhooks.service.ts';
import { KeyCache } from './http/key-cache.ts';
import { createStoreLimiter, type RateLimitStore } from './http/rate-limit.ts';
import type { Logger } from './logger.ts';
import { NO_TELEMETRY, type Telemetry } from './observability/telemetry.ts';
import type { Services } from './services.ts';

/** Everything the server runs, built on one database. */
export interface Composition {
  services: Services;
  /** Identities of recently used keys; the server keeps it in step with the database's notifications. */
  keys: KeyCache;
  /** Where rate-limit counters (and failed logins) are kept. */
  rateLimitStore: RateLimitStore;
  /** Background work the server starts and stops. */
  sealer: AuditSealer;
  checkpointer: Checkpointer;
  delivery: DeliveryWorker;
  /** The group-commit writer (readiness asks whether it commits). */
  auditWriter: AuditWriter;
  /** Outbound connections, closed when the server stops. */
  mcp: McpConnector;
  /** The MCP gateway's client sessions; its relay channel is LISTENed on by the server. */
  clientSessions: McpClientSessions;
  egress: EgressGuard;
  /** What-if replays (their thread is closed when the server stops). */
  simulations: Simulations;
}

export function compose({
  config,
  database,
  logger,
  redis,
  telemetry = NO_TELEMETRY,
}: {
  config: Config;
  database: Database;
  logger: Logger;
  redis?: Redis;
  /** Where services report what they do (metrics.ts when WARDEN_METRICS_PORT is set). */
  telemetry?: Telemetry;
}): Composition {
  const { db } = database;
  const inline = inlineRounds(db, logger);
  const rounds = config.databaseUrl && config.auditSealerThread ? new SealerThread(config.databaseUrl, logger, inline) : inline;
  const signer = loadAuditSigner(config);
  if (!signer.mlDsaKey)
    logger.warn?.(
      'audit checkpoints are signed with Ed25519 only: WARDEN_AUDIT_SIGNING_KEY is set but WARDEN_AUDIT_ML_DSA_SIGNING_KEY is not (set both on every machine to sign with ML-DSA-44 too)',
    );
  const checkpointer = new Checkpointer(db, signer, logger, config.auditCheckpointIntervalMs, Checkpointer.fileFor(config));
  const approvalExpiry = new ApprovalExpiry(db);
  // after each sealing round: sign what was sealed, then expire approvals (their events are sealed next round)
  const sealer = new AuditSealer(db, rounds, config.auditSealIntervalMs, async () => {
    await checkpointer.run();
    await approvalExpiry.run().catch((cause) => logger.error('approval expiry failed', { cause }));
  });
  const auditWriter = new AuditWriter(database, undefined, telemetry);
  const verifications = new AuditVerifications(
    db,
    signer,
    (workspaceId) => checkpointer.lastSigned(workspaceId),
    config.databaseUrl,
    logger,
  );
  const audit = auditService(db, auditWriter, signer, verifications, { searchScanRows: config.auditSearchScanRows });
  const egress = createEgressGuard(config.egressAllowlist);
  const mcp = new McpConnector(egress, config.mcpUpstreamIdleMs, config.mcpMaxMessageBytes);
  const masterKey = loadMasterKey(config.masterKey, config.dataDir);
  const box = createSecretBox(masterKey);
  const webhooks = new WebhookService(db, box, egress);
  const delivery = new DeliveryWorker(db, box, egress, logger, {
    scheduleMs: parseSchedule(config.webhookRetrySchedule),
    timeoutMs: config.webhookTimeoutMs,
    pollMs: config.webhookPollMs,
    telemetry,
  });
  const rateLimitStore: RateLimitStore = { redis, pool: database.pool };
  const loginGuard = new LoginGuard(createStoreLimiter(MAX_FAILED_LOGINS, rateLimitStore, LOGIN_WINDOW_S, 'login'));
  const agentDirectory = new AgentDirectory(db);
  const decisions = new DecisionService(db, new PolicyCache(db), agentDirectory, audit.log, telemetry);
  const credentials = credentialsService(db, box);
  const oauthEgress = oauthFetch((url, init) => egress.fetch(url, init));
  const upstreamOAuth = new UpstreamOAuth(db, box, oauthEgress);
  const registry = new McpRegistry(db, box, new UpstreamTokens(db, box, oauthEgress));
  const execution = new ExecutionService(db, new ActPipeline(db, decisions, audit.log), decisions, mcp, egress, registry, credentials);
  // question ids' MACs: one key in every process that shares the master key
  const questionKey = createHmac('sha256', masterKey).update('warden mcp relay question ids').digest();
  const clientSessions = new McpClientSessions(db, mcp, questionKey, config.mcpClientSessionIdleMs);
  const inlineReplay = inlineReplays(db);
  const simulations = new Simulations(db, config.databaseUrl ? new ReplayThread(config.databaseUrl, logger, inlineReplay) : inlineReplay);
  const authorizationServer = config.oauthBuiltin ? new BuiltinAuthorizationServer(db, (url, init) => egress.fetch(url, init)) : undefined;
  const services: Services = {
    health: healthService(db),
    workspaces: workspacesService(db),
    sessions: sessionsService(db, loginGuard),
    agents: agentsService(db),
    policies: policiesService(db, simulations),
    mcpServers: mcpServersService(db, box, upstreamOAuth),
    credentials,
    approvals: approvalsService(db, telemetry),
    audit,
    compliance: complianceService(db, (workspaceId) => audit.verify(workspaceId)),
    settings: settingsService(db),
    decisions,
    execution,
    mcpGateway: new McpGateway(
      execution,
      new McpTasks(db, mcp, mcp.sweepMs),
      agentDirectory,
      clientSessions,
      new ParamHeaders(paramHeaderStore(db)),
      {
        approvalWaitMs: config.mcpApprovalWaitMs,
        streamCheckMs: config.mcpStreamCheckMs,
      },
    ),
    webhooks,
    billing: billingService(db),
    dashboard: dashboardService(db, egress),
    idempotency: idempotencyService(db),
    accessTokens: new AccessTokens(
      db,
      config.oauthIssuer && config.oauthWorkspace
        ? {
            issuer: new ExternalIssuer(config.oauthIssuer, config.oauthAgentClaim),
            workspace: config.oauthWorkspace,
            audienceConfigured: config.publicUrl !== undefined,
          }
        : undefined,
      authorizationServer,
    ),
    authorizationServer,
  };
  return {
    services,
    keys: new KeyCache(),
    rateLimitStore,
    sealer,
    checkpointer,
    delivery,
    auditWriter,
    mcp,
    clientSessions,
    egress,
    simulations,
  };
}
