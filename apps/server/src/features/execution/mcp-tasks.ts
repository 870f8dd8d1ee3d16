/**
 * MCP tasks' lifecycle, for the gateway (docs/decisions/0013-mcp-gateway.md, point 6): an
 * upstream task lives in the upstream session that created it, so a task-augmented call runs
 * on a session of its own, kept by id in `mcp_gateway_tasks` and reached again from any
 * process; the task's end is recorded once, by whoever sees it first, and its session is
 * terminated when the task expires. The gateway reaches tasks only through this class: the
 * rows, the sessions and the end's audit event are the execution layer's.
 */
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import type { Kysely } from 'kysely';
import type { DB } from '../../db/schema.ts';
import { inTransaction } from '../../db/transaction.ts';
import type { DecisionOutcome } from '../decisions/decisions.ts';
import type { McpConnector } from './mcp-connector.ts';
import type { McpTarget, UpstreamSession } from './mcp-dialer.ts';
import {
  addInputDecisions,
  claimExpiredTasks,
  completeTask,
  findTask,
  type GatewayTaskRow,
  markTaskFinished,
  noteUpstreamTask,
  releaseTask,
  reserveTask,
} from './mcp-tasks.repository.ts';
import { ModernUpstream } from './modern-upstream.ts';
import { type OutcomeBasis, outcomeBasis, recordOutcomeIn } from './outcome.ts';

export { upstreamSessionOf } from './mcp-dialer.ts';
export type { GatewayTaskRow } from './mcp-tasks.repository.ts';

/** How long a finished task stays reachable (its result asked again), whatever is left of its TTL. */
const FINISHED_TASK_KEEP_MS = 3600_000;
const SWEEP_BATCH = 100;

type Reservation = Parameters<typeof reserveTask>[1];

/** How one input request of a task was decided for its agent (refused: the policy's message), and which request it was. */
export type InputDecision = ({ allowed: true } | { allowed: false; message: string }) & { digest?: string };

export class McpTasks {
  private readonly sweeper: NodeJS.Timeout;

  constructor(
    private readonly db: Kysely<DB>,
    private readonly connector: McpConnector,
    sweepMs: number,
  ) {
    this.sweeper = setInterval(() => void this.sweep().catch(() => undefined), sweepMs);
    this.sweeper.unref();
  }

  /** Stops the sweep (shutdown). Live tasks keep their upstream sessions: a restarted Warden reaches them again. */
  close(): void {
    clearInterval(this.sweeper);
  }

  /** Reserves a task's row under the agent's cap of live tasks (false: the agent holds `cap` already). */
  reserve(row: Reservation, cap: number): Promise<boolean> {
    return inTransaction(this.db, (trx) => reserveTask(trx, row, cap));
  }

  /** Fills in a reserved row once the upstream created its task (a row no longer there is an error). */
  async complete(
    workspaceId: string,
    id: string,
    decided: DecisionOutcome,
    upstream: Omit<Parameters<typeof completeTask>[3], 'outcome_basis'>,
  ): Promise<void> {
    // what the task's end will record of its decision
    if (!(await completeTask(this.db, workspaceId, id, { ...upstream, outcome_basis: JSON.stringify(outcomeBasis(decided)) })))
      throw new Error(`the reservation of task ${id} is gone`);
  }

  /** Notes the upstream task a reserved call created (so that one never kept is still cancelled by the sweep). */
  async noteUpstream(workspaceId: string, id: string, upstreamTaskId: string, protocolVersion: string): Promise<void> {
    await noteUpstreamTask(this.db, workspaceId, id, upstreamTaskId, protocolVersion);
  }

  /** Drops a reservation no task came of. */
  async release(workspaceId: string, id: string): Promise<void> {
    await releaseTask(this.db, workspaceId, id).catch(() => undefined);
  }

  /** A call that created no task: its reservation dropped and, when it opened one, its session terminated. */
  async abandon(workspaceId: string, id: string, target: McpTarget, upstream: UpstreamSession | undefined): Promise<void> {
    if (upstream) await this.connector.terminate(target, upstream);
    await releaseTask(this.db, workspaceId, id).catch(() => undefined);
  }

  /** The agent's live task with this id, if it has one. */
  find(workspaceId: string, agentId: string, id: string): Promise<GatewayTaskRow | undefined> {
    return findTask(this.db, workspaceId, agentId, id);
  }

