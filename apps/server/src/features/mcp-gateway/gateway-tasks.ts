/**
 * MCP tasks through the gateway (docs/decisions/0013-mcp-gateway.md, point 6): a task-augmented
 * tools/call, decided and held for its approval as any call, then sent upstream on a session of
 * the task's own; and tasks/get, tasks/result and tasks/cancel, which reach that session again
 * from any process. The rows, the sessions and the end's audit event are the execution layer's
 * (McpTasks).
 */
import { randomUUID } from 'node:crypto';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import type { Server } from '@modelcontextprotocol/sdk/server/index.js';
import {
  CallToolResultSchema,
  CancelTaskRequestSchema,
  CancelTaskResultSchema,
  type CreateTaskResult,
  CreateTaskResultSchema,
  GetTaskPayloadRequestSchema,
  GetTaskRequestSchema,
  GetTaskResultSchema,
  RELATED_TASK_META_KEY,
} from '@modelcontextprotocol/sdk/types.js';
import { type ExecutionService, MCP_REQUEST_TIMEOUT_MS } from '../execution/execution.service.ts';
import type { McpTarget, UpstreamSession } from '../execution/mcp-dialer.ts';
import { type GatewayTaskRow, type McpTasks, upstreamSessionOf } from '../execution/mcp-tasks.ts';
import {
  asProtocolError,
  type GatewayCaller,
  type GatewayOptions,
  type HeldCall,
  INVALID_PARAMS,
  POLICY_REFUSED,
  type ToolCall,
  upstreamAnswered,
} from './gateway-answers.ts';
import { rpcError } from './rpc-error.ts';

/** Live (unexpired) tasks an agent may hold through the gateway: each holds an upstream session. */
export const MAX_LIVE_TASKS_PER_AGENT = 100;
/** How long Warden keeps a task reachable at most, whatever TTL was asked or granted. */
export const MAX_TASK_TTL_MS = 24 * 3600_000;
/** How long a task-augmented call's reservation may wait for its approval and the upstream, beyond the approval wait. */
export const RESERVATION_MARGIN_MS = 2 * MCP_REQUEST_TIMEOUT_MS + 60_000;
/** How long a tasks/result waits for the task to end, at most (the client may ask again). */
const TASK_RESULT_WAIT_MS = 10 * 60_000;
/** A task's statuses that are its end, in both revisions. */
export const TERMINAL = new Set(['completed', 'failed', 'cancelled']);
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * A tool's `execution.taskSupport` as the upstream lists it (absent: `forbidden`, as the
 * protocol says); undefined when the tool is not found in the first pages (the upstream then
 * answers the call itself).
 */
async function taskSupportOf(client: Client, tool: string, signal: AbortSignal): Promise<string | undefined> {
  let cursor: string | undefined;
  for (let page = 0; page < 10; page++) {
    const listed = await client.listTools(cursor ? { cursor } : undefined, { timeout: MCP_REQUEST_TIMEOUT_MS, signal });
    const found = listed.tools.find((t) => t.name === tool);
    if (found) return found.execution?.taskSupport ?? 'forbidden';
    cursor = listed.nextCursor;
    if (!cursor) return undefined;
  }
  return undefined;
}

export class GatewayTasks {
  constructor(
    private readonly execution: ExecutionService,
    private readonly tasks: McpTasks,
    private readonly options: GatewayOptions,
    private readonly heldCall: HeldCall,
  ) {}

  /** Registers tasks/get, tasks/result and tasks/cancel on a request's Server. */
  register(server: Pick<Server, 'setRequestHandler'>, caller: GatewayCaller, single: McpTarget | null): void {
    server.setRequestHandler(GetTaskRequestSchema, async (request, extra) =>
      this.reach(caller, single, request.params.taskId, async (row, client) => {
        const task = await client.request({ method: 'tasks/get', params: { taskId: row.upstream_task_id } }, GetTaskResultSchema, {
          timeout: MCP_REQUEST_TIMEOUT_MS,
          signal: extra.signal,
        });
        if (TERMINAL.has(task.status)) await this.tasks.finish(caller.ctx.requestId, row, { task_status: task.status });
        return { ...task, taskId: row.id };
      }),
    );

    server.setRequestHandler(GetTaskPayloadRequestSchema, async (request, extra) =>
      this.reach(caller, single, request.params.taskId, async (row, client) => {
        // tasks/result waits for the task's end: as long as the task may live, within bounds
        const wait = Math.max(1_000, Math.min(row.expires_at.getTime() - Date.now(), TASK_RESULT_WAIT_MS));
        const result = await client
          .request({ method: 'tasks/result', params: { taskId: row.upstream_task_id } }, CallToolResultSchema, {
            timeout: wait,
            signal: extra.signal,
          })
          .catch(async (error) => {
            // an error the upstream answered is the task's result (a failed task's, or none left)
            if (upstreamAnswered(error))
              await this.tasks.finish(caller.ctx.requestId, row, { task_status: 'failed', error_code: error.code });
            throw error;
          });
        await this.tasks.finish(caller.ctx.requestId, row, { task_status: 'ended', tool_error: result.isError === true });
        // the upstream's task id is its own: the client knows this task by Warden's
        const meta = result._meta?.[RELATED_TASK_META_KEY]
          ? { ...result._meta, [RELATED_TASK_META_KEY]: { taskId: row.id } }
          : result._meta;
        return meta ? { ...result, _meta: meta } : result;
      }),
    );

    server.setRequestHandler(CancelTaskRequestSchema, async (request, extra) =>
      this.reach(caller, single, request.params.taskId, async (row, client) => {
        const task = await client.request({ method: 'tasks/cancel', params: { taskId: row.upstream_task_id } }, CancelTaskResultSchema, {
          timeout: MCP_REQUEST_TIMEOUT_MS,
          signal: extra.signal,
        });
        await this.tasks.finish(caller.ctx.requestId, row, { task_status: task.status, cancelled_by: 'client' });
        return { ...task, taskId: row.id };
      }),
    );
  }

