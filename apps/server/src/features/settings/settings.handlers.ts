import type { Services } from '../../services.ts';
import { actorOf } from '../../shared/context.ts';
import type { Handlers } from '../../shared/handler-types.ts';

export const settingsHandlers = ({ settings }: Services) =>
  ({
    getSettings: async ({ ctx }) => ({ status: 200, body: { data: await settings.get(ctx.auth.workspaceId) } }),
    updateSettings: async ({ body, ctx }) => ({
      status: 200,
      body: { data: await settings.update(ctx.auth.workspaceId, body, actorOf(ctx)) },
    }),
  }) satisfies Partial<Handlers>;
