import type { ApprovalCreate, ListApprovalsData } from '@warden/contract';
import type { Services } from '../../services.ts';
import type { RequestContext } from '../../shared/context.ts';
import type { Handlers } from '../../shared/handler-types.ts';

export const approvalHandlers = ({ approvals }: Services) => {
  // Shared by the operation and its v1 alias, so typed by shape rather than by operation.
  const list = async ({ query, ctx }: { query?: ListApprovalsData['query']; ctx: RequestContext }) => ({
    status: 200 as const,
    body: await approvals.list(ctx.auth.workspaceId, query ?? {}),
  });
  const create = async ({ body, ctx }: { body: ApprovalCreate; ctx: RequestContext }) => ({
    status: 201 as const,
    body: { data: await approvals.create(ctx.auth.workspaceId, body, ctx.auth.keyName) },
  });
  return {
    listApprovals: list,
    listApprovalRequests: list,
    createApproval: create,
    createApprovalRequest: create,
    getApproval: async ({ path, ctx }) => ({ status: 200, body: { data: await approvals.get(ctx.auth.workspaceId, path.id) } }),
    decideApproval: async ({ path, body, ctx }) => ({
      status: 200,
      body: { data: await approvals.decide(ctx.auth.workspaceId, path.id, body, ctx.auth.keyName) },
    }),
  } satisfies Partial<Handlers>;
};
