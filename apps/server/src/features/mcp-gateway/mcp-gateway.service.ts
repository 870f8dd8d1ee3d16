/**
 * Warden as an MCP server: unmodified MCP clients connect over Streamable HTTP to
 * `/mcp/{server}` (one registered server) or `/mcp` (every enabled server of the workspace,
 * names namespaced `slug__name`), and every message is governed as the REST runtime governs
 * it, on the same decision pipeline, audit log and upstream connections (ExecutionService):
 *
 * - tools/list: decided as `mcp.discover`, then filtered to the tools policy lets the agent call;
 * - tools/call: decided as `mcp.call` on the real server, tool and arguments, recorded before it
 *   is forwarded, its outcome recorded after; refused → a tool result with isError true;
 * - require_approval: the call waits (up to `approvalWaitMs`, with progress notifications when
 *   the client asked for them) for the approval bound to this exact act, and runs once it is
 *   approved; otherwise it answers which approval to decide, and the same call retried later
 *   finds that approval by the act's digest;
 * - a task-augmented tools/call (MCP tasks, gateway-tasks.ts): decided and held for approval as any call, then sent
 *   upstream on an upstream session of the task's own, which tasks/get, tasks/result and
 *   tasks/cancel reach again from any process (the task's row keeps the session's id); the
 *   task's end is recorded once, by the first request that sees it; its session is terminated
 *   when the task expires. tasks/list is not offered (see docs/decisions/0013-mcp-gateway.md);
 * - resources/list, resources/templates/list, prompts/list: decided as `mcp.discover`
 *   (discovery-methods.ts, with tools/list);
 *   resources/read as `mcp.resources.read` (resource: the URI, normalised and sent in that
 *   form: acts/resource-uri.ts), prompts/get as `mcp.prompts.get` (resource: the prompt's
 *   name); both on every parameter sent (an approval binds the arguments too);
 * - logging/setLevel, completion/complete, resources/subscribe and unsubscribe: `mcp.logging`,
 *   `mcp.completion`, `mcp.resources.subscribe` (governed-methods.ts, with resources/read and prompts/get);
 * - what the upstream sends during a tools/call: its log messages relayed on the call's stream,
 *   its sampling, elicitation and roots requests decided as `mcp.sampling`, `mcp.elicitation`
 *   and `mcp.roots` and relayed to the client, whose answer (a POST of its own, to any process)
 *   goes back (relay.ts);
 * - client sessions (gateway-sessions.ts): `initialize` opens one, kept in the database; its
 *   upstream sessions declare what its client declared, and its GET stream carries what they
 *   send outside any request.
 *
 * Each HTTP request is served by a Server of its own, in the SDK transport's stateless mode: a
 * client session is a row, not a transport's memory, so any process serves any request; what
 * upstream sessions are kept, the connection manager keeps.
 */
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { CallToolRequestSchema, type CallToolResult, McpError } from '@modelcontextprotocol/sdk/types.js';
import { AjvJsonSchemaValidator } from '@modelcontextprotocol/sdk/validation/ajv';
import type { Permission } from '@warden/contract';
import type { RequestContext } from '../../shared/context.ts';
import { ApiError } from '../../shared/errors.ts';
import { isObject } from '../../shared/objects.ts';
import type { DecisionOutcome } from '../decisions/decisions.ts';
import { callUpstreamTool, type ExecutionService, MCP_REQUEST_TIMEOUT_MS, type McpOperation } from '../execution/execution.service.ts';
import type { McpClientSessions } from '../execution/mcp-client-sessions.ts';
import type { McpTarget } from '../execution/mcp-connector.ts';
import type { McpTasks } from '../execution/mcp-tasks.ts';
import { type AgentDirectory, assertActive, resolveAgent } from '../identity/agent-identity.ts';
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
import { GatewaySessions, sseEvent } from './gateway-sessions.ts';
import { GatewayTasks } from './gateway-tasks.ts';
import { registerGovernedMethods } from './governed-methods.ts';
import { isModernRequest, ModernEdge } from './modern.ts';
import { type PlainToolCall, plainToolCall, toolCallAnswer } from './plain-tool-call.ts';
import { type ClientRequest, Questions, type Relay, relayed } from './relay.ts';
import { rpcError } from './rpc-error.ts';
import { HEADER_MISMATCH, headerMismatch } from './standard-headers.ts';

const RUNTIME_EXECUTE: Permission = 'runtime:execute';
/** The fixed action of each question an upstream asks of the client. */
const ASK_ACTIONS: Record<ClientRequest['method'], string> = {
  'sampling/createMessage': 'mcp.sampling',
  'elicitation/create': 'mcp.elicitation',
  'roots/list': 'mcp.roots',
};
/** One validator for every request's Server: each would otherwise build an Ajv instance of its own. */
const SCHEMA_VALIDATOR = new AjvJsonSchemaValidator();

