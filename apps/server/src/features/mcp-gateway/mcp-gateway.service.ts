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
 * - resources/list, resources/templates/list, prompts/list: decided as `mcp.discover`;
 *   resources/read as `mcp.resources.read` (resource: the URI), prompts/get as
 *   `mcp.prompts.get` (resource: the prompt's name).
 *
 * Stateless: each HTTP request is served by a Server of its own (no session is kept between
 * requests, so any process can serve any request); what upstream sessions are kept, the
 * connection manager keeps.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import {
  CallToolRequestSchema,
  type CallToolResult,
  GetPromptRequestSchema,
  ListPromptsRequestSchema,
  ListResourcesRequestSchema,
  ListResourceTemplatesRequestSchema,
  ListToolsRequestSchema,
  McpError,
  type Prompt,
  ReadResourceRequestSchema,
  type Resource,
  type ResourceTemplate,
  type ServerNotification,
  type Tool,
} from '@modelcontextprotocol/sdk/types.js';
import { AjvJsonSchemaValidator } from '@modelcontextprotocol/sdk/validation/ajv';
import type { Permission } from '@warden/contract';
import type { Kysely } from 'kysely';
import type { DB } from '../../db/schema.ts';
import type { AuthContext, RequestContext } from '../../shared/context.ts';
import { ApiError } from '../../shared/errors.ts';
import type { AgentRow } from '../agents/agents.repository.ts';
import type { DecisionOutcome } from '../decisions/decisions.ts';
import { callUpstreamTool, type ExecutionService, type McpOperation } from '../execution/execution.service.ts';
import { MCP_REQUEST_TIMEOUT_MS, type McpTarget } from '../execution/mcp-connector.ts';
import { type AgentDirectory, assertActive, resolveAgent } from '../identity/agent-identity.ts';
import { findAgentsByKeyHash, findApprovalForAct, findApprovalState } from './mcp-gateway.repository.ts';

/** Separates a server's slug from a tool, prompt or resource name on the aggregate endpoint (slugs have no `_`). */
export const NAMESPACE_SEPARATOR = '__';
export const DEFAULT_APPROVAL_WAIT_MS = 30_000;
const APPROVAL_POLL_MS = 250;
/** JSON-RPC error code of an operation policy refused (resources/read, prompts/get). */
export const POLICY_REFUSED = -32003;
/** `_meta` key of a result that names the approval it waits for. */
export const APPROVAL_META = 'dev.agentwarden/approval';

/** Who calls the gateway: the request's identity and the agent acting. */
export interface GatewayCaller {
  ctx: RequestContext;
  agent: AgentRow;
}

export interface GatewayOptions {
  /** How long a call that needs an approval is held open for it (WARDEN_MCP_APPROVAL_WAIT_MS). */
  approvalWaitMs: number;
}

type Extra = {
  signal: AbortSignal;
  _meta?: { progressToken?: string | number };
  sendNotification: (notification: ServerNotification) => Promise<void>;
};

const RUNTIME_EXECUTE: Permission = 'runtime:execute';
/** One validator for every request's Server: each would otherwise build an Ajv instance of its own. */
const SCHEMA_VALIDATOR = new AjvJsonSchemaValidator();
const text = (message: string, meta?: Record<string, unknown>): CallToolResult => ({
  content: [{ type: 'text', text: message }],
  isError: true,
  ...(meta ? { _meta: meta } : {}),
});
const sleep = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve) => {
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    }
    signal.addEventListener('abort', done, { once: true });
  });

/** What a refused decision says, for a person reading the client's transcript. */
function refusal(decided: DecisionOutcome): string {
  const { policy, message } = decided.result;
  return policy ? `Blocked by Warden policy '${policy}': ${message}` : `Blocked by Warden: ${message}`;
}

/** An upstream failure or a refused target is the tool's error (the client shows it); anything else is a protocol error. */
const asToolError = (error: unknown): CallToolResult | null =>
  error instanceof ApiError && (error.status === 502 || error.code === 'execution_target_denied') ? text(error.message) : null;

const asProtocolError = (error: unknown): unknown =>
  error instanceof ApiError ? new McpError(error.status >= 500 ? -32603 : -32600, error.message, { code: error.code }) : error;

export class McpGateway {
  constructor(
    private readonly db: Kysely<DB>,
    private readonly execution: ExecutionService,
    private readonly agents: AgentDirectory,
    private readonly options: GatewayOptions,
  ) {}

