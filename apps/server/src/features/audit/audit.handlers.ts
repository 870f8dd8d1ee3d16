import type { AuditEventCreate } from '@warden/contract';
import type { HandlerDeps } from '../../handlers.ts';
import type { RequestContext } from '../../http/context.ts';
import type { Handlers } from '../../http/router.ts';
import * as audit from './audit.service.ts';
import { verifyChain } from './chain.ts';

export const auditHandlers = ({ database: { db }, sealer }: HandlerDeps) => {
  // Shared by the operation and its v1 alias, so typed by shape rather than by operation.
  const create = async ({ body, ctx }: { body: AuditEventCreate; ctx: RequestContext }) => {
    // Queued for the sealer, which is told also when the answer was lost after the commit.
    const data = await audit
      .recordManualEvent(db, ctx.auth.workspaceId, body, ctx.requestId)
      .finally(() => sealer.markDirty(ctx.auth.workspaceId));
    return { status: 201 as const, body: { data } };
  };
  return {
    createAuditEvent: create,
    createAuditEventAlias: create,
    listAuditLogs: async ({ query, ctx }) => ({ status: 200, body: await audit.listAuditLogs(db, ctx.auth.workspaceId, query ?? {}) }),
    listEvents: async ({ query, ctx }) => ({ status: 200, body: await audit.listEventSummaries(db, ctx.auth.workspaceId, query ?? {}) }),
    verifyAuditChain: async ({ ctx }) => ({ status: 200, body: { data: await verifyChain(db, ctx.auth.workspaceId) } }),
  } satisfies Partial<Handlers>;
};
