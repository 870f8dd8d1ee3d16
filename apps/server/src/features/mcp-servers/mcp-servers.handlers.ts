import type { HandlerDeps } from '../../handlers.ts';
import type { Handlers } from '../../http/router.ts';
import * as servers from './mcp-servers.service.ts';

export const mcpServerHandlers = ({ database: { db } }: HandlerDeps) =>
  ({
    listMcpServers: async ({ query, ctx }) => ({ status: 200, body: await servers.listMcpServers(db, ctx.auth.workspaceId, query ?? {}) }),
    createMcpServer: async ({ body, ctx }) => ({
      status: 201,
      body: { data: await servers.createMcpServer(db, ctx.auth.workspaceId, body) },
    }),
    getMcpServer: async ({ path, ctx }) => ({ status: 200, body: { data: await servers.getMcpServer(db, ctx.auth.workspaceId, path.id) } }),
    updateMcpServer: async ({ path, body, ctx }) => ({
      status: 200,
      body: { data: await servers.updateMcpServer(db, ctx.auth.workspaceId, path.id, body) },
    }),
    deleteMcpServer: async ({ path, ctx }) => ({
      status: 200,
      body: { data: await servers.deleteMcpServer(db, ctx.auth.workspaceId, path.id) },
    }),
  }) satisfies Partial<Handlers>;
