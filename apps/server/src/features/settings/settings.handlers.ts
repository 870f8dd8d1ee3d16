import type { HandlerDeps } from '../../handlers.ts';
import type { Handlers } from '../../http/router.ts';
import * as settings from './settings.service.ts';

export const settingsHandlers = ({ database: { db } }: HandlerDeps) =>
  ({
    getSettings: async ({ ctx }) => ({ status: 200, body: { data: await settings.getSettings(db, ctx.auth.workspaceId) } }),
    updateSettings: async ({ body, ctx }) => ({
      status: 200,
      body: { data: await settings.updateSettings(db, ctx.auth.workspaceId, body) },
    }),
  }) satisfies Partial<Handlers>;
