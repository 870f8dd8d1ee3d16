import type { Services } from '../../services.ts';
import type { Handlers } from '../../shared/handler-types.ts';

export const healthHandlers = ({ health }: Services) =>
  ({
    getHealth: async () => {
      const data = await health.check();
      return data.database === 'ok' ? { status: 200, body: { data } } : { status: 503, body: { data } };
    },
  }) satisfies Partial<Handlers>;
