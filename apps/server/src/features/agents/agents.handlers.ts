import type { Services } from '../../services.ts';
import { actorOf } from '../../shared/context.ts';
import type { Handlers } from '../../shared/handler-types.ts';

export const agentHandlers = ({ agents }: Services) =>
  ({
    listAgents: async ({ query, ctx }) => ({ status: 200, body: await agents.list(ctx.auth.workspaceId, query ?? {}) }),
    createAgent: async ({ body, ctx }) => ({ status: 201, body: { data: await agents.create(ctx.auth.workspaceId, body, actorOf(ctx)) } }),
    getAgent: async ({ path, ctx }) => ({ status: 200, body: { data: await agents.get(ctx.auth.workspaceId, path.id) } }),
    updateAgent: async ({ path, body, ctx }) => ({
      status: 200,
      body: { data: await agents.update(ctx.auth.workspaceId, path.id, body, actorOf(ctx)) },
    }),
    deleteAgent: async ({ path, ctx }) => ({
      status: 200,
      body: { data: await agents.remove(ctx.auth.workspaceId, path.id, actorOf(ctx)) },
    }),
  }) satisfies Partial<Handlers>;
