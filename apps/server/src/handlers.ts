/**
 * The v1 handler map: one entry per operationId of the spec. Its type comes from the generated
 * contract, so a missing operation or a handler that no longer matches the spec is a compile
 * error. (An operation whose behaviour has not landed yet maps to `notImplemented`: 501.)
 * Handlers get the services only (services.ts), never the database.
 */
import { agentHandlers } from './features/agents/agents.handlers.ts';
import { approvalHandlers } from './features/approvals/approvals.handlers.ts';
import { auditHandlers } from './features/audit/audit.handlers.ts';
import { complianceHandlers } from './features/compliance/compliance.handlers.ts';
import { credentialHandlers } from './features/credentials/credentials.handlers.ts';
import { evaluateHandlers } from './features/decisions/evaluate.handlers.ts';
import { runtimeHandlers } from './features/execution/runtime.handlers.ts';
import { healthHandlers } from './features/health/health.handlers.ts';
import { mcpServerHandlers } from './features/mcp-servers/mcp-servers.handlers.ts';
import { oauthHandlers } from './features/oauth/oauth.handlers.ts';
import { policyHandlers } from './features/policies/policies.handlers.ts';
import { settingsHandlers } from './features/settings/settings.handlers.ts';
import type { Services } from './services.ts';
import type { Handlers } from './shared/handler-types.ts';

export function createHandlers(services: Services): Handlers {
  return {
    ...healthHandlers(services),
    ...agentHandlers(services),
    ...policyHandlers(services),
    ...mcpServerHandlers(services),
    ...credentialHandlers(services),
    ...approvalHandlers(services),
    ...auditHandlers(services),
    ...complianceHandlers(services),
    ...evaluateHandlers(services),
    ...runtimeHandlers(services),
    ...settingsHandlers(services),
    ...oauthHandlers(services),
  };
}
