/** The dashboard API: webhooks and billing of its own, the rest through the v1 services. */
import type { Request, Response } from 'express';
import type { Database } from '../../db/database.ts';
import type { RequestContext } from '../../http/context.ts';
import type { RateLimitStore } from '../../http/rate-limit.ts';
import type { DashboardHandlers } from '../../http/router.ts';
import { listAgents } from '../agents/agents.service.ts';
import { decideApproval, listApprovals } from '../approvals/approvals.service.ts';
import { listAuditLogs } from '../audit/audit.service.ts';
import { verifyChain } from '../audit/chain.ts';
import { computeCompliance } from '../compliance/compliance.service.ts';
import { getSettings, updateSettings } from '../settings/settings.service.ts';
import { setPlan, type WebhookService } from '../webhooks/webhooks.service.ts';
import { closeSession, describeSession, LoginGuard, openSession, readSessionCookie, setSessionCookie } from './sessions.ts';

const http = (ctx: RequestContext) => {
  const res = ctx.res as Response;
  return { req: res.req as Request, res };
};

export function createDashboardHandlers({
  database: { db },
  webhooks,
  rateLimitStore,
}: {
  database: Database;
  webhooks: WebhookService;
  rateLimitStore: RateLimitStore;
}): DashboardHandlers {
  const loginGuard = new LoginGuard(rateLimitStore);
  const workspaceOf = (ctx: RequestContext) => ctx.auth.workspaceId;
  const billing = async (workspaceId: string) => {
    const row = await db
      .selectFrom('workspaces')
      .select(['plan', 'billing_status'])
      .where('id', '=', workspaceId)
      .executeTakeFirstOrThrow();
    return { plan: row.plan as 'free', billing_status: row.billing_status };
  };
  return {
    getSession: async ({ ctx }) => ({
      status: 200,
      body: { data: await describeSession(db, ctx.auth.workspaceId, ctx.auth.keyId, http(ctx).req.dashboardCsrf ?? '') },
    }),
    login: async ({ body, ctx }) => {
      const { req, res } = http(ctx);
      const session = await loginGuard.attempt(req.ip ?? '', body.api_key, () => openSession(db, body.api_key, readSessionCookie(req)));
      setSessionCookie(req, res, session.token);
      return { status: 200, body: { data: await describeSession(db, session.workspaceId, session.keyId, session.csrf) } };
    },
    logout: async ({ ctx }) => {
      const { req, res } = http(ctx);
      await closeSession(db, req);
      setSessionCookie(req, res, null);
      return { status: 200, body: { data: { id: ctx.auth.keyId, deleted: true } } };
    },
    listWebhookEndpoints: async ({ query, ctx }) => ({ status: 200, body: await webhooks.list(workspaceOf(ctx), query ?? {}) }),
    createWebhookEndpoint: async ({ body, ctx }) => ({ status: 201, body: { data: await webhooks.create(workspaceOf(ctx), body) } }),
    getWebhookEndpoint: async ({ path, ctx }) => ({ status: 200, body: { data: await webhooks.get(workspaceOf(ctx), path.id) } }),
    updateWebhookEndpoint: async ({ path, body, ctx }) => ({
      status: 200,
      body: { data: await webhooks.update(workspaceOf(ctx), path.id, body) },
    }),
    deleteWebhookEndpoint: async ({ path, ctx }) => ({ status: 200, body: { data: await webhooks.remove(workspaceOf(ctx), path.id) } }),
    rotateWebhookSecret: async ({ path, body, ctx }) => ({
      status: 200,
      body: { data: await webhooks.rotateSecret(workspaceOf(ctx), path.id, body?.overlap_seconds) },
    }),
    sendWebhookTest: async ({ path, ctx }) => ({ status: 202, body: { data: await webhooks.sendTest(workspaceOf(ctx), path.id) } }),
    listWebhookDeliveries: async ({ path, query, ctx }) => ({
      status: 200,
      body: await webhooks.deliveries(workspaceOf(ctx), path.id, query ?? {}),
    }),
    replayWebhookDelivery: async ({ path, ctx }) => ({
      status: 202,
      body: { data: await webhooks.replay(workspaceOf(ctx), path.id, path.deliveryId) },
    }),
    listDashboardApprovals: async ({ query, ctx }) => ({ status: 200, body: await listApprovals(db, workspaceOf(ctx), query ?? {}) }),
    decideDashboardApproval: async ({ path, body, ctx }) => ({
      status: 200,
      body: { data: await decideApproval(db, workspaceOf(ctx), path.id, body, `${ctx.auth.keyName} (dashboard)`) },
    }),
    listDashboardAuditLogs: async ({ query, ctx }) => ({ status: 200, body: await listAuditLogs(db, workspaceOf(ctx), query ?? {}) }),
    verifyDashboardAuditChain: async ({ ctx }) => ({ status: 200, body: { data: await verifyChain(db, workspaceOf(ctx)) } }),
    getDashboardCompliance: async ({ ctx }) => ({ status: 200, body: { data: await computeCompliance(db, workspaceOf(ctx)) } }),
    listDashboardAgents: async ({ query, ctx }) => ({ status: 200, body: await listAgents(db, workspaceOf(ctx), query ?? {}) }),
    getDashboardSettings: async ({ ctx }) => ({ status: 200, body: { data: await getSettings(db, workspaceOf(ctx)) } }),
    updateDashboardSettings: async ({ body, ctx }) => ({ status: 200, body: { data: await updateSettings(db, workspaceOf(ctx), body) } }),
    getBilling: async ({ ctx }) => ({ status: 200, body: { data: await billing(workspaceOf(ctx)) } }),
    setBillingPlan: async ({ body, ctx }) => {
      await setPlan(db, workspaceOf(ctx), body.plan);
      return { status: 200, body: { data: await billing(workspaceOf(ctx)) } };
    },
  };
}
