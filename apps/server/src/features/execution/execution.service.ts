/**
 * Governed execution: decide first (exactly as /policy/evaluate, audited), act only when
 * allowed, then audit the outcome. A refused decision is an answer with `allowed: false` and
 * nothing sent upstream.
 */
import { randomUUID } from 'node:crypto';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { type CallToolResult, McpError, type Tool } from '@modelcontextprotocol/sdk/types.js';
import type {
  ErrorCode,
  EvaluationInput,
  ExecutionRequest,
  ExecutionResponse,
  HttpExecution,
  McpCallRequest,
  McpCallResponse,
  McpDiscoverRequest,
  McpDiscoverResponse,
  McpExecution,
  McpRuntimeInput,
  McpSessionRequest,
  McpSessionResponse,
} from '@warden/contract';
import type { Kysely } from 'kysely';
import type { DB } from '../../db/schema.ts';
import type { EgressGuard } from '../../egress/guard.ts';
import type { RequestContext } from '../../shared/context.ts';
import { ApiError } from '../../shared/errors.ts';
import { type ExecutionFacts, type HttpFacts, httpFacts, type McpFacts, type McpRequest, mcpFacts } from '../acts/act.ts';
import type { WaitOptions } from '../approvals/approval-wait.ts';
import type { CredentialsService, ResolvedCredential } from '../credentials/credentials.service.ts';
import type { DecisionOutcome, DecisionRequest, DecisionService } from '../decisions/decisions.ts';
import { executeHttp } from './http-proxy.ts';
import type { HeldSession, McpConnector, UpstreamOwner, UseOptions } from './mcp-connector.ts';
import { type ClientOwner, MCP_REQUEST_TIMEOUT_MS, type McpTarget } from './mcp-dialer.ts';
import type { McpRegistry } from './mcp-registry.ts';
import { findOpenSession, insertSession } from './mcp-sessions.repository.ts';
import type { ActPipeline, Ran } from './pipeline.ts';

export { MCP_REQUEST_TIMEOUT_MS } from './mcp-dialer.ts';
export const MCP_SESSION_MINUTES = 30;

type ToolResult = { content: Array<Record<string, unknown>>; isError: boolean; structuredContent?: Record<string, unknown> };

/** What a tool that runs only as an MCP task answers when called without one: it did not run, and how it would. */
export const taskRequiredMessage = (tool: string) =>
  `Tool '${tool}' runs only as an MCP task (execution.taskSupport 'required'): it was not run. ` +
  `Call it as a task (a task-augmented tools/call) through Warden's MCP gateway (/mcp); the REST runtime does not run tasks.`;

/**
 * tools/call on the upstream. A tool that requires task mode is refused by the SDK client (when
 * it has listed it) or by the upstream: that refusal is answered as a tool error naming why.
 */
export async function callUpstreamTool(
  client: Client,
  params: { name: string; arguments: Record<string, unknown> },
  options: Parameters<Client['callTool']>[2] = { timeout: MCP_REQUEST_TIMEOUT_MS },
): Promise<CallToolResult> {
  try {
    return (await client.callTool(params, undefined, options)) as CallToolResult;
  } catch (error) {
    if (error instanceof McpError && /requires task/i.test(error.message))
      return { content: [{ type: 'text', text: taskRequiredMessage(params.name) }], isError: true };
    throw error;
  }
}

async function runTool(client: Client, tool: string, args: Record<string, unknown>): Promise<ToolResult> {
  const result = await callUpstreamTool(client, { name: tool, arguments: args });
  return {
    content: (result.content ?? []) as ToolResult['content'],
    isError: result.isError === true,
    ...(result.structuredContent ? { structuredContent: result.structuredContent as Record<string, unknown> } : {}),
  };
}

