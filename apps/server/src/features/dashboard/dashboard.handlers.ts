/** The dashboard API: sessions, webhooks and billing of its own, the rest through the v1 services (configuration pages: dashboard-admin.handlers.ts). */
import type { Services } from '../../services.ts';
import { actorOf, type RequestContext, type SessionCookie } from '../../shared/context.ts';
import { type DashboardHandlers, StreamedBody } from '../../shared/handler-types.ts';
import { dashboardOAuthHandlers } from '../oauth/oauth.handlers.ts';
import { EXPORT_CONTENT_TYPES, exportChunks } from './audit-export.ts';
import { dashboardAdminHandlers } from './dashboard-admin.handlers.ts';
import { withRedactedContext } from './redact.ts';

/** The dashboard's router gives every request its session cookie (RouterOptions.session). */
const cookie = (ctx: RequestContext) => ctx.session as SessionCookie;

export function createDashboardHandlers(services: Services): DashboardHandlers {
  const { sessions, webhooks, approvals, audit, compliance, agents, settings, billing } = services;
  const workspaceOf = (ctx: RequestContext) => ctx.auth.workspaceId;
  return {
    ...dashboardAdminHandlers(services),
    ...dashboardOAuthHandlers(services),
    getSession: async ({ ctx }) => ({
      status: 200,
      body: { data: await sessions.describe(ctx.auth.workspaceId, ctx.auth.keyId, cookie(ctx).csrf) },
    }),
    login: async ({ body, ctx }) => {
      const sent = cookie(ctx);
      const session = await sessions.login(sent.clientAddress, body.api_key, sent.token);
      sent.set(session.token);
      return { status: 200, body: { data: await sessions.describe(session.workspaceId, session.keyId, session.csrf) } };
    },
    logout: async ({ ctx }) => {
      const sent = cookie(ctx);
      await sessions.close(sent.token);
      sent.set(null);
      return { status: 200, body: { data: { id: ctx.auth.keyId, deleted: true } } };
    },
    listWebhookEndpoints: async ({ query, ctx }) => ({ status: 200, body: await webhooks.list(workspaceOf(ctx), query ?? {}) }),
    createWebhookEndpoint: async ({ body, ctx }) => ({
      status: 201,
      body: { data: await webhooks.create(workspaceOf(ctx), body, actorOf(ctx)) },
    }),
    getWebhookEndpoint: async ({ path, ctx }) => ({ status: 200, body: { data: await webhooks.get(workspaceOf(ctx), path.id) } }),
    updateWebhookEndpoint: async ({ path, body, ctx }) => ({
      status: 200,
      body: { data: await webhooks.update(workspaceOf(ctx), path.id, body, actorOf(ctx)) },
    }),
    deleteWebhookEndpoint: async ({ path, ctx }) => ({
      status: 200,
      body: { data: await webhooks.remove(workspaceOf(ctx), path.id, actorOf(ctx)) },
    }),
    rotateWebhookSecret: async ({ path, body, ctx }) => ({
      status: 200,
      body: { data: await webhooks.rotateSecret(workspaceOf(ctx), path.id, actorOf(ctx), body?.overlap_seconds) },
    }),
    sendWebhookTest: async ({ path, ctx }) => ({ status: 202, body: { data: await webhooks.sendTest(workspaceOf(ctx), path.id) } }),
    listWebhookDeliveries: async ({ path, query, ctx }) => ({
      status: 200,
      body: await webhooks.deliveries(workspaceOf(ctx), path.id, query ?? {}),
    }),
    getWebhookDelivery: async ({ path, ctx }) => ({
      status: 200,
      body: { data: await webhooks.delivery(workspaceOf(ctx), path.id, path.deliveryId) },
    }),
    replayWebhookDelivery: async ({ path, ctx }) => ({
      status: 202,
      body: { data: await webhooks.replay(workspaceOf(ctx), path.id, path.deliveryId) },
    }),
    listDashboardApprovals: async ({ query, ctx }) => {
      const page = await approvals.list(workspaceOf(ctx), query ?? {});
      return { status: 200, body: { ...page, data: page.data.map(withRedactedContext) } };
    },
    decideDashboardApproval: async ({ path, body, ctx }) => ({
      status: 200,
      body: { data: await approvals.decide(workspaceOf(ctx), path.id, body, `${ctx.auth.keyName} (dashboard)`) },
    }),
    listDashboardAuditLogs: async ({ query, ctx }) => {
      const page = await audit.list(workspaceOf(ctx), query ?? {});
      return { status: 200, body: { ...page, data: page.data.map(withRedactedContext) } };
    },
    exportDashboardAuditLogs: async ({ query, ctx }) => {
      const { format, ...filters } = query;
      const pages = audit.all(workspaceOf(ctx), filters);
      const filename = `warden-audit-${new Date().toISOString().slice(0, 10)}.${format}`;
      return {
        status: 200,
        body: new StreamedBody(EXPORT_CONTENT_TYPES[format], exportChunks(format, pages), {
          'content-disposition': `attachment; filename="${filename}"`,
        }),
      };
    },
    verifyDashboardAuditChain: async ({ ctx }) => ({ status: 200, body: { data: await audit.verify(workspaceOf(ctx)) } }),
    getDashboardAuditSigningKey: async ({ ctx }) => ({ status: 200, body: { data: audit.signingKey(workspaceOf(ctx)) } }),
    getDashboardCompliance: async ({ ctx }) => ({ status: 200, body: { data: await compliance.compute(workspaceOf(ctx)) } }),
    listDashboardAgents: async ({ query, ctx }) => ({ status: 200, body: await agents.list(workspaceOf(ctx), query ?? {}) }),
    getDashboardSettings: async ({ ctx }) => ({ status: 200, body: { data: await settings.get(workspaceOf(ctx)) } }),
    updateDashboardSettings: async ({ body, ctx }) => ({
      status: 200,
      body: { data: await settings.update(workspaceOf(ctx), body, actorOf(ctx)) },
    }),
    getBilling: async ({ ctx }) => ({ status: 200, body: { data: await billing.get(workspaceOf(ctx)) } }),
    setBillingPlan: async ({ body, ctx }) => {
      await billing.setPlan(workspaceOf(ctx), body.plan, actorOf(ctx));
      return { status: 200, body: { data: await billing.get(workspaceOf(ctx)) } };
    },
  };
}
