import type { Services } from '../../services.ts';
import type { Handlers } from '../../shared/handler-types.ts';

export const runtimeHandlers = ({ execution }: Services) =>
  ({
    executeRuntime: async ({ body, ctx }) => ({ status: 200, body: { data: await execution.execute(ctx, body) } }),
    discoverMcpTools: async ({ body, ctx }) => ({ status: 200, body: { data: await execution.discoverTools(ctx, body) } }),
    callMcpTool: async ({ body, ctx }) => ({ status: 200, body: { data: await execution.callTool(ctx, body) } }),
    openMcpSession: async ({ body, ctx }) => ({ status: 200, body: { data: await execution.openSession(ctx, body) } }),
  }) satisfies Partial<Handlers>;
