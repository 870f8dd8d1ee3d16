/**
 * The methods the gateway serves, governed, for either protocol era (McpGateway serves the
 * transport): listings and reads, prompts, completions and logging (discovery-methods.ts,
 * governed-methods.ts), tool calls held for their approval, tasks (gateway-tasks.ts), and the
 * questions an upstream asks, each decided as an act of its own. Every one runs through
 * ExecutionService, the act pipeline's door for the gateway.
 */

import { randomUUID } from 'node:crypto';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import type { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { CallToolRequestSchema, type CallToolResult, McpError } from '@modelcontextprotocol/sdk/types.js';
import { ApiError } from '../../shared/errors.ts';
import { isObject } from '../../shared/objects.ts';
import { MCP_METHOD_ACTIONS } from '../acts/act.ts';
import type { DecisionOutcome } from '../decisions/decisions.ts';
import { callUpstreamTool, type ExecutionService, MCP_REQUEST_TIMEOUT_MS, type McpOperation } from '../execution/execution.service.ts';
import type { McpTarget } from '../execution/mcp-dialer.ts';
import type { McpTasks } from '../execution/mcp-tasks.ts';
import { registerDiscoveryMethods } from './discovery-methods.ts';
import {
  APPROVAL_META,
  asClientSees,
  asProtocolError,
  asToolError,
  type Extra,
  type GatewayCaller,
  type GatewayOptions,
  NAMESPACE_SEPARATOR,
  POLICY_REFUSED,
  type Refused,
  refusal,
  resourceUri,
  type ToolCall,
  text,
} from './gateway-answers.ts';
import { GatewayTasks } from './gateway-tasks.ts';
import { type GovernedAct, registerGovernedMethods } from './governed-methods.ts';
import type { Asker } from './input-rounds.ts';
import type { ParamHeaders } from './param-headers.ts';
import { type ClientRequest, type Relay, relayed } from './relay.ts';
import { rpcError } from './rpc-error.ts';
import { questionDecision, TaskExtension } from './task-extension.ts';

/** The fixed action of a question an upstream asks of the client: its method's (the one table the replay reads too). */
const askAction = (method: ClientRequest['method']) => MCP_METHOD_ACTIONS[method] as string;

/** Which edge a request's methods are registered for: a 2026-07-28 request's, or a stateful session's (with its asker). */
export type Edge = { modern: true } | { modern: false; asker?: (requestId: string | number) => Asker };

export class GatewayMethods {
  private readonly taskMethods: GatewayTasks;
  private readonly taskExtension: TaskExtension;

  constructor(
    private readonly execution: ExecutionService,
    tasks: McpTasks,
    private readonly options: GatewayOptions,
    /** Aborted when the process shuts down: calls held for an approval stop waiting and are answered. */
    private readonly stopping: AbortSignal,
    /** Learns each listing's `Mcp-Param-*` declarations (param-headers.ts). */
    private readonly paramHeaders: ParamHeaders,
  ) {
    this.taskMethods = new GatewayTasks(execution, tasks, options, (call, run) => this.heldCall(call, run));
    this.taskExtension = new TaskExtension(
      tasks,
      (caller, single, id, work) => this.taskMethods.reach(caller, single, id, work),
      // a task's question is shown to the client later, in tasks/get: deciding it is the act here
      (caller, target, request) =>
        questionDecision(() => this.governedAsk(caller, target, request, async () => ({ shown_in: 'tasks/get' }))),
    );
  }

  /**
   * Registers every method the gateway serves on `server`: the v1 Server of a legacy request,
   * or the method table a 2026-07-28 request is dispatched through (modern.ts). One set of
   * governed methods serves both revisions.
   */
  register(server: Pick<Server, 'setRequestHandler'>, caller: GatewayCaller, single: McpTarget | null, origin: string, edge: Edge): void {
    const asker = edge.modern ? undefined : edge.asker;
    const servers = async (): Promise<McpTarget[]> => (single ? [single] : this.execution.registeredServers(caller.ctx));
    const route = (name: string) => this.route(caller, single, name);
    const named = (target: McpTarget, name: string) => (single ? name : `${target.slug}${NAMESPACE_SEPARATOR}${name}`);

    registerDiscoveryMethods(server, {
      single,
      servers,
      named,
      listTools: async (target, cursor) => {
        const listed = await this.execution.listTools(caller.ctx, target, {
          input: this.input(caller, 'mcp.discover'),
          cursor,
          client: caller.client,
        });
        if (listed.tools) await this.paramHeaders.learn(target, listed.tools);
        return listed;
      },
      discover: (target, method, capability, run, count) =>
        this.execution.governMcp(
          caller.ctx,
          target,
          { action: 'mcp.discover', input: this.input(caller, 'mcp.discover'), request: { method } },
          'discovery_failed',
          async (client) => (client.getServerCapabilities()?.[capability] ? run(client) : null),
          (r) => ({ [capability]: r ? count(r) : 0 }),
          { idempotent: true, client: caller.client },
        ),
      skipOnAggregate: (error) => this.skipOnAggregate(single, error),
    });

    server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
      const { target, name } = await route(request.params.name);
      const args = request.params.arguments ?? {};
      // a task asked for in the stateful revisions' terms (2026-07-28 has tasks only as the server's choice)
      const task = edge.modern ? undefined : request.params.task;
      const call: ToolCall = {
        caller,
        target,
        tool: name,
        args,
        extra: { ...(extra as Extra), ask: asker?.(extra.requestId) ?? (extra as Extra).ask },
        origin,
        aggregate: single === null,
      };
      return task ? this.taskMethods.create(call, task) : this.callTool(call);
    });

    if (edge.modern) this.taskExtension.register(server, caller, single);
    else this.taskMethods.register(server, caller, single);

    registerGovernedMethods(server, {
      servers,
      route,
      governed: (target, act, work) => this.governed(caller, target, act, work),
      resourceUri,
      namespaced: single ? null : named,
    });
  }

  /** The server a name belongs to and the name the server knows it by (on the aggregate, names are namespaced). */
  async route(caller: GatewayCaller, single: McpTarget | null, name: string): Promise<{ target: McpTarget; name: string }> {
    if (single) return { target: single, name };
    const at = name.indexOf(NAMESPACE_SEPARATOR);
    if (at <= 0) throw rpcError(-32602, `'${name}' names no server: names here are '<server>${NAMESPACE_SEPARATOR}<name>'`);
    const target = await this.execution.registeredServer(caller.ctx, name.slice(0, at)).catch((error) => {
      throw asProtocolError(error);
    });
    return { target, name: name.slice(at + NAMESPACE_SEPARATOR.length) };
  }

  /** On the aggregate, a server that fails (or went away) is left out of a listing; on a server's own endpoint, it is the answer. */
  private skipOnAggregate(single: McpTarget | null, error: unknown): null {
    if (single || !(error instanceof ApiError) || error.status < 403 || error.status === 503) throw asProtocolError(error);
    return null;
  }

  private input(caller: GatewayCaller, action: string, resource?: string): McpOperation['input'] {
    // An MCP client cannot state an environment: the agent's registered one is the act's.
    return { action, environment: caller.agent.environment, ...(resource !== undefined ? { resource } : {}) };
  }

  /**
   * A read or a prompt: decided on the request as it is sent (method and params), run when
   * allowed, a JSON-RPC error naming the policy when not.
   */
  private async governed<T>(caller: GatewayCaller, target: McpTarget, act: GovernedAct, work: (client: Client) => Promise<T>): Promise<T> {
    const { ask } = act;
    // what the upstream asks meanwhile goes to a client that can be asked (a 2026-07-28 one, in input rounds)
    const asking = ask
      ? (client: Client) =>
          relayed(
            client,
            {
              notify: async () => undefined,
              ask: (request, signal, key) => ask(request, signal, (deliver) => this.governedAsk(caller, target, request, deliver), key),
            },
            () => work(client),
          )
      : work;
    const { decided, value } = await this.execution
      .governMcp(
        caller.ctx,
        target,
        {
          action: act.action,
          input: this.input(caller, act.action, act.resource),
          request: { method: act.method, params: act.params },
          retried: true,
        },
        'call_failed',
        asking,
        () => ({}),
        // a client that goes away makes the outcome `cancelled`, not `failed`
        { idempotent: true, signal: act.signal, client: caller.client },
      )
      .catch((error) => {
        throw asProtocolError(error);
      });
    if (value === null) {
      const { approval_id } = decided.result;
      throw rpcError(POLICY_REFUSED, approval_id ? `${refusal(decided)} (approval ${approval_id} is pending)` : refusal(decided), {
        result: decided.result.result,
        policy: decided.result.policy,
        approval_id,
      });
    }
    return value;
  }

  /** Where a call relays what its upstream sends meanwhile: notifications as they come, questions decided first. */
  private relayTo({ caller, target, extra, aggregate }: ToolCall): Relay {
    const { ask } = extra;
    return {
      notify: (notification) => extra.sendNotification(asClientSees(target, !aggregate, notification)),
      ...(extra.polled ? { polled: extra.polled } : {}),
      ...(ask
        ? {
            ask: (request: ClientRequest, signal: AbortSignal, key?: string) =>
              ask(request, signal, (deliver) => this.governedAsk(caller, target, request, deliver), key),
          }
        : {}),
    };
  }

  /**
   * What an upstream asks of the client during a call, as a governed act of its own
   * (`mcp.sampling`, `mcp.elicitation`, `mcp.roots`) on the whole request relayed: relayed once allowed, its
   * outcome audited; refused, the upstream is answered a JSON-RPC error naming the policy.
   */
  async governedAsk(caller: GatewayCaller, target: McpTarget, request: ClientRequest, ask: () => Promise<unknown>): Promise<unknown> {
    const action = askAction(request.method);
    const { _meta, ...params } = (request.params ?? {}) as Record<string, unknown>;
    const { decided, value } = await this.execution
      .governMcp(
        caller.ctx,
        target,
        { action, input: this.input(caller, action), request: { method: request.method, params }, retried: true },
        'call_failed',
        async () => ({ answer: await ask() }),
        ({ answer }) => (isObject(answer) && typeof answer.action === 'string' ? { elicitation_action: answer.action } : {}),
        { client: caller.client },
      )
      .catch((error) => {
        // the client's own answer (an error it sent, a timeout) goes back as it is
        throw error instanceof ApiError && error.cause instanceof McpError ? error.cause : error;
      });
    if (value === null) throw rpcError(POLICY_REFUSED, refusal(decided), { result: decided.result.result, policy: decided.result.policy });
    return value.answer;
  }

  /**
   * A tools/call, decided, held for its approval and recorded. A client that takes tasks may be
   * answered one, when the upstream makes one (task-extension.ts).
   */
  async callTool(call: ToolCall): Promise<CallToolResult> {
    const { tool, args, extra } = call;
    const taskId = extra.tasks ? randomUUID() : undefined;
    // a task the upstream made, until it is kept: one the call cannot keep is cancelled, not left running
    let offered: Record<string, unknown> | undefined;
    try {
      const called = await this.heldCall(call, (onProgress) => ({
        work: async (client): Promise<CallToolResult> => {
          offered = taskId ? await this.taskExtension.offer(client, call, taskId) : undefined;
          return (
            (offered as CallToolResult | undefined) ??
            relayed(client, this.relayTo(call), () =>
              callUpstreamTool(
                client,
                { name: tool, arguments: args },
                { timeout: MCP_REQUEST_TIMEOUT_MS, signal: extra.signal, resetTimeoutOnProgress: true, onprogress: onProgress },
              ),
            )
          );
        },
        describe: (r) => (r.resultType === 'task' ? { task_id: taskId, task_status: r.status } : { tool_error: r.isError === true }),
      }));
      if ('value' in called && taskId && called.value.resultType === 'task') {
        const task = called.value;
        offered = undefined;
        return (await this.taskExtension.keep(call, taskId, called.decided, task)) as CallToolResult;
      }
      if ('value' in called) return called.value;
      return (called.refused.inputRequired as CallToolResult | undefined) ?? text(called.refused.message, called.refused.meta);
    } catch (error) {
      if (taskId && offered?.resultType === 'task') await this.taskExtension.drop(call, taskId, offered);
      const result = asToolError(error);
      if (result) return result;
      throw asProtocolError(error);
    }
  }

  /**
   * A tool call run through the act pipeline, held open for its approval when policy asks for
   * one (the pipeline waits; the client is told by progress notifications): the value of `work`
   * once allowed, else what the refusal says. `run` builds the work from the function that
   * relays the upstream's progress to the client.
   */
  private async heldCall<T>(
    { caller, target, tool, args, extra, origin }: ToolCall,
    run: (onProgress: (p: { progress: number; total?: number; message?: string }) => void) => {
      work: (client: Client) => Promise<T>;
      describe: (value: T) => Record<string, unknown>;
      dedicated?: boolean;
    },
  ): Promise<{ value: T; decided: DecisionOutcome } | { refused: Refused }> {
    const progressToken = extra._meta?.progressToken;
    let progress = 0;
    const notify = (value: number, message: string, total?: number) =>
      progressToken === undefined
        ? Promise.resolve()
        : extra
            .sendNotification({ method: 'notifications/progress', params: { progressToken, progress: value, total, message } })
            .catch(() => undefined);
    // the upstream's progress goes on from ours (progress only grows)
    const { work, describe, dedicated } = run(
      (p) => void notify(progress + p.progress, p.message ?? '', p.total === undefined ? undefined : progress + p.total),
    );
    const ran = await this.execution.governMcp(
      caller.ctx,
      target,
      { action: 'mcp.call', input: this.input(caller, 'mcp.call'), tool, arguments: args, retried: true },
      'call_failed',
      work,
      describe,
      {
        dedicated,
        signal: extra.signal,
        client: caller.client,
        hold: extra.handBack
          ? undefined
          : {
              until: Date.now() + this.options.approvalWaitMs,
              signal: AbortSignal.any([extra.signal, this.stopping]),
              onWait: async (message) => {
                progress += 1;
                await notify(progress, message);
              },
            },
      },
    );
    const { decided } = ran;
    if (ran.value !== null) return { value: ran.value, decided };
    const pending = decided.result.approval_id;
    if (decided.result.action !== 'require_approval' || pending === null) return { refused: { message: refusal(decided) } };
    if (ran.waited === 'rejected' || ran.waited === 'expired')
      return {
        refused: {
          message: `Denied: approval ${pending} ${ran.waited === 'rejected' ? 'was rejected' : 'expired'}`,
          meta: { [APPROVAL_META]: { id: pending, status: ran.waited } },
        },
      };
    const stopping = this.stopping.aborted ? ' This Warden process is shutting down, so the call is not held any longer.' : '';
    const page = `${origin}/dashboard/#/approvals`;
    const message =
      `Approval required: ${decided.result.message}.${stopping} Approval ${pending} is pending: decide it in the Warden dashboard ` +
      `(${page}) or with PATCH ${origin}/api/v1/approvals/${pending}, then call this tool again with the same arguments.`;
    const meta = { [APPROVAL_META]: { id: pending, status: 'pending' } };
    // a 2026-07-28 client is sent to the approval page and retries the same act, which the approval then allows once
    const inputRequired = extra.handBack
      ? {
          resultType: 'input_required',
          inputRequests: { [`warden-approval-${pending}`]: { method: 'elicitation/create', params: { mode: 'url', message, url: page } } },
          _meta: meta,
        }
      : undefined;
    return { refused: { message, meta, ...(inputRequired ? { inputRequired } : {}) } };
  }
}
