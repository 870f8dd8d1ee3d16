/**
 * What handlers and the HTTP layer are given: the services, built on the database by the
 * composition root (composition.ts). Handlers reach the database only through them.
 */
import type { AgentsService } from './features/agents/agents.service.ts';
import type { ApprovalsService } from './features/approvals/approvals.service.ts';
import type { AuditService } from './features/audit/audit.service.ts';
import type { BillingService } from './features/billing/billing.service.ts';
import type { ComplianceService } from './features/compliance/compliance.service.ts';
import type { CredentialsService } from './features/credentials/credentials.service.ts';
import type { DashboardService } from './features/dashboard/dashboard.service.ts';
import type { DecisionService } from './features/decisions/decisions.ts';
import type { ExecutionService } from './features/execution/execution.service.ts';
import type { HealthService } from './features/health/health.service.ts';
import type { IdempotencyService } from './features/idempotency/idempotency.service.ts';
import type { SessionsService } from './features/identity/sessions.service.ts';
import type { WorkspacesService } from './features/identity/workspaces.service.ts';
import type { McpGateway } from './features/mcp-gateway/mcp-gateway.service.ts';
import type { McpServersService } from './features/mcp-servers/mcp-servers.service.ts';
import type { AccessTokens } from './features/oauth/access-tokens.ts';
import type { BuiltinAuthorizationServer } from './features/oauth/builtin-server.ts';
import type { PoliciesService } from './features/policies/policies.service.ts';
import type { SettingsService } from './features/settings/settings.service.ts';
import type { WebhookService } from './features/webhooks/webhooks.service.ts';

export interface Services {
  health: HealthService;
  /** Workspaces and API keys (authentication looks keys up here). */
  workspaces: WorkspacesService;
  /** Dashboard sessions. */
  sessions: SessionsService;
  agents: AgentsService;
  policies: PoliciesService;
  mcpServers: McpServersService;
  /** Named upstream credentials of the HTTP proxy. */
  credentials: CredentialsService;
  approvals: ApprovalsService;
  audit: AuditService;
  compliance: ComplianceService;
  settings: SettingsService;
  decisions: DecisionService;
  execution: ExecutionService;
  /** Warden as an MCP server (the /mcp endpoints). */
  mcpGateway: McpGateway;
  webhooks: WebhookService;
  billing: BillingService;
  /** What only the dashboard needs: the charts' figures, the MCP URL check. */
  dashboard: DashboardService;
  /** OAuth access tokens sent to the MCP endpoints (features/oauth). */
  accessTokens: AccessTokens;
  /** The built-in OAuth authorization server (undefined when WARDEN_OAUTH_BUILTIN=false). */
  authorizationServer: BuiltinAuthorizationServer | undefined;
  /** Idempotency-Key of the v1 POSTs (http/idempotency.ts). */
  idempotency: IdempotencyService;
}
