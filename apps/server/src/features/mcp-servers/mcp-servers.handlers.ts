import type { Services } from '../../services.ts';
import { actorOf } from '../../shared/context.ts';
import type { Handlers } from '../../shared/handler-types.ts';

export const mcpServerHandlers = ({ mcpServers }: Services) =>
  ({
    listMcpServers: async ({ query, ctx }) => ({ status: 200, body: await mcpServers.list(ctx.auth.workspaceId, query ?? {}) }),
    createMcpServer: async ({ body, ctx }) => ({
      status: 201,
      body: { data: await mcpServers.create(ctx.auth.workspaceId, body, actorOf(ctx)) },
    }),
    getMcpServer: async ({ path, ctx }) => ({ status: 200, body: { data: await mcpServers.get(ctx.auth.workspaceId, path.id) } }),
    updateMcpServer: async ({ path, body, ctx }) => ({
      status: 200,
      body: { data: await mcpServers.update(ctx.auth.workspaceId, path.id, body, actorOf(ctx)) },
    }),
    deleteMcpServer: async ({ path, ctx }) => ({
      status: 200,
      body: { data: await mcpServers.remove(ctx.auth.workspaceId, path.id, actorOf(ctx)) },
    }),
    connectMcpServerOAuth: async ({ path, body, ctx }) => ({
      status: 200,
      body: { data: await mcpServers.connectOAuth(ctx.auth.workspaceId, path.id, ctx.origin, actorOf(ctx), body?.agent) },
    }),
    disconnectMcpServerOAuth: async ({ path, query, ctx }) => ({
      status: 200,
      body: { data: await mcpServers.disconnectOAuth(ctx.auth.workspaceId, path.id, actorOf(ctx), query?.agent) },
    }),
  }) satisfies Partial<Handlers>;
