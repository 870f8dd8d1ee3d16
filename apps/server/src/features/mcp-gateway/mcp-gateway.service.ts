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
 * upstream sessions are kept, the connection manager keeps. A request of revision 2026-07-28 is
 * served by the v2 SDK (modern.ts); both eras reach the same methods (gateway-methods.ts).
 */
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { type ClientCapabilities, ErrorCode, type ServerNotification } from '@modelcontextprotocol/sdk/types.js';
import { AjvJsonSchemaValidator } from '@modelcontextprotocol/sdk/validation/ajv';
import type { Permission } from '@warden/contract';
import type { RequestContext } from '../../shared/context.ts';
import { ApiError } from '../../shared/errors.ts';
import { isObject } from '../../shared/objects.ts';
import type { ExecutionService } from '../execution/execution.service.ts';
import type { McpClientSessions } from '../execution/mcp-client-sessions.ts';
import type { ClientOwner, McpTarget } from '../execution/mcp-dialer.ts';
import type { McpTasks } from '../execution/mcp-tasks.ts';
import { type AgentDirectory, assertActive, resolveAgent } from '../identity/agent-identity.ts';
import { type GatewayCaller, type GatewayOptions, NAMESPACE_SEPARATOR, serverInfo } from './gateway-answers.ts';
import { GatewayMethods } from './gateway-methods.ts';
import { GatewaySessions } from './gateway-sessions.ts';
import { type Asker, InputRounds } from './input-rounds.ts';
import { LISTEN_TOPIC, type ListenTarget } from './listen-streams.ts';
import { isModernRequest, ModernEdge } from './modern.ts';
import type { ParamHeaders } from './param-headers.ts';
import { PlainCalls } from './plain-calls.ts';
import { modernPlainToolCall, plainToolCall } from './plain-tool-call.ts';
import { PolledStreams } from './polled-streams.ts';
import { inRequest, listen, Questions } from './relay.ts';
import { rpcError } from './rpc-error.ts';
import { HEADER_MISMATCH, type HeaderMismatch, headerMismatch } from './standard-headers.ts';

const RUNTIME_EXECUTE: Permission = 'runtime:execute';

const CAPABILITIES_META = 'io.modelcontextprotocol/clientCapabilities';

/**
 * What a 2026-07-28 request's client can be asked, as its upstream session declares it: sampling,
 * elicitation (form, URL) and roots, each only when the request declared it. An upstream that
 * asks only what its client supports then behaves as it would with that client directly.
 */
function questionsDeclared(body: unknown): ClientCapabilities {
  const params = isObject(body) && isObject(body.params) ? body.params : {};
  const declared = isObject(params._meta) && isObject(params._meta[CAPABILITIES_META]) ? params._meta[CAPABILITIES_META] : {};
  const elicitation = isObject(declared.elicitation) ? declared.elicitation : undefined;
  // an empty elicitation capability is form elicitation (revision 2025-06-18 on)
  const form = elicitation && (isObject(elicitation.form) || !isObject(elicitation.url));
  return {
    ...(isObject(declared.sampling) ? { sampling: {} } : {}),
    ...(elicitation ? { elicitation: { ...(form ? { form: {} } : {}), ...(isObject(elicitation.url) ? { url: {} } : {}) } } : {}),
    ...(isObject(declared.roots) ? { roots: {} } : {}),
  };
}
/** One validator for every request's Server: each would otherwise build an Ajv instance of its own. */
const SCHEMA_VALIDATOR = new AjvJsonSchemaValidator();

export const instructionsFor = (caller: GatewayCaller, single: McpTarget | null) =>
  single
    ? `Tools of the MCP server '${single.slug}', governed by Warden for agent '${caller.agent.slug}'.`
    : `Tools of every MCP server agent '${caller.agent.slug}' may use, governed by Warden; names are '<server>${NAMESPACE_SEPARATOR}<name>'.`;

/** Headers that say another act than the body: HTTP 400, JSON-RPC -32020, nothing decided or sent. */
function refuseMismatch(res: ServerResponse, body: unknown, disagree: HeaderMismatch): void {
  const id = isObject(body) && (typeof body.id === 'string' || typeof body.id === 'number') ? body.id : null;
  const error = { code: HEADER_MISMATCH, message: disagree.message, data: { mismatch: disagree.mismatch } };
  res.writeHead(400, { 'content-type': 'application/json' }).end(JSON.stringify({ jsonrpc: '2.0', error, id }));
}