/** An MCP operation on a registered server, as the REST runtime and the MCP gateway both run it. */
export interface McpOperation {
  /** The action the operation stands for, whatever the caller declares: mcp.call, mcp.discover, mcp.resources.read, mcp.prompts.get. */
  action: string;
  /** What the caller declares (defaults: the fixed action). */
  input?: EvaluationInput;
  /** A tool call's tool and arguments (decided on, and bound into an approval). */
  tool?: string;
  arguments?: Record<string, unknown>;
  /** Any other request: its method and params as they are sent upstream (decided on, and bound into an approval). */
  request?: McpRequest;
  approvalId?: string;
  /** An act the caller retries rather than naming its approval (see DecisionRequest). */
  retried?: boolean;
  /** A governed session (`/runtime/mcp/session`) whose upstream session to use. */
  sessionId?: string;
  source?: 'mcp' | 'execution';
}

/** The request an operation sends: a tool call's, or the one it names (a listing when it names none). */
const mcpRequestOf = (operation: McpOperation): McpRequest =>
  operation.tool !== undefined
    ? { method: 'tools/call', params: { name: operation.tool, arguments: operation.arguments ?? {} } }
    : (operation.request ?? { method: 'tools/list' });
/** How an operation is run: on which upstream session (UseOptions), and for a caller that may go away. */
export interface GovernOptions extends UseOptions {
  /**
   * Aborted when the caller abandons the act (its client went away): a failure after it is
   * recorded `cancelled`, its upstream outcome unknown, not `failed`.
   */
  signal?: AbortSignal;
  /** The gateway's client session the act belongs to: its upstream sessions are its own, declaring what its client declared. */
  client?: ClientOwner;
  /** The caller waits for an approval policy asks for (a held MCP call): see ActPipeline.govern. */
  hold?: WaitOptions;
}

/** An MCP operation's input: its action is the operation's unless the caller declares one too. */
const mcpInput = (input: McpRuntimeInput | undefined, action: string): EvaluationInput => ({ ...input, action: input?.action ?? action });

export class ExecutionService {
  constructor(
    private readonly db: Kysely<DB>,
    private readonly pipeline: ActPipeline,
    private readonly decisions: DecisionService,
    private readonly mcp: McpConnector,
    private readonly egress: EgressGuard,
    private readonly registry: McpRegistry,
    private readonly credentials: CredentialsService,
  ) {}

  /**
   * The credential an HTTP execution names (404 credential_not_found), and the refusal when its
   * host is not one the credential is bound to (recorded by the decision, nothing sent).
   */
  private async credentialFor(ctx: RequestContext, facts: HttpFacts): Promise<{ credential: ResolvedCredential; refusal?: ApiError }> {
    const credential = await this.credentials.resolve(ctx.auth.workspaceId, facts.credential as string);
    if (facts.headers[credential.header] !== undefined)
      throw new ApiError(
        'invalid_execution',
        `execution.headers: '${credential.header}' is the header credential '${credential.name}' sets; leave it out`,
      );
    if (credential.hosts.includes(facts.host.toLowerCase())) return { credential };
    return {
      credential,
      refusal: new ApiError(
        'credential_host_not_bound',
        `credential '${credential.name}' is not bound to host '${facts.host}' (it is sent only to ${credential.hosts.join(', ')}); nothing was sent`,
      ),
    };
  }

  /** The enabled server with this slug (or id) in the caller's workspace, from the cached registry (404 otherwise). */
  async registeredServer(ctx: RequestContext, slug: string): Promise<McpTarget> {
    const server = await this.registry.find(ctx.auth, slug);
    if (!server) throw new ApiError('mcp_server_not_found', `no enabled MCP server '${slug}' in this workspace`);
    return server;
  }

  /** Every enabled server of the caller's workspace, by slug. */
  registeredServers(ctx: RequestContext): Promise<McpTarget[]> {
    return this.registry.list(ctx.auth);
  }