  /**
   * Runs `work` on the task's own upstream session (no handshake, not pooled); a 2026-07-28
   * upstream's task, which has no session, on the agent's pooled one (the task is named by its id).
   */
  attach<T>(target: McpTarget, row: GatewayTaskRow, work: (client: Client) => Promise<T>): Promise<T> {
    if (row.upstream_session_id === null) return this.connector.use(target, 'call_failed', { agentId: row.agent_id, session: null }, work);
    return this.connector.attach(
      target,
      'call_failed',
      { sessionId: row.upstream_session_id, protocolVersion: row.protocol_version, agentId: row.agent_id },
      work,
    );
  }

  /** Whether the upstream session speaks 2026-07-28 and offers the tasks extension. */
  offersTasks(client: Client): boolean {
    return client instanceof ModernUpstream && client.offersTasks;
  }

  /**
   * A tools/call sent declaring the tasks extension (revision 2026-07-28) to an upstream that
   * offers it (offersTasks): its result as sent (a task, a tool's result, or input asked first).
   */
  offerTask(
    client: Client,
    params: { name: string; arguments: Record<string, unknown> },
    options: { timeout: number; signal: AbortSignal },
  ) {
    return this.modernTaskRequest(client, 'tools/call', params, options.signal, options.timeout);
  }

  /** A request of the tasks extension about a 2026-07-28 upstream's task (`tasks/get`, `tasks/update`, `tasks/cancel`). */
  modernTaskRequest(client: Client, method: string, params: Record<string, unknown>, signal?: AbortSignal, timeout?: number) {
    if (!(client instanceof ModernUpstream)) throw new Error("the task's server no longer speaks 2026-07-28");
    return client.tasksRequest(method, params, { ...(signal ? { signal } : {}), ...(timeout ? { timeout } : {}) });
  }

  /** Asks a 2026-07-28 upstream to cancel its task, on the agent's pooled session (best effort: the task may have ended). */
  async cancelUpstream(target: McpTarget, agentId: string, upstreamTaskId: string): Promise<void> {
    await this.connector
      .use(target, 'call_failed', { agentId, session: null }, (client) =>
        this.modernTaskRequest(client, 'tasks/cancel', { taskId: upstreamTaskId }),
      )
      .catch(() => undefined);
  }

  /** Keeps how the task's input requests were decided (a key decided before keeps its first decision): every decision kept. */
  async decidedInputs(row: GatewayTaskRow, decisions: Record<string, InputDecision>): Promise<Record<string, InputDecision>> {
    const kept = await addInputDecisions(this.db, row.workspace_id, row.id, decisions);
    return (kept ?? { ...(row.input_decisions as object), ...decisions }) as Record<string, InputDecision>;
  }

  /** Records the end of a task: once, by whoever sees it first, in the transaction that marks it recorded. */
  async finish(requestId: string, row: GatewayTaskRow, context: Record<string, unknown>): Promise<void> {
    await inTransaction(this.db, async (trx) => {
      if (!(await markTaskFinished(trx, row.workspace_id, row.id, FINISHED_TASK_KEEP_MS))) return;
      await recordOutcomeIn(trx, row.workspace_id, requestId, row.outcome_basis as OutcomeBasis, {
        result: 'allowed',
        message: 'task ended',
        context: { outcome: 'task_ended', task_id: row.id, ...context },
      });
    });
  }

  /**
   * Ends expired tasks, each claimed by one process: the end of one no request saw is recorded
   * (`task_expired`) in the transaction that removes it, then its upstream session is
   * terminated. Answers how many were removed.
   */
  async sweep(): Promise<number> {
    let swept = 0;
    for (;;) {
      const expired = await inTransaction(this.db, async (trx) => {
        const rows = await claimExpiredTasks(trx, SWEEP_BATCH);
        for (const row of rows)
          if (row.finished_at === null && row.outcome_basis !== null)
            await recordOutcomeIn(trx, row.workspace_id, undefined, row.outcome_basis as OutcomeBasis, {
              result: 'allowed',
              message: 'task expired',
              context: { outcome: 'task_expired', task_id: row.id },
            });
        return rows;
      });
      await Promise.all(
        expired.map((row) => {
          const target = {
            id: row.server_id,
            workspace_id: row.workspace_id,
            slug: row.server_id,
            transport_url: row.upstream_url,
            transport: 'streamable_http' as const,
          };
          // a 2026-07-28 task has no session to end: the task itself is cancelled, or it would run on ungoverned
          if (row.upstream_session_id === null)
            return row.upstream_task_id === null || row.finished_at !== null
              ? undefined
              : this.cancelUpstream(target, row.agent_id, row.upstream_task_id);
          return row.protocol_version === null
            ? undefined
            : this.connector.terminate(target, { sessionId: row.upstream_session_id, protocolVersion: row.protocol_version });
        }),
      );
      swept += expired.length;
      if (expired.length < SWEEP_BATCH) return swept;
    }
  }
}