export class McpGateway {
  /** The governed methods both eras are served by (gateway-methods.ts). */
  private readonly methods: GatewayMethods;
  private readonly questions: Questions;
  /** The client sessions at this edge: opening, checking, streaming, ending (gateway-sessions.ts). */
  private readonly edgeSessions: GatewaySessions;
  /** What upstreams ask 2026-07-28 clients, held across the clients' retries (input-rounds.ts). */
  private readonly rounds: InputRounds;
  /** Requests of revision 2026-07-28 and later (modern.ts). */
  private readonly modern: ModernEdge;
  /** Whose upstream sessions 2026-07-28 requests use, by what they declare (modernClient). */
  private readonly modernClients = new Map<string, ClientOwner>();
  /** Aborted when the process shuts down: calls held for an approval stop waiting and are answered. */
  private readonly stopping = new AbortController();
  /** The plain tools/call of either era, answered without the SDK's server (plain-calls.ts). */
  private readonly plainCalls: PlainCalls;

  constructor(
    private readonly execution: ExecutionService,
    private readonly tasks: McpTasks,
    private readonly agents: AgentDirectory,
    private readonly sessions: McpClientSessions,
    /** Each server's `Mcp-Param-*` declarations, from the listings any process relayed (param-headers.ts). */
    private readonly paramHeaders: ParamHeaders,
    readonly options: GatewayOptions,
  ) {
    this.rounds = new InputRounds(sessions);
    this.modern = new ModernEdge(this.rounds, options.streamCheckMs);
    this.methods = new GatewayMethods(execution, tasks, options, this.stopping.signal, this.paramHeaders);
    this.questions = new Questions(sessions);
    const polled = new PolledStreams(sessions);
    this.plainCalls = new PlainCalls(this.methods, this.questions, this.rounds, polled);
    // a change another process heard, for the listen streams here
    sessions.onBroadcast(LISTEN_TOPIC, (body) => {
      if (!isObject(body) || !isObject(body.target) || !isObject(body.notification)) return;
      const { id, workspace_id, slug } = body.target;
      if (typeof id !== 'string' || typeof workspace_id !== 'string' || typeof slug !== 'string') return;
      this.modern.listening.changed({ id, workspace_id, slug }, body.notification as ServerNotification);
    });
    this.edgeSessions = new GatewaySessions(
      sessions,
      polled,
      (ctx, slug) => execution.registeredServer(ctx, slug),
      options.streamCheckMs,
      (caller, target, sessionId) => async (request, signal) => {
        // asked after the request that opened the upstream session: its client session and agent must still be live
        const session = await sessions.find(sessionId);
        if (!session || session.agentId !== caller.agent.id)
          throw rpcError(ErrorCode.InvalidRequest, 'The client session this upstream session belongs to has ended');
        const { agent } = await this.caller(caller.ctx);
        // a question no request of the client's carries: decided as its own act, under a request id of its own
        return this.methods.governedAsk({ ...caller, agent, ctx: { ...caller.ctx, requestId: randomUUID() } }, target, request, () =>
          this.questions.ask(
            caller.agent.id,
            request,
            signal,
            (message) => void sessions.send(`stream:${sessionId}`, JSON.parse(message)).catch(() => undefined),
          ),
        );
      },
    );
  }

  /**
   * Whose upstream sessions a 2026-07-28 request uses (with its agent's): one per set of
   * questions its client declared (sampling, form and URL elicitation, roots: at most 16), each
   * declaring that set to the upstream (a question it asks anyway is never sent the client:
   * input-rounds.ts). What they announce outside a request (list changes, resource updates)
   * goes to the subscriptions/listen streams that show the server.
   */
  private modernClient(body: unknown): ClientOwner {
    const capabilities = questionsDeclared(body);
    const id = `modern:${JSON.stringify(capabilities)}`;
    let owner = this.modernClients.get(id);
    if (!owner) {
      owner = {
        id,
        capabilities,
        prepare: (client, target) => listen(client, capabilities, { notify: async (notification) => this.announced(target, notification) }),
        around: inRequest,
      };
      this.modernClients.set(id, owner);
    }
    return owner;
  }

