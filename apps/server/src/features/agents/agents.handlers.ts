import type { HandlerDeps } from '../../handlers.ts';
import type { Handlers } from '../../http/router.ts';
import * as agents from './agents.service.ts';

export const agentHandlers = ({ database: { db } }: HandlerDeps) =>
  ({
    listAgents: async ({ query, ctx }) => ({ status: 200, body: await agents.listAgents(db, ctx.auth.workspaceId, query ?? {}) }),
    createAgent: async ({ body, ctx }) => ({ status: 201, body: { data: await agents.createAgent(db, ctx.auth.workspaceId, body) } }),
    getAgent: async ({ path, ctx }) => ({ status: 200, body: { data: await agents.getAgent(db, ctx.auth.workspaceId, path.id) } }),
    updateAgent: async ({ path, body, ctx }) => ({
      status: 200,
      body: { data: await agents.updateAgent(db, ctx.auth.workspaceId, path.id, body) },
    }),
    deleteAgent: async ({ path, ctx }) => ({ status: 200, body: { data: await agents.deleteAgent(db, ctx.auth.workspaceId, path.id) } }),
  }) satisfies Partial<Handlers>;
