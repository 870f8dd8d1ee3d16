import type { Services } from '../../services.ts';
import { actorOf } from '../../shared/context.ts';
import type { Handlers } from '../../shared/handler-types.ts';

export const policyHandlers = ({ policies }: Services) =>
  ({
    listPolicies: async ({ query, ctx }) => ({ status: 200, body: await policies.list(ctx.auth.workspaceId, query ?? {}) }),
    createPolicy: async ({ body, ctx }) => ({
      status: 201,
      body: { data: await policies.create(ctx.auth.workspaceId, body, actorOf(ctx)) },
    }),
    getPolicy: async ({ path, ctx }) => ({ status: 200, body: { data: await policies.get(ctx.auth.workspaceId, path.id) } }),
    updatePolicy: async ({ path, body, ctx }) => ({
      status: 200,
      body: { data: await policies.update(ctx.auth.workspaceId, path.id, body, actorOf(ctx)) },
    }),
    applyPolicyBundle: async ({ body, ctx }) => ({
      status: 200,
      body: { data: await policies.applyBundle(ctx.auth.workspaceId, body, actorOf(ctx)) },
    }),
    simulatePolicies: async ({ body, ctx }) => ({ status: 200, body: { data: await policies.simulate(ctx.auth.workspaceId, body) } }),
    deletePolicy: async ({ path, ctx }) => ({
      status: 200,
      body: { data: await policies.remove(ctx.auth.workspaceId, path.id, actorOf(ctx)) },
    }),
  }) satisfies Partial<Handlers>;