  /**
   * A task-augmented tools/call: decided as the call itself (and held for its approval), then
   * sent upstream on a session of the task's own; the client is given the task under an id of
   * Warden's. The task's row is reserved first, under the agent's cap, and released when no
   * task comes of the call. Refused: a JSON-RPC error naming the policy (a task request has no
   * tool result to carry it).
   */
  async create(call: ToolCall, task: { ttl?: number }): Promise<CreateTaskResult> {
    const { caller, target, tool, args, extra } = call;
    const workspaceId = caller.ctx.auth.workspaceId;
    const id = randomUUID();
    const reserved = await this.tasks.reserve(
      {
        workspace_id: workspaceId,
        id,
        agent_id: caller.agent.id,
        server_id: target.id,
        upstream_url: target.transport_url,
        expires_at: new Date(Date.now() + this.options.approvalWaitMs + RESERVATION_MARGIN_MS),
      },
      MAX_LIVE_TASKS_PER_AGENT,
    );
    if (!reserved)
      throw rpcError(
        -32600,
        `Agent '${caller.agent.slug}' holds ${MAX_LIVE_TASKS_PER_AGENT} live tasks, the most Warden keeps: wait for one to end or expire`,
      );
    let upstream: UpstreamSession | undefined;
    try {
      const called = await this.heldCall(call, () => ({
        work: async (client) => {
          // a server without tasks for tools/call would run the tool and answer its result, not a task
          if (!client.getServerCapabilities()?.tasks?.requests?.tools?.call)
            throw new Error('it does not run tools as tasks (its capabilities have no tasks.requests.tools.call)');
          // nor would one whose tool does not run as a task: asked anyway, it may run the tool first
          const support = await taskSupportOf(client, tool, extra.signal);
          if (support === 'forbidden')
            throw rpcError(
              INVALID_PARAMS,
              `Tool '${tool}' does not run as a task (execution.taskSupport 'forbidden'): call it without one`,
            );
          const created = await client.request(
            {
              method: 'tools/call',
              params: { name: tool, arguments: args, task: task.ttl === undefined ? {} : { ttl: Math.min(task.ttl, MAX_TASK_TTL_MS) } },
            },
            CreateTaskResultSchema,
            { timeout: MCP_REQUEST_TIMEOUT_MS, signal: extra.signal },
          );
          upstream = upstreamSessionOf(client);
          return created;
        },
        describe: (r) => ({ task_id: id, task_status: r.task.status }),
        dedicated: true,
      }));
      if ('refused' in called) throw rpcError(POLICY_REFUSED, called.refused.message, called.refused.meta);
      const created = called.value;
      const session = upstream as UpstreamSession;
      // Warden reaches a task for the TTL the upstream granted, at most MAX_TASK_TTL_MS (null: unlimited)
      const ttl = Math.min(created.task.ttl ?? MAX_TASK_TTL_MS, MAX_TASK_TTL_MS);
      await this.tasks.complete(workspaceId, id, called.decided, {
        upstream_session_id: session.sessionId,
        protocol_version: session.protocolVersion,
        upstream_task_id: created.task.taskId,
        expires_at: new Date(Date.now() + ttl),
      });
      return { ...created, task: { ...created.task, taskId: id, ttl } };
    } catch (error) {
      // no task for the client: none left running upstream either (its outcome not recorded, its row not written)
      await this.tasks.abandon(workspaceId, id, target, upstream);
      throw asProtocolError(error);
    }
  }

  /**
   * Runs `work` on the upstream session of this agent's task `id` (on `/mcp/{server}`, a task of
   * that server only). A task this agent does not have, or whose server's URL has changed since, is not found.
   */
  async reach<T>(
    caller: GatewayCaller,
    single: McpTarget | null,
    id: string,
    work: (row: GatewayTaskRow, client: Client, target: McpTarget) => Promise<T>,
  ): Promise<T> {
    const row = UUID.test(id) ? await this.tasks.find(caller.ctx.auth.workspaceId, caller.agent.id, id) : undefined;
    const target = row && (single ?? (await this.execution.registeredServer(caller.ctx, row.server_id).catch(() => undefined)));
    if (!row || !target || target.id !== row.server_id || target.transport_url !== row.upstream_url)
      throw rpcError(INVALID_PARAMS, `Task not found: ${id}`);
    return this.tasks
      .attach(target, row, (client) => work(row, client, target))
      .catch((error) => {
        throw asProtocolError(error);
      });
  }
}
