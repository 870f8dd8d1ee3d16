/**
 * The handler map: one entry per operationId of the spec. Its type comes from the generated
 * contract, so a missing operation or a handler that no longer matches the spec is a compile
 * error. (An operation whose behaviour has not landed yet maps to `notImplemented`: 501.)
 */
import type { Config } from './config.ts';
import type { Database } from './db/database.ts';
import type { EgressGuard } from './egress/guard.ts';
import { agentHandlers } from './features/agents/agents.handlers.ts';
import { approvalHandlers } from './features/approvals/approvals.handlers.ts';
import { auditHandlers } from './features/audit/audit.handlers.ts';
import type { AuditSealer } from './features/audit/chain.ts';
import { complianceHandlers } from './features/compliance/compliance.handlers.ts';
import { healthHandlers } from './features/health.handlers.ts';
import { mcpServerHandlers } from './features/mcp-servers/mcp-servers.handlers.ts';
import { checkConditions } from './features/policies/engine.ts';
import { policyHandlers } from './features/policies/policies.handlers.ts';
import type { RuleChecker } from './features/policies/policies.service.ts';
import type { DecisionService } from './features/runtime/decisions.ts';
import { evaluateHandlers } from './features/runtime/evaluate.handlers.ts';
import type { McpConnector } from './features/runtime/mcp-connector.ts';
import { runtimeHandlers } from './features/runtime/runtime.handlers.ts';
import { settingsHandlers } from './features/settings/settings.handlers.ts';
import { ApiError } from './http/errors.ts';
import type { Handlers } from './http/router.ts';
import type { Logger } from './logger.ts';

export interface HandlerDeps {
  database: Database;
  config: Config;
  logger: Logger;
  decisions: DecisionService;
  sealer: AuditSealer;
  checkRules: RuleChecker;
  egress: EgressGuard;
  mcp: McpConnector;
}

/** CEL conditions are compiled when a policy is saved, so a broken one never reaches evaluation. */
export const checkRules: RuleChecker = (rules) => {
  const failure = checkConditions(rules);
  if (failure) {
    const at = failure.position === null ? '' : ` at position ${failure.position}`;
    throw new ApiError('invalid_policy', `rules[${failure.index}].condition: ${failure.message}${at}`);
  }
};

export function createHandlers(deps: HandlerDeps): Handlers {
  return {
    ...healthHandlers(deps),
    ...agentHandlers(deps),
    ...policyHandlers(deps),
    ...mcpServerHandlers(deps),
    ...approvalHandlers(deps),
    ...auditHandlers(deps),
    ...complianceHandlers(deps),
    ...evaluateHandlers(deps),
    ...runtimeHandlers(deps),
    ...settingsHandlers(deps),
  };
}
