import type { ApprovalCreate, ListApprovalsData } from '@warden/contract';
import type { HandlerDeps } from '../../handlers.ts';
import type { RequestContext } from '../../http/context.ts';
import type { Handlers } from '../../http/router.ts';
import * as approvals from './approvals.service.ts';

export const approvalHandlers = ({ database: { db } }: HandlerDeps) => {
  // Shared by the operation and its v1 alias, so typed by shape rather than by operation.
  const list = async ({ query, ctx }: { query?: ListApprovalsData['query']; ctx: RequestContext }) => ({
    status: 200 as const,
    body: await approvals.listApprovals(db, ctx.auth.workspaceId, query ?? {}),
  });
  const create = async ({ body, ctx }: { body: ApprovalCreate; ctx: RequestContext }) => ({
    status: 201 as const,
    body: { data: await approvals.createApproval(db, ctx.auth.workspaceId, body, ctx.auth.keyName) },
  });
  return {
    listApprovals: list,
    listApprovalRequests: list,
    createApproval: create,
    createApprovalRequest: create,
    getApproval: async ({ path, ctx }) => ({ status: 200, body: { data: await approvals.getApproval(db, ctx.auth.workspaceId, path.id) } }),
    decideApproval: async ({ path, body, ctx }) => ({
      status: 200,
      body: { data: await approvals.decideApproval(db, ctx.auth.workspaceId, path.id, body, ctx.auth.keyName) },
    }),
  } satisfies Partial<Handlers>;
};
