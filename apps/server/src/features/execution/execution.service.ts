/**
 * Governed execution: decide first (exactly as /policy/evaluate, audited), act only when
 * allowed, then audit the outcome. A refused decision is an answer with `allowed: false` and
 * nothing sent upstream.
 */
import { randomUUID } from 'node:crypto';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import type {
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
import { type ExecutionFacts, type HttpFacts, httpFacts, type McpFacts, mcpFacts } from '../decisions/act.ts';
import type { DecisionOutcome, DecisionService } from '../decisions/decisions.ts';
import { findMcpServer } from '../mcp-servers/mcp-servers.repository.ts';
import { executeHttp } from './http-proxy.ts';
import { MCP_REQUEST_TIMEOUT_MS, type McpConnector, type McpTarget } from './mcp-connector.ts';
import { findOpenSession, insertSession } from './mcp-sessions.repository.ts';

export const MCP_SESSION_MINUTES = 30;

type ToolResult = { content: Array<Record<string, unknown>>; isError: boolean; structuredContent?: Record<string, unknown> };

async function runTool(client: Client, tool: string, args: Record<string, unknown>): Promise<ToolResult> {
  const result = await client.callTool({ name: tool, arguments: args }, undefined, { timeout: MCP_REQUEST_TIMEOUT_MS });
  return {
    content: (result.content ?? []) as ToolResult['content'],
    isError: result.isError === true,
    ...(result.structuredContent ? { structuredContent: result.structuredContent as Record<string, unknown> } : {}),
  };
}

/** An MCP operation's input: its action is the operation's unless the caller declares one too. */
const mcpInput = (input: McpRuntimeInput | undefined, action: string): EvaluationInput => ({ ...input, action: input?.action ?? action });

export class ExecutionService {
  constructor(
    private readonly db: Kysely<DB>,
    private readonly decisions: DecisionService,
    private readonly mcp: McpConnector,
    private readonly egress: EgressGuard,
  ) {}

  /** Runs the action of an allowed decision and audits its outcome; a failure is audited too. */
  private async act<T>(
    ctx: RequestContext,
    decided: DecisionOutcome,
    run: () => Promise<T>,
    describe: (value: T) => Record<string, unknown>,
  ): Promise<T> {
    const started = performance.now();
    let value: T;
    try {
      value = await run();
    } catch (error) {
      const denied = error instanceof ApiError && error.code === 'execution_target_denied';
      await this.decisions.recordOutcome(ctx, decided, {
        result: denied ? 'blocked' : 'allowed',
        message: error instanceof ApiError ? error.message : 'execution failed',
        context: { outcome: denied ? 'target_denied' : 'failed', duration_ms: Math.round(performance.now() - started) },
      });
      throw error;
    }
    await this.decisions.recordOutcome(ctx, decided, {
      result: 'allowed',
      message: 'executed',
      context: { outcome: 'succeeded', duration_ms: Math.round(performance.now() - started), ...describe(value) },
    });
    return value;
  }

  private async registeredServer(ctx: RequestContext, slug: string): Promise<McpTarget> {
    const server = await findMcpServer(this.db, ctx.auth.workspaceId, slug);
    if (!server?.enabled) throw new ApiError('mcp_server_not_found', `no enabled MCP server '${slug}' in this workspace`);
    return server;
  }

  private async session(ctx: RequestContext, id: string | undefined, server: McpTarget, agentId: string) {
    if (id === undefined) return null;
    const row = await findOpenSession(this.db, { workspaceId: ctx.auth.workspaceId, id, serverId: server.id, agentId });
    if (!row) throw new ApiError('session_not_found', `no open session '${id}' of this agent on '${server.slug}'`);
    return { id: row.id, expiresAt: new Date(row.expires_at) };
  }

  async execute(ctx: RequestContext, body: ExecutionRequest): Promise<ExecutionResponse['data']> {
    const execution = body.execution as HttpExecution | McpExecution;
    const server = execution.mode === 'mcp_proxy' ? await this.registeredServer(ctx, execution.server) : null;
    const facts: ExecutionFacts =
      execution.mode === 'mcp_proxy' ? mcpFacts((server as McpTarget).slug, execution.tool, execution.arguments) : httpFacts(execution);
    const decided = await this.decisions.decide(ctx, {
      input: body.input,
      execution: facts,
      fixedAction: facts.mode === 'mcp_proxy' ? 'mcp.call' : undefined,
      approvalId: body.approval_id,
      source: 'execution',
      viaProxy: true,
    });
    const decision = decided.result;
    if (!decision.allowed) return { allowed: false, decision, execution: null };
    if (execution.mode === 'http_proxy') {
      // sent in the normalised form the policy decided on
      const sent = { ...execution, url: (facts as HttpFacts).url };
      const result = await this.act(
        ctx,
        decided,
        () => executeHttp(this.egress, sent),
        (r) => ({ upstream_status: r.status }),
      );
      return { allowed: true, decision, execution: result };
    }
    const target = server as McpTarget;
    const args = (facts as McpFacts).arguments ?? {};
    const held = await this.session(ctx, execution.session_id, target, decided.agent.id);
    const result = await this.act(
      ctx,
      decided,
      () => this.mcp.use(target, 'execution_failed', held, (client) => runTool(client, execution.tool, args)),
      (r) => ({ tool_error: r.isError }),
    );
    return { allowed: true, decision, execution: { mode: 'mcp_proxy' as const, server: target.slug, tool: execution.tool, ...result } };
  }

  async discoverTools(ctx: RequestContext, body: McpDiscoverRequest): Promise<McpDiscoverResponse['data']> {
    const server = await this.registeredServer(ctx, body.server);
    const decided = await this.decisions.decide(ctx, {
      input: mcpInput(body.input, 'mcp.discover'),
      execution: mcpFacts(server.slug),
      fixedAction: 'mcp.discover',
      source: 'mcp',
      viaProxy: true,
    });
    if (!decided.result.allowed) return { allowed: false, result: decided.result.result, server: server.slug, tools: [] };
    const held = await this.session(ctx, body.session_id, server, decided.agent.id);
    const listed = await this.act(
      ctx,
      decided,
      () => this.mcp.use(server, 'discovery_failed', held, (client) => client.listTools(undefined, { timeout: MCP_REQUEST_TIMEOUT_MS })),
      (r) => ({ tools: r.tools.length }),
    );
    const allowed = await this.decisions.allowedTools(
      ctx,
      decided,
      server.slug,
      listed.tools.map((tool) => tool.name),
    );
    const tools = listed.tools
      .filter((tool) => allowed.has(tool.name))
      .map((tool) => ({
        name: tool.name,
        description: tool.description ?? '',
        inputSchema: tool.inputSchema as Record<string, unknown>,
      }));
    return { allowed: true, result: decided.result.result, server: server.slug, tools };
  }

  async callTool(ctx: RequestContext, body: McpCallRequest): Promise<McpCallResponse['data']> {
    const server = await this.registeredServer(ctx, body.server);
    const facts = mcpFacts(server.slug, body.tool, body.arguments);
    const decided = await this.decisions.decide(ctx, {
      input: mcpInput(body.input, 'mcp.call'),
      execution: facts,
      fixedAction: 'mcp.call',
      approvalId: body.approval_id,
      source: 'mcp',
      viaProxy: true,
    });
    const base = { server: server.slug, tool: body.tool, decision: decided.result };
    if (!decided.result.allowed) return { allowed: false, ...base, execution: null };
    const held = await this.session(ctx, body.session_id, server, decided.agent.id);
    const execution = await this.act(
      ctx,
      decided,
      () => this.mcp.use(server, 'call_failed', held, (client) => runTool(client, body.tool, facts.arguments ?? {})),
      (r) => ({ tool_error: r.isError }),
    );
    return { allowed: true, ...base, execution };
  }

  async openSession(ctx: RequestContext, body: McpSessionRequest): Promise<McpSessionResponse['data']> {
    const server = await this.registeredServer(ctx, body.server);
    const decided = await this.decisions.decide(ctx, {
      input: mcpInput(body.input, 'mcp.session'),
      execution: mcpFacts(server.slug),
      fixedAction: 'mcp.session',
      source: 'mcp',
      viaProxy: true,
    });
    if (!decided.result.allowed) return { allowed: false, server: server.slug, session_id: null, expires_at: null };
    const held = { id: randomUUID(), expiresAt: new Date(Date.now() + MCP_SESSION_MINUTES * 60_000) };
    // Open the upstream connection now, so a session that cannot work fails here (502).
    await this.act(
      ctx,
      decided,
      () => this.mcp.use(server, 'session_failed', held, (client) => client.ping({ timeout: MCP_REQUEST_TIMEOUT_MS })),
      () => ({ session_id: held.id }),
    );
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