  /**
   * The identity of an agent key (by its hash) sent as the bearer token: the agent's workspace, with
   * `runtime:execute` only, rate-limited per agent at the workspace's limit. Undefined for a
   * key no agent has, or one two agents share (in different workspaces).
   */
  async agentBearer(keyHash: string, defaultRateLimit: number): Promise<AuthContext | undefined> {
    const rows = await findAgentsByKeyHash(this.db, keyHash);
    const [row] = rows;
    if (!row || rows.length > 1) return undefined;
    return {
      workspaceId: row.workspace_id,
      keyId: `agent:${row.id}`,
      keyName: `agent:${row.slug}`,
      permissions: new Set([RUNTIME_EXECUTE]),
      rateLimitPerMinute: row.rate_limit_per_minute ?? defaultRateLimit,
      policyVersion: row.policy_version,
      agentsVersion: row.agents_version,
      mcpServersVersion: row.mcp_servers_version,
    };
  }

  /** The agent acting for a request: its key must name an active agent of the key's workspace (401/403 ApiErrors otherwise). */
  async caller(ctx: RequestContext): Promise<GatewayCaller> {
    if (!ctx.auth.permissions.has(RUNTIME_EXECUTE))
      throw new ApiError('insufficient_permission', `This key lacks the permission ${RUNTIME_EXECUTE}`);
    if (ctx.agentKey === undefined)
      throw new ApiError(
        'agent_key_required',
        'The MCP gateway acts for an agent: send its key in X-Warden-Agent-Key with a workspace key, or as the bearer token',
      );
    const agent = await resolveAgent(this.agents, ctx.auth, undefined, ctx.agentKey);
    assertActive(agent);
    return { ctx, agent };
  }

  /**
   * Serves one HTTP request of the MCP Streamable HTTP transport (stateless: POST only).
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
    const single = slug === undefined ? null : await this.execution.registeredServer(caller.ctx, slug);
    const server = this.build(caller, single, origin);
    const wantsProgress = JSON.stringify(body ?? null).includes('"progressToken"');
    // JSON answers unless the client may be sent progress while it waits (then an SSE stream)
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: !wantsProgress });
    // closing the Server closes its transport (once: each close builds a ConnectionClosed error)
    res.on('close', () => void server.close());
    await server.connect(transport);
    await transport.handleRequest(req, res, body);
  }

  private build(caller: GatewayCaller, single: McpTarget | null, origin: string): Server {
    const server = new Server(
      { name: single ? `warden:${single.slug}` : 'warden', version: '1.0.0' },
      {
        capabilities: { tools: {}, resources: {}, prompts: {} },
        jsonSchemaValidator: SCHEMA_VALIDATOR,
        instructions: single
          ? `Tools of the MCP server '${single.slug}', governed by Warden for agent '${caller.agent.slug}'.`
          : `Tools of every MCP server agent '${caller.agent.slug}' may use, governed by Warden; names are '<server>${NAMESPACE_SEPARATOR}<name>'.`,
      },
    );
    const servers = async (): Promise<McpTarget[]> => (single ? [single] : this.execution.registeredServers(caller.ctx));
    /** The server a name belongs to and the name the server knows it by. */
    const route = async (name: string): Promise<{ target: McpTarget; name: string }> => {
      if (single) return { target: single, name };
      const at = name.indexOf(NAMESPACE_SEPARATOR);
      if (at <= 0) throw new McpError(-32602, `'${name}' names no server: names here are '<server>${NAMESPACE_SEPARATOR}<name>'`);
      const target = await this.execution.registeredServer(caller.ctx, name.slice(0, at)).catch((error) => {
        throw asProtocolError(error);
      });
      return { target, name: name.slice(at + NAMESPACE_SEPARATOR.length) };
    };
    const named = (target: McpTarget, name: string) => (single ? name : `${target.slug}${NAMESPACE_SEPARATOR}${name}`);

    server.setRequestHandler(ListToolsRequestSchema, async (request) => {
      const tools: Tool[] = [];
      let nextCursor: string | undefined;
      for (const target of await servers()) {
        const listed = await this.execution
          .listTools(caller.ctx, target, { input: this.input(caller, 'mcp.discover'), cursor: single ? request.params?.cursor : undefined })
          .catch((error) => this.skipOnAggregate(single, error));
        if (!listed?.tools) continue;
        for (const tool of listed.tools) tools.push({ ...tool, name: named(target, tool.name) });
        if (single) nextCursor = listed.nextCursor;
      }
      return nextCursor ? { tools, nextCursor } : { tools };
    });