  /** Whose upstream session an agent's call uses: its governed session's (`id`), else the agent's own. */
  private async owner(ctx: RequestContext, id: string | undefined, server: McpTarget, agentId: string): Promise<UpstreamOwner> {
    if (id === undefined) return { agentId, session: null };
    const row = await findOpenSession(this.db, { workspaceId: ctx.auth.workspaceId, id, serverId: server.id, agentId });
    if (!row) throw new ApiError('session_not_found', `no open session '${id}' of this agent on '${server.slug}'`);
    return { agentId, session: { id: row.id, expiresAt: new Date(row.expires_at) } };
  }

  /**
   * Decides an MCP operation on what runs (audited before anything is sent), and only when
   * allowed runs `work` on the pooled upstream connection and audits its outcome. `value` is
   * null when the decision did not allow it.
   */
  async governMcp<T>(
    ctx: RequestContext,
    server: McpTarget,
    operation: McpOperation,
    failure: ErrorCode,
    work: (client: Client) => Promise<T>,
    describe: (value: T) => Record<string, unknown>,
    { signal, client, hold, ...options }: GovernOptions = {},
  ): Promise<Ran<T>> {
    return this.pipeline.govern(
      ctx,
      {
        input: operation.input ?? { action: operation.action },
        execution: mcpFacts(server.slug, mcpRequestOf(operation)),
        fixedAction: operation.action,
        approvalId: operation.approvalId,
        retried: operation.retried,
        source: operation.source ?? 'mcp',
        viaProxy: true,
      },
      {
        run: async (decided) => {
          const owner = { ...(await this.owner(ctx, operation.sessionId, server, decided.agent.id)), client };
          return this.mcp.use(server, failure, owner, work, options);
        },
        describe,
      },
      { signal, hold },
    );
  }

  async execute(ctx: RequestContext, body: ExecutionRequest): Promise<ExecutionResponse['data']> {
    const execution = body.execution as HttpExecution | McpExecution;
    const server = execution.mode === 'mcp_proxy' ? await this.registeredServer(ctx, execution.server) : null;
    const facts: ExecutionFacts =
      execution.mode === 'mcp_proxy'
        ? mcpFacts((server as McpTarget).slug, { method: 'tools/call', params: { name: execution.tool, arguments: execution.arguments } })
        : httpFacts(execution);
    const brokered = facts.mode === 'http_proxy' && facts.credential !== null ? await this.credentialFor(ctx, facts) : undefined;
    const request: DecisionRequest = {
      input: body.input,
      execution: facts,
      fixedAction: facts.mode === 'mcp_proxy' ? 'mcp.call' : undefined,
      approvalId: body.approval_id,
      source: 'execution',
      viaProxy: true,
      refusal: brokered?.refusal,
    };
    const ran =
      execution.mode === 'http_proxy'
        ? await this.pipeline.govern(ctx, request, {
            // sent in the one form the policy decided on: the facts' method, URL, headers and body
            run: () => {
              const credential = brokered?.credential;
              const injected = credential ? { [credential.header]: credential.value() } : {};
              return executeHttp(this.egress, facts as HttpFacts, execution.timeout_ms, injected);
            },
            describe: (r) => ({ upstream_status: r.status }),
          })
        : await this.pipeline.govern(ctx, request, {
            run: async (decided) => {
              const target = server as McpTarget;
              const owner = await this.owner(ctx, execution.session_id, target, decided.agent.id);
              const args = (facts as McpFacts).arguments ?? {};
              const result = await this.mcp.use(target, 'execution_failed', owner, (client) => runTool(client, execution.tool, args));
              return { mode: 'mcp_proxy' as const, server: target.slug, tool: execution.tool, ...result };
            },
            describe: (r) => ({ tool_error: r.isError }),
          });
    const decision = ran.decided.result;
    if (ran.value === null) return { allowed: false, decision, execution: null };
    return { allowed: true, decision, execution: ran.value };
  }

