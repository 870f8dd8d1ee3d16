import type { AuditEventCreate } from '@warden/contract';
import type { Services } from '../../services.ts';
import type { RequestContext } from '../../shared/context.ts';
import type { Handlers } from '../../shared/handler-types.ts';

export const auditHandlers = ({ audit }: Services) => {
  // Shared by the operation and its v1 alias, so typed by shape rather than by operation.
  const create = async ({ body, ctx }: { body: AuditEventCreate; ctx: RequestContext }) => {
    const data = await audit.recordManual(ctx.auth.workspaceId, body, ctx.requestId);
    return { status: 201 as const, body: { data } };
  };
  return {
    createAuditEvent: create,
    createAuditEventAlias: create,
    listAuditLogs: async ({ query, ctx }) => ({ status: 200, body: await audit.list(ctx.auth.workspaceId, query ?? {}) }),
    listEvents: async ({ query, ctx }) => ({ status: 200, body: await audit.listSummaries(ctx.auth.workspaceId, query ?? {}) }),
    verifyAuditChain: async ({ query, ctx }) => ({
      status: 200,
      body: { data: await audit.verify(ctx.auth.workspaceId, query?.full ?? false) },
    }),
    getAuditVerificationStatus: async ({ ctx }) => ({ status: 200, body: { data: audit.verificationStatus(ctx.auth.workspaceId) } }),
    getAuditCheckpoint: async ({ query, ctx }) => ({
      status: 200,
      body: { data: await audit.checkpoint(ctx.auth.workspaceId, query?.tree_size) },
    }),
    getAuditSigningKey: async ({ ctx }) => ({ status: 200, body: { data: audit.signingKey(ctx.auth.workspaceId) } }),
    getAuditInclusionProof: async ({ query, ctx }) => ({
      status: 200,
      body: { data: await audit.inclusionProof(ctx.auth.workspaceId, query.event_id, query.tree_size) },
    }),
    getAuditConsistencyProof: async ({ query, ctx }) => ({
      status: 200,
      body: { data: await audit.consistencyProof(ctx.auth.workspaceId, query.from_size, query.to_size) },
    }),
  } satisfies Partial<Handlers>;
};
