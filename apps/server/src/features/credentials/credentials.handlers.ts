import type { Services } from '../../services.ts';
import { actorOf } from '../../shared/context.ts';
import type { Handlers } from '../../shared/handler-types.ts';

export const credentialHandlers = ({ credentials }: Services) =>
  ({
    listCredentials: async ({ query, ctx }) => ({ status: 200, body: await credentials.list(ctx.auth.workspaceId, query ?? {}) }),
    createCredential: async ({ body, ctx }) => ({
      status: 201,
      body: { data: await credentials.create(ctx.auth.workspaceId, body, actorOf(ctx)) },
    }),
    getCredential: async ({ path, ctx }) => ({ status: 200, body: { data: await credentials.get(ctx.auth.workspaceId, path.id) } }),
    updateCredential: async ({ path, body, ctx }) => ({
      status: 200,
      body: { data: await credentials.update(ctx.auth.workspaceId, path.id, body, actorOf(ctx)) },
    }),
    deleteCredential: async ({ path, ctx }) => ({
      status: 200,
      body: { data: await credentials.remove(ctx.auth.workspaceId, path.id, actorOf(ctx)) },
    }),
  }) satisfies Partial<Handlers>;
