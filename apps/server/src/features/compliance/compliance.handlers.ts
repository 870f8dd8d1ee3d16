import type { HandlerDeps } from '../../handlers.ts';
import type { Handlers } from '../../http/router.ts';
import { computeCompliance } from './compliance.service.ts';

export const complianceHandlers = ({ database: { db } }: HandlerDeps) =>
  ({
    getComplianceStatus: async ({ ctx }) => ({ status: 200, body: { data: await computeCompliance(db, ctx.auth.workspaceId) } }),
  }) satisfies Partial<Handlers>;
