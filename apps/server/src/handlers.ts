/**
 * The handler map: one entry per operationId of the spec. Its type comes from the generated
 * contract, so a missing operation or a handler that no longer matches the spec is a compile
 * error. Operations whose issue has not landed answer 501 `not_implemented`.
 */
import type { Config } from './config.ts';
import type { Database } from './db/database.ts';
import { agentHandlers } from './features/agents/agents.handlers.ts';
import { healthHandlers } from './features/health.handlers.ts';
import { mcpServerHandlers } from './features/mcp-servers/mcp-servers.handlers.ts';
import { policyHandlers } from './features/policies/policies.handlers.ts';
import type { RuleChecker } from './features/policies/policies.service.ts';
import { type Handlers, notImplemented } from './http/router.ts';
import type { Logger } from './logger.ts';

export interface HandlerDeps {
  database: Database;
  config: Config;
  logger: Logger;
  checkRules: RuleChecker;
}

export function createHandlers(deps: Omit<HandlerDeps, 'checkRules'>): Handlers {
  const full: HandlerDeps = { ...deps, checkRules: () => {} };
  return {
    ...healthHandlers(full),
    ...agentHandlers(full),
    ...policyHandlers(full),
    ...mcpServerHandlers(full),
    listApprovals: notImplemented,
    createApproval: notImplemented,
    listApprovalRequests: notImplemented,
    createApprovalRequest: notImplemented,
    getApproval: notImplemented,
    decideApproval: notImplemented,
    createAuditEvent: notImplemented,
    createAuditEventAlias: notImplemented,
    listAuditLogs: notImplemented,
    listEvents: notImplemented,
    verifyAuditChain: notImplemented,
    getComplianceStatus: notImplemented,
    evaluatePolicy: notImplemented,
    executeRuntime: notImplemented,
    discoverMcpTools: notImplemented,
    callMcpTool: notImplemented,
    openMcpSession: notImplemented,
  };
}