  /**
   * What an upstream announced on one of this process's sessions: told to the listen streams
   * here, and to those of every other process (a client listens on whichever process it reached).
   */
  private announced(target: McpTarget, notification: ServerNotification): void {
    if (!this.modern.listening.changed(target, notification)) return;
    const shown: ListenTarget = { id: target.id, workspace_id: target.workspace_id, slug: target.slug };
    void this.sessions.broadcast(LISTEN_TOPIC, { target: shown, notification }).catch(() => undefined);
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
    const disagree = headerMismatch(req.headersDistinct, body);
    if (disagree) return refuseMismatch(res, body, disagree);
    // the client's answer to what an upstream asked it during one of its calls (relay.ts)
    if (await this.questions.answer(caller.agent.id, body)) {
      res.writeHead(202).end();
      return;
    }
    const single = slug === undefined ? null : await this.execution.registeredServer(caller.ctx, slug);
    const disagreeParams = await this.paramMismatch(caller, single, req, body);
    if (disagreeParams) return refuseMismatch(res, body, disagreeParams);
    // revision 2026-07-28 and later: no session, the v2 SDK's wire, the same governed methods
    if (isModernRequest(req, body)) {
      // its upstream sessions declare what its client declared
      caller = { ...caller, client: this.modernClient(body) };
      // the common modern tools/call, answered as the v2 SDK answers it (plain-tool-call.ts)
      const modernPlain = modernPlainToolCall(req, body);
      if (modernPlain) return this.plainCalls.answer({ caller, single, origin }, modernPlain, res, modernPlain.capabilities);
      const register = (methods: Pick<Server, 'setRequestHandler'>) =>
        this.methods.register(methods, caller, single, origin, { modern: true });
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
    // a session's client of 2025-11-25 or later can resume a stream (its priming event has no data)
    const polls = caller.client !== undefined && String(req.headers['mcp-protocol-version'] ?? '') >= '2025-11-25';
    if (plain) return this.plainCalls.answer({ caller, single, origin, polls }, plain, res);
    const wantsProgress = JSON.stringify(body ?? null).includes('"progressToken"');
    // JSON answers to a client that keeps no session, unless it may be sent progress while it
    // waits; a session's requests are answered on SSE streams, as the SDK's servers answer them
    const streaming = wantsProgress || caller.client !== undefined;
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: !streaming });
    // on a stream, what the upstream asks during a call is asked on the call's own stream
    const asker = streaming
      ? (requestId: string | number): Asker =>
          (request, signal, decide) =>
            decide(() =>
              this.questions.ask(caller.agent.id, request, signal, (message) => {
                void transport.send(JSON.parse(message), { relatedRequestId: requestId }).catch(() => undefined);
              }),
            )
      : undefined;
    const server = this.build(caller, single, origin, asker);
    // closing the Server closes its transport (once: each close builds a ConnectionClosed error)
    res.on('close', () => void server.close());
    await server.connect(transport);
    await transport.handleRequest(req, res, body);
  }

  /** Where a tools/call's `Mcp-Param-*` headers disagree with its arguments (param-headers.ts), or null. */
  private async paramMismatch(
    caller: GatewayCaller,
    single: McpTarget | null,
    req: IncomingMessage,
    body: unknown,
  ): Promise<HeaderMismatch | null> {
    if (!isObject(body) || body.method !== 'tools/call' || !isObject(body.params) || typeof body.params.name !== 'string') return null;
    // a name that routes nowhere is answered as any call to it is
    const routed = await this.methods.route(caller, single, body.params.name).catch(() => null);
    if (!routed) return null;
    const args = isObject(body.params.arguments) ? body.params.arguments : {};
    return this.paramHeaders.check(routed.target, routed.name, args, req.headersDistinct, isModernRequest(req, body));
  }

  /** A legacy (stateful revisions) request's Server: the governed methods on the SDK's v1 Server. */
  private build(caller: GatewayCaller, single: McpTarget | null, origin: string, asker?: (requestId: string | number) => Asker): Server {
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
    this.methods.register(server, caller, single, origin, { modern: false, asker });
    return server;
  }
}
