import type { Services } from '../../services.ts';
import type { Handlers } from '../../shared/handler-types.ts';

export const complianceHandlers = ({ compliance }: Services) =>
  ({
    getComplianceStatus: async ({ ctx }) => ({ status: 200, body: { data: await compliance.compute(ctx.auth.workspaceId) } }),
  }) satisfies Partial<Handlers>;
