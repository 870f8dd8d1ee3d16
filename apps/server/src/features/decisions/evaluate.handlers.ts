import type { Services } from '../../services.ts';
import type { Handlers } from '../../shared/handler-types.ts';

export const evaluateHandlers = ({ decisions }: Services) =>
  ({
    evaluatePolicy: async ({ body, ctx }) => {
      const outcome = await decisions.decide(ctx, {
        input: body.input,
        approvalId: body.approval_id,
        source: 'evaluation',
        viaProxy: false,
      });
      return { status: 200, body: { data: outcome.result } };
    },
  }) satisfies Partial<Handlers>;
