import type { HandlerDeps } from '../../handlers.ts';
import type { Handlers } from '../../http/router.ts';

export const evaluateHandlers = ({ decisions }: HandlerDeps) =>
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
