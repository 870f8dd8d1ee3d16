/**
 * The tasks extension of MCP 2026-07-28 (`io.modelcontextprotocol/tasks`, SEP-2663) at the
 * gateway (docs/decisions/0030-mcp-both-revisions.md, item 15). Task creation is the server's
 * choice, and Warden leaves it to the upstream: a tools/call from a client that declares the
 * extension, to an upstream that offers it, is sent declaring it too; the task it may answer is
 * kept as an MCP task of Warden's (its row, under the agent's cap, as the stateful revisions'
 * tasks are: gateway-tasks.ts) and shown to the client under Warden's id. The call itself is
 * decided, held for its approval and recorded as any call (GatewayMethods.callTool).
 *
 * A task's questions (`inputRequests` in `tasks/get`) are acts: each is decided once for the
 * agent (`mcp.elicitation`, `mcp.sampling`, `mcp.roots`) before the client sees it, and
 * `tasks/update` sends upstream only answers to questions that were allowed. A refused question
 * ends the task: it is cancelled upstream and shown `failed` with the policy's refusal (the
 * extension has no way to answer a question with an error). The task's end is recorded once,
 * by whoever sees it first.
 */
import { createHash } from 'node:crypto';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import type { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { McpError } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import { stableJson } from '../../shared/canonical-json.ts';
import { TASKS_EXTENSION } from '../../shared/mcp-extensions.ts';
import { isObject } from '../../shared/objects.ts';
import { bareMcpMessage } from '../../shared/text.ts';
import type { DecisionOutcome } from '../decisions/decisions.ts';
import { MCP_REQUEST_TIMEOUT_MS } from '../execution/execution.service.ts';
import type { McpTarget } from '../execution/mcp-dialer.ts';
import type { GatewayTaskRow, InputDecision, McpTasks } from '../execution/mcp-tasks.ts';
import { type Extra, type GatewayCaller, INVALID_PARAMS, POLICY_REFUSED, type ToolCall } from './gateway-answers.ts';
import { type GatewayTasks, MAX_LIVE_TASKS_PER_AGENT, MAX_TASK_TTL_MS, RESERVATION_MARGIN_MS, TERMINAL } from './gateway-tasks.ts';
import { MODERN_REVISION } from './modern.ts';
import type { ClientRequest } from './relay.ts';
import { rpcError } from './rpc-error.ts';

const MISSING_CAPABILITY = -32021;
/** Where a task's refusal is kept beside its questions' decisions (an upstream key of that name is refused as reused). */
const ENDED_BY = 'warden/refused';
/** What a task of the extension says of itself; anything else the upstream sends is not passed on. */
const TASK_FIELDS = ['status', 'statusMessage', 'createdAt', 'lastUpdatedAt', 'ttlMs', 'pollIntervalMs'] as const;

/** The extension's task methods, as the gateway's method table takes them (modern.ts registers them by name). */
const taskMethod = <M extends string>(method: M) =>
  z.object({ method: z.literal(method), params: z.object({ taskId: z.string() }).passthrough() });
const TaskMethods = { get: taskMethod('tasks/get'), update: taskMethod('tasks/update'), cancel: taskMethod('tasks/cancel') };

/** What the client is shown of an upstream's task: the extension's fields, under Warden's id. */
function shown(id: string, task: Record<string, unknown>): Record<string, unknown> {
  const fields = Object.fromEntries(TASK_FIELDS.filter((key) => task[key] !== undefined).map((key) => [key, task[key]]));
  // the TTL Warden keeps the task for, which is what the client can rely on
  return { ...fields, ttlMs: ttlOf(task), taskId: id };
}

/** A task ended by a question its agent may not be asked: what the client is shown. */
const refusedTask = (id: string, task: Record<string, unknown>, message: string) => ({
  ...shown(id, task),
  status: 'failed',
  statusMessage: message,
  error: { code: POLICY_REFUSED, message },
});

/** Decides one question an upstream asks of the client (GatewayMethods.governedAsk), with nothing to deliver yet. */
export type DecideQuestion = (caller: GatewayCaller, target: McpTarget, request: ClientRequest) => Promise<InputDecision>;

export class TaskExtension {
  constructor(
    private readonly tasks: McpTasks,
    private readonly reach: GatewayTasks['reach'],
    private readonly decideQuestion: DecideQuestion,
  ) {}

  /**
   * A tools/call's work, when its client takes tasks and its upstream offers them: sent declaring
   * the extension, once a row is reserved under the agent's cap (nothing is sent past it). A task
   * answered keeps the row, under `id`, for `keep`; anything else lets it go. Undefined: the call
   * is run as any other — so it is when the upstream asks for input before deciding on a task
   * (the SDK's rounds relay those questions).
   */
  async offer(client: Client, call: ToolCall, id: string): Promise<Record<string, unknown> | undefined> {
    if (!call.extra.tasks || !this.tasks.offersTasks(client)) return undefined;
    const workspaceId = call.caller.ctx.auth.workspaceId;
    const reserved = await this.tasks.reserve(
      {
        workspace_id: workspaceId,
        id,
        agent_id: call.caller.agent.id,
        server_id: call.target.id,
        upstream_url: call.target.transport_url,
        // until keep fills it in; a row never kept expires and the sweep cancels the task it names
        expires_at: new Date(Date.now() + RESERVATION_MARGIN_MS),
      },
      MAX_LIVE_TASKS_PER_AGENT,
    );
    if (!reserved)
      throw rpcError(
        -32600,
        `Agent '${call.caller.agent.slug}' holds ${MAX_LIVE_TASKS_PER_AGENT} live tasks, the most Warden keeps: wait for one to end`,
      );
    let answered: Record<string, unknown>;
    try {
      answered = await this.tasks.offerTask(
        client,
        { name: call.tool, arguments: call.args },
        { timeout: MCP_REQUEST_TIMEOUT_MS, signal: call.extra.signal },
      );
      if (answered.resultType === 'task') {
        if (typeof answered.taskId !== 'string' || answered.taskId === '')
          throw new Error('the upstream answered a task without a task id');
        await this.tasks.noteUpstream(workspaceId, id, answered.taskId, MODERN_REVISION);
      }
    } catch (error) {
      await this.tasks.release(workspaceId, id);
      throw error;
    }
    if (answered.resultType === 'task') return answered;
    await this.tasks.release(workspaceId, id);
    return answered.resultType === 'input_required' ? undefined : answered;
  }

  /**
   * A task the upstream answered, once its call is recorded: its row completed, shown under
   * Warden's id. If that fails, the task is cancelled upstream and its row let go: no task runs
   * that Warden cannot reach (and if the process ends first, the sweep cancels it by the id
   * offer noted).
   */
  async keep(call: ToolCall, id: string, decided: DecisionOutcome, task: Record<string, unknown>): Promise<Record<string, unknown>> {
    try {
      await this.tasks.complete(call.caller.ctx.auth.workspaceId, id, decided, {
        upstream_session_id: null,
        protocol_version: MODERN_REVISION,
        upstream_task_id: String(task.taskId),
        expires_at: new Date(Date.now() + ttlOf(task)),
      });
    } catch (error) {
      await this.drop(call, id, task);
      throw error;
    }
    return { ...shown(id, task), resultType: 'task' };
  }

  /** A task that will not be kept: cancelled upstream, its reservation let go. */
  async drop(call: ToolCall, id: string, task: Record<string, unknown>): Promise<void> {
    await this.tasks.cancelUpstream(call.target, call.caller.agent.id, String(task.taskId));
    await this.tasks.release(call.caller.ctx.auth.workspaceId, id);
  }

  /** Registers tasks/get, tasks/update and tasks/cancel on a 2026-07-28 request's method table. */
  register(server: Pick<Server, 'setRequestHandler'>, caller: GatewayCaller, single: McpTarget | null): void {
    // a request about the task, on the upstream (McpTasks sends it as the extension frames it)
    type Upstream = (method: string, params: Record<string, unknown>) => Promise<Record<string, unknown>>;
    const on = <T>(extra: Extra, id: string, work: (row: GatewayTaskRow, upstream: Upstream, target: McpTarget) => Promise<T>) => {
      if (!extra.tasks)
        throw rpcError(MISSING_CAPABILITY, 'Missing required client capability', {
          requiredCapabilities: { extensions: { [TASKS_EXTENSION]: {} } },
        });
      return this.reach(caller, single, id, async (row, client, target) => {
        if (row.upstream_session_id !== null)
          throw rpcError(INVALID_PARAMS, `Task ${id} was created on a 2025-11-25 session: reach it with tasks/get there`);
        return work(row, (method, params) => this.tasks.modernTaskRequest(client, method, params, extra.signal), target);
      });
    };
    const set = server.setRequestHandler.bind(server) as (
      schema: unknown,
      handler: (request: { params: { taskId: string; inputResponses?: unknown } }, extra: Extra) => Promise<unknown>,
    ) => void;

    set(TaskMethods.get, (request, extra) =>
      on(extra, request.params.taskId, async (row, upstream, target) => {
        const task = await upstream('tasks/get', { taskId: row.upstream_task_id });
        // a task a refused question ended stays so, whatever the upstream says of it after
        const refused = [...decisionsOf(row.input_decisions).values()].find((decision) => !decision.allowed);
        if (refused && !refused.allowed) return refusedTask(row.id, task, refused.message);
        if (task.status === 'input_required' && isObject(task.inputRequests)) {
          const questions = await this.decided(caller, target, row, task.inputRequests);
          if ('refused' in questions) {
            await this.tasks.decidedInputs(row, { [ENDED_BY]: { allowed: false, message: questions.refused } });
            await upstream('tasks/cancel', { taskId: row.upstream_task_id }).catch(() => undefined);
            await this.tasks.finish(caller.ctx.requestId, row, { task_status: 'failed', refused_question: questions.key });
            return refusedTask(row.id, task, questions.refused);
          }
          return { ...shown(row.id, task), inputRequests: questions.shown };
        }
        if (TERMINAL.has(String(task.status)))
          await this.tasks.finish(caller.ctx.requestId, row, {
            task_status: task.status,
            ...(isObject(task.result) ? { tool_error: task.result.isError === true } : {}),
            ...(isObject(task.error) ? { error_code: task.error.code } : {}),
          });
        return {
          ...shown(row.id, task),
          ...(task.status === 'completed' && isObject(task.result) ? { result: withoutRelatedTask(task.result) } : {}),
          ...(task.status === 'failed' && isObject(task.error) ? { error: task.error } : {}),
        };
      }),
    );

    set(TaskMethods.update, (request, extra) =>
      on(extra, request.params.taskId, async (row, upstream) => {
        const answers = isObject(request.params.inputResponses) ? request.params.inputResponses : {};
        const decisions = decisionsOf(row.input_decisions);
        // only answers to questions decided and allowed go upstream: any other key is ignored, as the extension asks
        const allowed = Object.fromEntries(Object.entries(answers).filter(([key]) => decisions.get(key)?.allowed === true));
        if (Object.keys(allowed).length > 0) await upstream('tasks/update', { taskId: row.upstream_task_id, inputResponses: allowed });
        return {};
      }),
    );

    set(TaskMethods.cancel, (request, extra) =>
      on(extra, request.params.taskId, async (row, upstream) => {
        await upstream('tasks/cancel', { taskId: row.upstream_task_id });
        // cancelling is cooperative: the task's end is recorded when it is seen, now or at a later tasks/get
        const after = await upstream('tasks/get', { taskId: row.upstream_task_id }).catch(() => undefined);
        if (after && TERMINAL.has(String(after.status)))
          await this.tasks.finish(caller.ctx.requestId, row, {
            task_status: after.status,
            ...(after.status === 'cancelled' ? { cancelled_by: 'client' } : {}),
          });
        return {};
      }),
    );
  }

  /**
   * The task's questions, each decided once for the agent, by its key and the request it names
   * (a key asked again with another request is refused: keys are used once): all of them, to be
   * shown, or the first refused. Decisions are kept with the task; two polls deciding the same
   * key at once both record a decision, and both answer with the one kept first.
   */
  private async decided(
    caller: GatewayCaller,
    target: McpTarget,
    row: GatewayTaskRow,
    inputRequests: Record<string, unknown>,
  ): Promise<{ shown: Record<string, unknown> } | { refused: string; key: string }> {
    const asked = Object.entries(inputRequests).map(([key, request]) => ({ key, request, digest: questionDigest(request) }));
    const known = decisionsOf(row.input_decisions);
    const fresh: Record<string, InputDecision> = {};
    for (const { key, request, digest } of asked) {
      if (known.has(key)) continue;
      const method = isObject(request) ? request.method : undefined;
      const decision =
        typeof method === 'string' && QUESTION_METHODS.has(method)
          ? await this.decideQuestion(caller, target, request as ClientRequest)
          : { allowed: false as const, message: `Warden relays no question '${String(method)}' to a client` };
      fresh[key] = { ...decision, digest };
    }
    const kept = Object.keys(fresh).length > 0 ? decisionsOf(await this.tasks.decidedInputs(row, fresh)) : known;
    for (const { key, digest } of asked) {
      const decision = kept.get(key);
      if (!decision) return { refused: `the question '${key}' was not decided`, key };
      if (decision.digest !== digest) return { refused: `the upstream asked another question under the key '${key}', already used`, key };
      if (!decision.allowed) return { refused: decision.message, key };
    }
    return { shown: inputRequests };
  }
}

/** The questions an upstream may ask a client: each is decided as an act of its own. */
const QUESTION_METHODS = new Set(['elicitation/create', 'sampling/createMessage', 'roots/list']);

/** What a question's decision is bound to: its method and params, canonical. */
const questionDigest = (request: unknown) => createHash('sha256').update(stableJson(request)).digest('hex');

/** A task's kept decisions, by key: own keys only (a key named `constructor` is a key like any other). */
const decisionsOf = (stored: unknown): Map<string, InputDecision> =>
  new Map(isObject(stored) ? (Object.entries(stored) as [string, InputDecision][]) : []);

/** How long Warden keeps reaching a task: the TTL the upstream granted, at most MAX_TASK_TTL_MS (null: that long). */
const ttlOf = (task: Record<string, unknown>): number =>
  Math.min(typeof task.ttlMs === 'number' && task.ttlMs > 0 ? task.ttlMs : MAX_TASK_TTL_MS, MAX_TASK_TTL_MS);

/** The stateful revisions' related-task `_meta` names the upstream's id: the extension says nothing of it on an inlined result. */
function withoutRelatedTask(result: Record<string, unknown>): Record<string, unknown> {
  if (!isObject(result._meta) || !('io.modelcontextprotocol/related-task' in result._meta)) return result;
  const { 'io.modelcontextprotocol/related-task': _related, ...meta } = result._meta;
  return { ...result, _meta: meta };
}

/** A refusal as the question's decider answers it (GatewayMethods.governedAsk throws a policy's refusal). */
export const questionDecision = async (decide: () => Promise<unknown>): Promise<InputDecision> => {
  try {
    await decide();
    return { allowed: true };
  } catch (error) {
    if (error instanceof McpError && error.code === POLICY_REFUSED) return { allowed: false, message: bareMcpMessage(error.message) };
    throw error;
  }
};
