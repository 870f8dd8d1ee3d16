import type { HandlerDeps } from '../../handlers.ts';
import type { Handlers } from '../../http/router.ts';
import * as policies from './policies.service.ts';

export const policyHandlers = ({ database: { db }, checkRules }: HandlerDeps) =>
  ({
    listPolicies: async ({ query, ctx }) => ({ status: 200, body: await policies.listPolicies(db, ctx.auth.workspaceId, query ?? {}) }),
    createPolicy: async ({ body, ctx }) => ({
      status: 201,
      body: { data: await policies.createPolicy(db, ctx.auth.workspaceId, body, checkRules) },
    }),
    getPolicy: async ({ path, ctx }) => ({ status: 200, body: { data: await policies.getPolicy(db, ctx.auth.workspaceId, path.id) } }),
    updatePolicy: async ({ path, body, ctx }) => ({
      status: 200,
      body: { data: await policies.updatePolicy(db, ctx.auth.workspaceId, path.id, body, checkRules) },
    }),
  }) satisfies Partial<Handlers>;