/** How the gateway names itself to a client: per server, or the aggregate. */
export const serverInfo = (single: McpTarget | null) => ({ name: single ? `warden:${single.slug}` : 'warden', version: '1.0.0' });

export const instructionsFor = (caller: GatewayCaller, single: McpTarget | null) =>
  single
    ? `Tools of the MCP server '${single.slug}', governed by Warden for agent '${caller.agent.slug}'.`
    : `Tools of every MCP server agent '${caller.agent.slug}' may use, governed by Warden; names are '<server>${NAMESPACE_SEPARATOR}<name>'.`;

export class McpGateway {
  private readonly taskMethods: GatewayTasks;
  private readonly questions: Questions;
  /** The client sessions at this edge: opening, checking, streaming, ending (gateway-sessions.ts). */
  private readonly edgeSessions: GatewaySessions;
  /** Requests of revision 2026-07-28 and later (modern.ts). */
  private readonly modern = new ModernEdge();
  /** Aborted when the process shuts down: calls held for an approval stop waiting and are answered. */
  private readonly stopping = new AbortController();

  constructor(
    private readonly execution: ExecutionService,
    private readonly tasks: McpTasks,
    private readonly agents: AgentDirectory,
    private readonly sessions: McpClientSessions,
    private readonly options: GatewayOptions,
  ) {
    this.taskMethods = new GatewayTasks(execution, tasks, options, (call, run) => this.heldCall(call, run));
    this.questions = new Questions(sessions);
    this.edgeSessions = new GatewaySessions(
      sessions,
      (ctx, slug) => execution.registeredServer(ctx, slug),
      options.streamCheckMs,
      (caller, target, sessionId) => (request, signal) =>
        // a question no request of the client's carries: decided as its own act, under a request id of its own
        this.governedAsk({ ...caller, ctx: { ...caller.ctx, requestId: randomUUID() } }, target, request, () =>
          this.questions.ask(
            caller.agent.id,
            request,
            signal,
            (message) => void sessions.send(`stream:${sessionId}`, JSON.parse(message)).catch(() => undefined),
          ),
        ),
    );
  }

  /** A shutdown: calls held for an approval are answered now (pending, with where to decide it), and none is held from now on. */
  drain(): void {
    this.stopping.abort();
    this.edgeSessions.endStreams();
  }

  /** Stops the task sweep and ends the GET streams open here (shutdown). */
  close(): void {
    this.tasks.close();
    this.edgeSessions.endStreams();
  }

  /** A client session's GET stream (gateway-sessions.ts), for as long as `stillAllowed`. */
  stream(
    caller: GatewayCaller,
    slug: string | undefined,
    req: IncomingMessage,
    res: ServerResponse,
    stillAllowed: () => Promise<boolean>,
  ): Promise<void> {
    return this.edgeSessions.stream(caller, slug, req, res, stillAllowed);
  }

  /** Ends a client session (DELETE). */
  end(caller: GatewayCaller, slug: string | undefined, req: IncomingMessage, res: ServerResponse): Promise<void> {
    return this.edgeSessions.end(caller, slug, req, res);
  }

  /** The agent acting for a request: its key must name an active agent of the key's workspace (401/403 ApiErrors otherwise). */
  async caller(ctx: RequestContext): Promise<GatewayCaller> {
    if (!ctx.auth.permissions.has(RUNTIME_EXECUTE))
      throw new ApiError('insufficient_permission', `This key lacks the permission ${RUNTIME_EXECUTE}`);
    if (ctx.agentKey === undefined && ctx.auth.agent === undefined)
      throw new ApiError(
        'agent_key_required',
        'The MCP gateway acts for an agent: send its key in X-Warden-Agent-Key with a workspace key, or as the bearer token',
      );
    const agent = await resolveAgent(this.agents, ctx.auth, undefined, ctx.agentKey);
    assertActive(agent);
    return { ctx, agent };
  }

