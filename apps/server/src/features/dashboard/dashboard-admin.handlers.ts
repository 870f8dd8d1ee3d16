/**
 * The dashboard's configuration pages (API keys, agents' status, MCP servers, policies) and its
 * charts: each through the same service as v1 and the CLI, with the session as actor, so each
 * change writes the same configuration audit event.
 */
import type { Services } from '../../services.ts';
import { actorOf, type RequestContext } from '../../shared/context.ts';
import type { DashboardHandlers } from '../../shared/handler-types.ts';

export function dashboardAdminHandlers({ workspaces, agents, mcpServers, policies, dashboard }: Services) {
  const workspaceOf = (ctx: RequestContext) => ctx.auth.workspaceId;
  return {
    listDashboardKeys: async ({ query, ctx }) => ({ status: 200, body: await workspaces.listKeys(workspaceOf(ctx), query ?? {}) }),
    createDashboardKey: async ({ body, ctx }) => ({
      status: 201,
      body: { data: await workspaces.issueKey(workspaceOf(ctx), body, ctx.auth.permissions, actorOf(ctx)) },
    }),
    revokeDashboardKey: async ({ path, ctx }) => ({
      status: 200,
      body: { data: await workspaces.revokeKey(workspaceOf(ctx), path.id, actorOf(ctx), ctx.auth.keyId) },
    }),
    setDashboardAgentStatus: async ({ path, body, ctx }) => ({
      status: 200,
      body: { data: await agents.update(workspaceOf(ctx), path.id, { status: body.status }, actorOf(ctx)) },
    }),
    listDashboardMcpServers: async ({ query, ctx }) => ({ status: 200, body: await mcpServers.list(workspaceOf(ctx), query ?? {}) }),
    createDashboardMcpServer: async ({ body, ctx }) => {
      dashboard.checkMcpUrl(body.transport_url);
      return { status: 201, body: { data: await mcpServers.create(workspaceOf(ctx), body, actorOf(ctx)) } };
    },
    updateDashboardMcpServer: async ({ path, body, ctx }) => {
      if (body.transport_url !== undefined) dashboard.checkMcpUrl(body.transport_url);
      return { status: 200, body: { data: await mcpServers.update(workspaceOf(ctx), path.id, body, actorOf(ctx)) } };
    },
    deleteDashboardMcpServer: async ({ path, ctx }) => ({
      status: 200,
      body: { data: await mcpServers.remove(workspaceOf(ctx), path.id, actorOf(ctx)) },
    }),
    connectDashboardMcpServerOAuth: async ({ path, body, ctx }) => ({
      status: 200,
      body: { data: await mcpServers.connectOAuth(workspaceOf(ctx), path.id, ctx.origin, actorOf(ctx), body?.agent) },
    }),
    getDashboardMcpServerOAuthConfirmation: async ({ path, ctx }) => ({
      status: 200,
      body: { data: await mcpServers.oauthConfirmation(workspaceOf(ctx), path.id, actorOf(ctx)) },
    }),
    confirmDashboardMcpServerOAuth: async ({ path, ctx }) => ({
      status: 200,
      body: { data: await mcpServers.confirmOAuth(workspaceOf(ctx), path.id, actorOf(ctx)) },
    }),
    disconnectDashboardMcpServerOAuth: async ({ path, query, ctx }) => ({
      status: 200,
      body: { data: await mcpServers.disconnectOAuth(workspaceOf(ctx), path.id, actorOf(ctx), query?.agent) },
    }),
    listDashboardPolicies: async ({ query, ctx }) => ({ status: 200, body: await policies.list(workspaceOf(ctx), query ?? {}) }),
    getDashboardPolicy: async ({ path, ctx }) => ({ status: 200, body: { data: await policies.get(workspaceOf(ctx), path.id) } }),
    simulateDashboardPolicies: async ({ body, ctx }) => ({
      status: 200,
      body: { data: await policies.simulate(workspaceOf(ctx), body) },
    }),
    createDashboardPolicy: async ({ body, ctx }) => ({
      status: 201,
      body: { data: await policies.create(workspaceOf(ctx), body, actorOf(ctx)) },
    }),
    updateDashboardPolicy: async ({ path, body, ctx }) => ({
      status: 200,
      body: { data: await policies.update(workspaceOf(ctx), path.id, body, actorOf(ctx)) },
    }),
    deleteDashboardPolicy: async ({ path, ctx }) => {
      await policies.remove(workspaceOf(ctx), path.id, actorOf(ctx));
      return { status: 200, body: { data: { id: path.id, deleted: true } } };
    },
    getDashboardInsights: async ({ query, ctx }) => ({
      status: 200,
      body: { data: await dashboard.insights(workspaceOf(ctx), query?.days ?? 7) },
    }),
  } satisfies Partial<DashboardHandlers>;
}