  /**
   * The server's tools this agent may call: the listing is decided as `mcp.discover` (audited),
   * then each tool as a call would be (decisions.allowedTools). Tools come as the upstream
   * sent them.
   */
  async listTools(
    ctx: RequestContext,
    server: McpTarget,
    { cursor, client, ...operation }: Omit<McpOperation, 'action'> & { cursor?: string; client?: ClientOwner } = {},
  ): Promise<{ decided: DecisionOutcome; tools: Tool[] | null; nextCursor?: string }> {
    const { decided, value } = await this.governMcp(
      ctx,
      server,
      { ...operation, action: 'mcp.discover', request: { method: 'tools/list' } },
      'discovery_failed',
      (client) => client.listTools(cursor ? { cursor } : undefined, { timeout: MCP_REQUEST_TIMEOUT_MS }),
      (r) => ({ tools: r.tools.length }),
      { idempotent: true, client },
    );
    if (value === null) return { decided, tools: null };
    const allowed = await this.decisions.allowedTools(
      ctx,
      decided,
      server.slug,
      value.tools.map((tool) => tool.name),
    );
    return { decided, tools: value.tools.filter((tool) => allowed.has(tool.name)), nextCursor: value.nextCursor };
  }

  async discoverTools(ctx: RequestContext, body: McpDiscoverRequest): Promise<McpDiscoverResponse['data']> {
    const server = await this.registeredServer(ctx, body.server);
    const { decided, tools } = await this.listTools(ctx, server, {
      input: mcpInput(body.input, 'mcp.discover'),
      sessionId: body.session_id,
    });
    if (tools === null) return { allowed: false, result: decided.result.result, server: server.slug, tools: [] };
    return {
      allowed: true,
      result: decided.result.result,
      server: server.slug,
      // every field as the upstream sent it (the spec's McpTool allows the protocol's fields)
      tools: tools.map((tool) => ({ ...tool, description: tool.description ?? '' })),
    };
  }

  async callTool(ctx: RequestContext, body: McpCallRequest): Promise<McpCallResponse['data']> {
    const server = await this.registeredServer(ctx, body.server);
    const args = body.arguments ?? {};
    const { decided, value } = await this.governMcp(
      ctx,
      server,
      {
        action: 'mcp.call',
        input: mcpInput(body.input, 'mcp.call'),
        tool: body.tool,
        arguments: args,
        approvalId: body.approval_id,
        sessionId: body.session_id,
      },
      'call_failed',
      (client) => runTool(client, body.tool, args),
      (r) => ({ tool_error: r.isError }),
    );
    const base = { server: server.slug, tool: body.tool, decision: decided.result };
    if (value === null) return { allowed: false, ...base, execution: null };
    return { allowed: true, ...base, execution: value };
  }

  async openSession(ctx: RequestContext, body: McpSessionRequest): Promise<McpSessionResponse['data']> {
    const server = await this.registeredServer(ctx, body.server);
    const held: HeldSession = { id: randomUUID(), expiresAt: new Date(Date.now() + MCP_SESSION_MINUTES * 60_000) };
    const { decided, value } = await this.pipeline.govern(
      ctx,
      {
        input: mcpInput(body.input, 'mcp.session'),
        execution: mcpFacts(server.slug, { method: 'initialize' }),
        fixedAction: 'mcp.session',
        source: 'mcp',
        viaProxy: true,
      },
      {
        // the upstream connection opens now, so a session that cannot work fails here (502)
        run: (decided) =>
          this.mcp.use(server, 'session_failed', { agentId: decided.agent.id, session: held }, (client) =>
            client.ping({ timeout: MCP_REQUEST_TIMEOUT_MS }),
          ),
        describe: () => ({ session_id: held.id }),
      },
    );
    if (value === null) return { allowed: false, server: server.slug, session_id: null, expires_at: null };
    await insertSession(this.db, {
      workspace_id: ctx.auth.workspaceId,
      id: held.id,
      server_id: server.id,
      agent_id: decided.agent.id,
      expires_at: held.expiresAt,
    });
    return { allowed: true, server: server.slug, session_id: held.id, expires_at: held.expiresAt.toISOString() };
  }
}
