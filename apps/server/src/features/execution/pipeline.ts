/**
 * The one door every effect Warden causes goes through: decide on the act as it will be sent
 * (recorded before anything is sent), hold it for its approval when the caller can wait, run it
 * only when allowed, and record its outcome truthfully: succeeded, failed, refused by the egress
 * guard, or cancelled because the caller went away. The REST runtime, the HTTP proxy and the
 * MCP gateway (calls, reads, prompts, questions, listings, tasks) all run their acts here.
 */
import type { Kysely } from 'kysely';
import type { DB } from '../../db/schema.ts';
import type { RequestContext } from '../../shared/context.ts';
import { ApiError } from '../../shared/errors.ts';
import { type ApprovalWait, awaitApproval, type WaitOptions } from '../approvals/approval-wait.ts';
import type { AuditLog } from '../audit/audit.service.ts';
import type { DecisionOutcome, DecisionRequest, DecisionService } from '../decisions/decisions.ts';
import { UpstreamMessageTooLarge } from './mcp-fetch.ts';
import { type ExecutionOutcome, outcomeBasis, recordOutcome } from './outcome.ts';

/** What an allowed act runs (`decided` names the agent it runs for), and what its outcome records of the value. */
export interface Work<T> {
  run: (decided: DecisionOutcome) => Promise<T>;
  describe: (value: T) => Record<string, unknown>;
}

export interface RunOptions {
  /** Aborted when the caller abandons the act: it is then recorded `cancelled`, not `failed`. */
  signal?: AbortSignal;
  /** The caller can wait for an approval policy asks for (a held MCP call): how long, and how it is told. */
  hold?: WaitOptions;
}

/** What became of an act: its decision, its value once allowed and run (else null), and how a hold for its approval ended. */
export interface Ran<T> {
  decided: DecisionOutcome;
  value: T | null;
  waited?: ApprovalWait;
}

/** Why an act failed, in its outcome's context, when more is known than that it failed. */
const failureReason = (error: unknown): string | undefined =>
  error instanceof ApiError && error.cause instanceof UpstreamMessageTooLarge ? 'upstream_message_too_large' : undefined;

export class ActPipeline {
  constructor(
    private readonly db: Kysely<DB>,
    private readonly decisions: DecisionService,
    private readonly audit: AuditLog,
  ) {}

  async govern<T>(ctx: RequestContext, request: DecisionRequest, work: Work<T>, { signal, hold }: RunOptions = {}): Promise<Ran<T>> {
    let decided = await this.decisions.decide(ctx, request);
    let waited: ApprovalWait | undefined;
    const approvalId = decided.result.approval_id;
    if (hold && decided.result.action === 'require_approval' && !decided.result.allowed && approvalId !== null) {
      waited = await awaitApproval(this.db, ctx.auth.workspaceId, approvalId, hold);
      // decided again as a retry of the same act: the approval is used once, by whichever call gets it
      if (waited === 'approved') decided = await this.decisions.decide(ctx, { ...request, retried: true });
    }
    if (!decided.result.allowed) return { decided, value: null, waited };
    return { decided, value: await this.perform(ctx, decided, work, signal) };
  }

  /**
   * Runs an allowed act and records its outcome, a failure too. A caller that abandoned the act
   * is recorded `cancelled`: not sent when it went before the act started, else its upstream
   * outcome unknown (the upstream may have run it).
   */
  private async perform<T>(ctx: RequestContext, decided: DecisionOutcome, work: Work<T>, signal: AbortSignal | undefined): Promise<T> {
    const started = performance.now();
    const record = (outcome: ExecutionOutcome) =>
      recordOutcome(this.audit, ctx.auth.workspaceId, ctx.requestId, outcomeBasis(decided), {
        ...outcome,
        context: { ...outcome.context, duration_ms: Math.round(performance.now() - started) },
      });
    const cancelled = (upstream: 'not_sent' | 'unknown') =>
      record({
        result: 'allowed',
        message: 'cancelled: the caller went away',
        context: { outcome: 'cancelled', upstream_outcome: upstream },
      });
    if (signal?.aborted) {
      await cancelled('not_sent');
      throw signal.reason ?? new Error('cancelled');
    }
    let value: T;
    try {
      value = await work.run(decided);
    } catch (error) {
      if (signal?.aborted) {
        await cancelled('unknown');
        throw error;
      }
      const denied = error instanceof ApiError && error.code === 'execution_target_denied';
      const reason = failureReason(error);
      await record({
        result: denied ? 'blocked' : 'allowed',
        message: error instanceof ApiError ? error.message : 'execution failed',
        context: { outcome: denied ? 'target_denied' : 'failed', ...(reason ? { reason } : {}) },
      });
      throw error;
    }
    await record({ result: 'allowed', message: 'executed', context: { outcome: 'succeeded', ...work.describe(value) } });
    return value;
  }
}