    server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
      // A task-augmented call never gets here: no tasks capability is offered, and the SDK's Server refuses it.
      const { target, name } = await route(request.params.name);
      return this.callTool(caller, target, name, request.params.arguments ?? {}, extra as Extra, origin);
    });

    const list =
      <T, R>(
        capability: 'resources' | 'prompts',
        run: (client: Client, cursor: string | undefined) => Promise<R & { nextCursor?: string }>,
        items: (result: R) => T[],
        rename: (target: McpTarget, item: T) => T,
      ) =>
      async (request: { params?: { cursor?: string } }) => {
        const all: T[] = [];
        let nextCursor: string | undefined;
        for (const target of await servers()) {
          const listed = await this.execution
            .governMcp(
              caller.ctx,
              target,
              { action: 'mcp.discover', input: this.input(caller, 'mcp.discover') },
              'discovery_failed',
              async (client) =>
                client.getServerCapabilities()?.[capability] ? run(client, single ? request.params?.cursor : undefined) : null,
              (r) => ({ [capability]: r ? items(r).length : 0 }),
              { idempotent: true },
            )
            .catch((error) => this.skipOnAggregate(single, error));
          if (!listed?.value) continue;
          for (const item of items(listed.value)) all.push(rename(target, item));
          if (single) nextCursor = listed.value.nextCursor;
        }
        return { all, nextCursor };
      };

    const listResources = list<Resource, { resources: Resource[] }>(
      'resources',
      (client, cursor) => client.listResources(cursor ? { cursor } : undefined, { timeout: MCP_REQUEST_TIMEOUT_MS }),
      (r) => r.resources,
      (target, item) => ({ ...item, uri: named(target, item.uri) }),
    );
    server.setRequestHandler(ListResourcesRequestSchema, async (request) => {
      const { all, nextCursor } = await listResources(request);
      return nextCursor ? { resources: all, nextCursor } : { resources: all };
    });
    const listTemplates = list<ResourceTemplate, { resourceTemplates: ResourceTemplate[] }>(
      'resources',
      (client, cursor) => client.listResourceTemplates(cursor ? { cursor } : undefined, { timeout: MCP_REQUEST_TIMEOUT_MS }),
      (r) => r.resourceTemplates,
      (target, item) => ({ ...item, uriTemplate: named(target, item.uriTemplate) }),
    );
    server.setRequestHandler(ListResourceTemplatesRequestSchema, async (request) => {
      const { all, nextCursor } = await listTemplates(request);
      return nextCursor ? { resourceTemplates: all, nextCursor } : { resourceTemplates: all };
    });
    const listPrompts = list<Prompt, { prompts: Prompt[] }>(
      'prompts',
      (client, cursor) => client.listPrompts(cursor ? { cursor } : undefined, { timeout: MCP_REQUEST_TIMEOUT_MS }),
      (r) => r.prompts,
      (target, item) => ({ ...item, name: named(target, item.name) }),
    );
    server.setRequestHandler(ListPromptsRequestSchema, async (request) => {
      const { all, nextCursor } = await listPrompts(request);
      return nextCursor ? { prompts: all, nextCursor } : { prompts: all };
    });

    server.setRequestHandler(ReadResourceRequestSchema, async (request, extra) => {
      const { target, name: uri } = await route(request.params.uri);
      const result = await this.governed(caller, target, { action: 'mcp.resources.read', resource: uri }, (client) =>
        client.readResource({ ...request.params, uri }, { timeout: MCP_REQUEST_TIMEOUT_MS, signal: extra.signal }),
      );
      // the aggregate's URIs are namespaced: so are those of what it answers
      return single ? result : { ...result, contents: result.contents.map((c) => ({ ...c, uri: named(target, c.uri) })) };
    });

    server.setRequestHandler(GetPromptRequestSchema, async (request, extra) => {
      const { target, name } = await route(request.params.name);
      return this.governed(caller, target, { action: 'mcp.prompts.get', resource: name }, (client) =>
        client.getPrompt({ ...request.params, name }, { timeout: MCP_REQUEST_TIMEOUT_MS, signal: extra.signal }),
      );
    });
    return server;
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

  /** A read or a prompt: decided, run when allowed, a JSON-RPC error naming the policy when not. */
  private async governed<T>(
    caller: GatewayCaller,
    target: McpTarget,
    act: { action: string; resource: string },
    work: (client: Client) => Promise<T>,
  ): Promise<T> {
    const { decided, value } = await this.execution
      .governMcp(
        caller.ctx,
        target,
        { action: act.action, input: this.input(caller, act.action, act.resource), findApproval: this.findApproval },
        'call_failed',
        work,
        () => ({}),
        { idempotent: true },
      )
      .catch((error) => {
        throw asProtocolError(error);
      });
    if (value === null) {
      const { approval_id } = decided.result;
      throw new McpError(POLICY_REFUSED, approval_id ? `${refusal(decided)} (approval ${approval_id} is pending)` : refusal(decided), {
        result: decided.result.result,
        policy: decided.result.policy,
        approval_id,
      });
    }
    return value;
  }

  private readonly findApproval: McpOperation['findApproval'] = (act) =>
    findApprovalForAct(this.db, act.workspaceId, act.agentId, act.digest);

  private async callTool(
    caller: GatewayCaller,
    target: McpTarget,
    tool: string,
    args: Record<string, unknown>,
    extra: Extra,
    origin: string,
  ): Promise<CallToolResult> {
    const progressToken = extra._meta?.progressToken;
    let progress = 0;
    const notify = (value: number, message: string, total?: number) =>
      progressToken === undefined
        ? Promise.resolve()
        : extra
            .sendNotification({ method: 'notifications/progress', params: { progressToken, progress: value, total, message } })
            .catch(() => undefined);
    const attempt = () =>
      this.execution.governMcp(
        caller.ctx,
        target,
        { action: 'mcp.call', input: this.input(caller, 'mcp.call'), tool, arguments: args, findApproval: this.findApproval },
        'call_failed',
        (client) =>
          callUpstreamTool(
            client,
            { name: tool, arguments: args },
            {
              timeout: MCP_REQUEST_TIMEOUT_MS,
              signal: extra.signal,
              resetTimeoutOnProgress: true,
              // the upstream's progress goes on from ours (progress only grows)
              onprogress: (p) =>
                void notify(progress + p.progress, p.message ?? '', p.total === undefined ? undefined : progress + p.total),
            },
          ),
        (r) => ({ tool_error: r.isError === true }),
      );
    try {
      let { decided, value } = await attempt();
      if (value !== null) return value;
      const approvalId = decided.result.approval_id;
      if (decided.result.action !== 'require_approval' || approvalId === null) return text(refusal(decided));
      const waited = await this.waitForApproval(caller, approvalId, extra, async (message) => {
        progress += 1;
        await notify(progress, message);
      });
      if (waited === 'approved') {
        ({ decided, value } = await attempt());
        if (value !== null) return value;
        if (decided.result.action !== 'require_approval' || decided.result.approval_id === null) return text(refusal(decided));
      }
      if (waited === 'rejected' || waited === 'expired')
        return text(`Denied: approval ${approvalId} ${waited === 'rejected' ? 'was rejected' : 'expired'}`, {
          [APPROVAL_META]: { id: approvalId, status: waited },
        });
      const pending = decided.result.approval_id ?? approvalId;
      return text(
        `Approval required: ${decided.result.message}. Approval ${pending} is pending: decide it in the Warden dashboard ` +
          `(${origin}/dashboard/#/approvals) or with PATCH ${origin}/api/v1/approvals/${pending}, then call this tool again with the same arguments.`,
        { [APPROVAL_META]: { id: pending, status: 'pending' } },
      );
    } catch (error) {
      const result = asToolError(error);
      if (result) return result;
      throw asProtocolError(error);
    }
  }

  /** Waits for an approval to be decided, up to approvalWaitMs (and while the client still waits). */
  private async waitForApproval(
    caller: GatewayCaller,
    id: string,
    extra: Extra,
    onWait: (message: string) => Promise<void>,
  ): Promise<'approved' | 'rejected' | 'expired' | 'pending'> {
    const deadline = Date.now() + this.options.approvalWaitMs;
    for (;;) {
      const state = await findApprovalState(this.db, caller.ctx.auth.workspaceId, id);
      if (!state || state.status === 'rejected') return 'rejected';
      // an approved one (used since by an identical call, perhaps): the next decision says which
      if (state.status === 'approved') return 'approved';
      if (state.status === 'expired' || new Date(state.expires_at).getTime() <= Date.now()) return 'expired';
      const left = deadline - Date.now();
      if (left <= 0 || extra.signal.aborted) return 'pending';
      await onWait(`Waiting for approval ${id}`);
      await sleep(Math.min(APPROVAL_POLL_MS, left), extra.signal);
    }
  }
}