  /**
   * Serves one POST of the MCP Streamable HTTP transport, in its client session if it names one.
   * `slug` names the one server, or is undefined for the aggregate. `origin` is where the
   * caller reaches Warden (for the approval links it is shown).
   */
  async serve(
    caller: GatewayCaller,
    slug: string | undefined,
    req: IncomingMessage,
    res: ServerResponse,
    body: unknown,
    origin: string,
  ): Promise<void> {
    // headers that say another act than the body: refused before anything is decided or sent
    const disagree = headerMismatch(req.headers, body);
    if (disagree) {
      const id = isObject(body) && (typeof body.id === 'string' || typeof body.id === 'number') ? body.id : null;
      const error = { code: HEADER_MISMATCH, message: disagree.message, data: { mismatch: disagree.mismatch } };
      res.writeHead(400, { 'content-type': 'application/json' }).end(JSON.stringify({ jsonrpc: '2.0', error, id }));
      return;
    }
    // the client's answer to what an upstream asked it during one of its calls (relay.ts)
    if (await this.questions.answer(caller.agent.id, body)) {
      res.writeHead(202).end();
      return;
    }
    const single = slug === undefined ? null : await this.execution.registeredServer(caller.ctx, slug);
    // revision 2026-07-28 and later: no session, the v2 SDK's wire, the same governed methods
    if (isModernRequest(req, body)) {
      const register = (methods: Pick<Server, 'setRequestHandler'>) => this.register(methods, caller, single, origin);
      const modern = { caller, single, info: serverInfo(single), instructions: instructionsFor(caller, single), register };
      return this.modern.serve(modern, req, res, body);
    }
    caller = await this.edgeSessions.inSession(caller, slug, req, body, res);
    // the client's roots changed: its session's upstreams are told, wherever they are
    if (caller.client && isObject(body) && body.method === 'notifications/roots/list_changed' && !('id' in body)) {
      await this.sessions.rootsChanged(caller.client.id);
      res.writeHead(202).end();
      return;
    }
    const plain = plainToolCall(req, body);
    if (plain) return this.answerToolCall({ caller, single, origin }, plain, res);
    const wantsProgress = JSON.stringify(body ?? null).includes('"progressToken"');
    // JSON answers to a client that keeps no session, unless it may be sent progress while it
    // waits; a session's requests are answered on SSE streams, as the SDK's servers answer them
    const streaming = wantsProgress || caller.client !== undefined;
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: !streaming });
    // on a stream, what the upstream asks during a call is asked on the call's own stream
    const asker = streaming
      ? (requestId: string | number): Extra['ask'] =>
          (request, signal) =>
            this.questions.ask(caller.agent.id, request, signal, (message) => {
              void transport.send(JSON.parse(message), { relatedRequestId: requestId }).catch(() => undefined);
            })
      : undefined;
    const server = this.build(caller, single, origin, asker);
    // closing the Server closes its transport (once: each close builds a ConnectionClosed error)
    res.on('close', () => void server.close());
    await server.connect(transport);
    await transport.handleRequest(req, res, body);
  }

  /** A legacy (stateful revisions) request's Server: the governed methods on the SDK's v1 Server. */
  private build(
    caller: GatewayCaller,
    single: McpTarget | null,
    origin: string,
    asker?: (requestId: string | number) => Extra['ask'],
  ): Server {
    const server = new Server(serverInfo(single), {
      // tasks: created by tools/call, then got, waited for and cancelled; not listed
      capabilities: {
        tools: {},
        resources: { subscribe: true },
        prompts: {},
        logging: {},
        completions: {},
        tasks: { cancel: {}, requests: { tools: { call: {} } } },
      },
      jsonSchemaValidator: SCHEMA_VALIDATOR,
      instructions: instructionsFor(caller, single),
    });
    this.register(server, caller, single, origin, asker);
    return server;
  }

  /**
   * Registers every method the gateway serves on `server`: the v1 Server of a legacy request,
   * or the method table a 2026-07-28 request is dispatched through (modern.ts). One set of
   * governed methods serves both revisions.
   */
  register(
    server: Pick<Server, 'setRequestHandler'>,
    caller: GatewayCaller,
    single: McpTarget | null,
    origin: string,
    asker?: (requestId: string | number) => Extra['ask'],
  ): void {
    const servers = async (): Promise<McpTarget[]> => (single ? [single] : this.execution.registeredServers(caller.ctx));
    const route = (name: string) => this.route(caller, single, name);
    const named = (target: McpTarget, name: string) => (single ? name : `${target.slug}${NAMESPACE_SEPARATOR}${name}`);

    registerDiscoveryMethods(server, {
      single,
      servers,
      named,
      listTools: (target, cursor) =>
        this.execution.listTools(caller.ctx, target, { input: this.input(caller, 'mcp.discover'), cursor, client: caller.client }),
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
      const { task } = request.params;
      const call: ToolCall = {
        caller,
        target,
        tool: name,
        args,
        extra: { ...(extra as Extra), ask: asker?.(extra.requestId) },
        origin,
        aggregate: single === null,
      };
      return task ? this.taskMethods.create(call, task) : this.callTool(call);
    });

    this.taskMethods.register(server, caller, single);

    registerGovernedMethods(server, {
      servers,
      route,
      governed: (target, act, work) => this.governed(caller, target, act, work),
      resourceUri,
      namespaced: single ? null : named,
    });
  }

  /** The server a name belongs to and the name the server knows it by (on the aggregate, names are namespaced). */
  private async route(caller: GatewayCaller, single: McpTarget | null, name: string): Promise<{ target: McpTarget; name: string }> {
    if (single) return { target: single, name };
    const at = name.indexOf(NAMESPACE_SEPARATOR);
    if (at <= 0) throw rpcError(-32602, `'${name}' names no server: names here are '<server>${NAMESPACE_SEPARATOR}<name>'`);
    const target = await this.execution.registeredServer(caller.ctx, name.slice(0, at)).catch((error) => {
      throw asProtocolError(error);
    });
    return { target, name: name.slice(at + NAMESPACE_SEPARATOR.length) };
  }

  /**
   * A plain tools/call (plain-tool-call.ts), answered as the SDK's server answers it: run by
   * callTool as any call, and cancelled (its signal aborted) when the client goes away.
   */
  private async answerToolCall(
    where: { caller: GatewayCaller; single: McpTarget | null; origin: string },
    plain: PlainToolCall,
    res: ServerResponse,
  ): Promise<void> {
    const cancelled = new AbortController();
    let answered = false;
    // only a call still running is cancelled: the SDK client keeps its abort listener after
    // the upstream answered, and would tell the upstream to cancel a request it had finished
    res.once('close', () => {
      if (!answered) cancelled.abort();
    });
    // no progress was asked for; what the upstream sends meanwhile (log messages, questions) turns the answer into an SSE stream
    let streaming = false;
    const stream = (message: string) => {
      if (answered || cancelled.signal.aborted) return;
      if (!streaming) res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      streaming = true;
      res.write(sseEvent(message));
    };
    const extra: Extra = {
      signal: cancelled.signal,
      ...(plain.meta ? { _meta: plain.meta } : {}),
      sendNotification: async (notification) => stream(JSON.stringify({ jsonrpc: '2.0', ...notification })),
      ask: (request, signal) => this.questions.ask(where.caller.agent.id, request, signal, stream),
    };
    let answer: string;
    try {
      const { target, name } = await this.route(where.caller, where.single, plain.name);
      const result = await this.callTool({
        caller: where.caller,
        target,
        tool: name,
        args: plain.args,
        extra,
        origin: where.origin,
        aggregate: where.single === null,
      });
      answer = toolCallAnswer(plain.id, { result });
    } catch (error) {
      answer = toolCallAnswer(plain.id, { error });
    }
    answered = true;
    if (cancelled.signal.aborted) return;
    if (streaming) res.end(sseEvent(answer));
    else res.writeHead(200, { 'content-type': 'application/json' }).end(answer);
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
  private async governed<T>(
    caller: GatewayCaller,
    target: McpTarget,
    act: { action: string; resource: string; method: string; params: Record<string, unknown>; signal?: AbortSignal },
    work: (client: Client) => Promise<T>,
  ): Promise<T> {
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
        work,
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
      ...(ask
        ? { ask: (request: ClientRequest, signal: AbortSignal) => this.governedAsk(caller, target, request, () => ask(request, signal)) }
        : {}),
    };
  }

  /**
   * What an upstream asks of the client during a call, as a governed act of its own
   * (`mcp.sampling`, `mcp.elicitation`, `mcp.roots`) on the whole request relayed: relayed once allowed, its
   * outcome audited; refused, the upstream is answered a JSON-RPC error naming the policy.
   */
  private async governedAsk(
    caller: GatewayCaller,
    target: McpTarget,
    request: ClientRequest,
    ask: () => Promise<unknown>,
  ): Promise<unknown> {
    const action = ASK_ACTIONS[request.method];
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

  private async callTool(call: ToolCall): Promise<CallToolResult> {
    const { tool, args, extra } = call;
    try {
      const called = await this.heldCall(call, (onProgress) => ({
        work: (client) =>
          relayed(client, this.relayTo(call), () =>
            callUpstreamTool(
              client,
              { name: tool, arguments: args },
              { timeout: MCP_REQUEST_TIMEOUT_MS, signal: extra.signal, resetTimeoutOnProgress: true, onprogress: onProgress },
            ),
          ),
        describe: (r) => ({ tool_error: r.isError === true }),
      }));
      return 'value' in called ? called.value : text(called.refused.message, called.refused.meta);
    } catch (error) {
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
        hold: {
          until: Date.now() + this.options.approvalWaitMs,
          signal: AbortSignal.any([extra.signal, this.stopping.signal]),
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
    const stopping = this.stopping.signal.aborted ? ' This Warden process is shutting down, so the call is not held any longer.' : '';
    return {
      refused: {
        message:
          `Approval required: ${decided.result.message}.${stopping} Approval ${pending} is pending: decide it in the Warden dashboard ` +
          `(${origin}/dashboard/#/approvals) or with PATCH ${origin}/api/v1/approvals/${pending}, then call this tool again with the same arguments.`,
        meta: { [APPROVAL_META]: { id: pending, status: 'pending' } },
      },
    };
  }
}
