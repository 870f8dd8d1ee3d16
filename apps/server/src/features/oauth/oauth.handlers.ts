/** The OAuth grants (v1 and dashboard) and the dashboard's consent page, on the built-in authorization server. */
import type { Services } from '../../services.ts';
import { actorOf, type RequestContext } from '../../shared/context.ts';
import { ApiError } from '../../shared/errors.ts';
import type { DashboardHandlers, Handlers } from '../../shared/handler-types.ts';

function builtinOf(services: Services) {
  const server = services.authorizationServer;
  if (!server) throw new ApiError('not_found', "Warden's built-in authorization server is off (WARDEN_OAUTH_BUILTIN=false)");
  return server;
}

const workspaceOf = (ctx: RequestContext) => ctx.auth.workspaceId;

export function oauthHandlers(services: Services) {
  return {
    listOAuthGrants: async ({ query, ctx }) => ({ status: 200, body: await builtinOf(services).listGrants(workspaceOf(ctx), query ?? {}) }),
    revokeOAuthGrant: async ({ path, ctx }) => ({
      status: 200,
      body: { data: await builtinOf(services).revokeGrant(workspaceOf(ctx), path.id, actorOf(ctx)) },
    }),
  } satisfies Partial<Handlers>;
}

export function dashboardOAuthHandlers(services: Services) {
  return {
    listDashboardOAuthGrants: async ({ query, ctx }) => ({
      status: 200,
      body: await builtinOf(services).listGrants(workspaceOf(ctx), query ?? {}),
    }),
    revokeDashboardOAuthGrant: async ({ path, ctx }) => ({
      status: 200,
      body: { data: await builtinOf(services).revokeGrant(workspaceOf(ctx), path.id, actorOf(ctx)) },
    }),
    getDashboardOAuthAuthorization: async ({ path, ctx }) => ({
      status: 200,
      body: { data: await builtinOf(services).describe(path.id, workspaceOf(ctx)) },
    }),
    decideDashboardOAuthAuthorization: async ({ path, body, ctx }) => ({
      status: 200,
      body: {
        data: await builtinOf(services).decide(path.id, workspaceOf(ctx), { approve: body.approve, agentId: body.agent_id }, actorOf(ctx)),
      },
    }),
  } satisfies Partial<DashboardHandlers>;
}
