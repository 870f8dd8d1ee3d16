/**
 * Governed execution: decide first (exactly as /policy/evaluate, audited), act only when
 * allowed, then audit the outcome. A refused decision is a 200 with `allowed: false` and
 * nothing sent upstream.
 */
import { randomUUID } from 'node:crypto';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import type { EvaluationInput, HttpExecution, McpExecution, McpRuntimeInput } from '@warden/contract';
import type { HandlerDeps } from '../../handlers.ts';
import type { RequestContext } from '../../http/context.ts';
import { ApiError } from '../../http/errors.ts';
import type { Handlers } from '../../http/router.ts';
import { findMcpServer } from '../mcp-servers/mcp-servers.repository.ts';
import { type ExecutionFacts, type HttpFacts, httpFacts, type McpFacts, mcpFacts } from './act.ts';
import type { DecisionOutcome, DecisionService } from './decisions.ts';
import { executeHttp } from './http-proxy.ts';
import { MCP_REQUEST_TIMEOUT_MS, type McpTarget } from './mcp-connector.ts';

export const MCP_SESSION_MINUTES = 30;

type ToolResult = { content: Array<Record<string, unknown>>; isError: boolean; structuredContent?: Record<string, unknown> };

async function callTool(client: Client, tool: string, args: Record<string, unknown>): Promise<ToolResult> {
  const result = await client.callTool({ name: tool, arguments: args }, undefined, { timeout: MCP_REQUEST_TIMEOUT_MS });
  return {
    content: (result.content ?? []) as ToolResult['content'],
    isError: result.isError === true,
    ...(result.structuredContent ? { structuredContent: result.structuredContent as Record<string, unknown> } : {}),
  };
}

/** Runs the action of an allowed decision and audits its outcome; a failure is audited too. */
async function act<T>(
  decisions: DecisionService,
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
    await decisions.recordOutcome(ctx, decided, {
      result: denied ? 'blocked' : 'allowed',
      message: error instanceof ApiError ? error.message : 'execution failed',
      context: { outcome: denied ? 'target_denied' : 'failed', duration_ms: Math.round(performance.now() - started) },
    });
    throw error;
  }
  await decisions.recordOutcome(ctx, decided, {
    result: 'allowed',
    message: 'executed',
    context: { outcome: 'succeeded', duration_ms: Math.round(performance.now() - started), ...describe(value) },
  });
  return value;
}

export const runtimeHandlers = ({ database: { db }, decisions, mcp, egress }: HandlerDeps) => {
  const registeredServer = async (ctx: RequestContext, slug: string): Promise<McpTarget> => {
    const server = await findMcpServer(db, ctx.auth.workspaceId, slug);
    if (!server?.enabled) throw new ApiError('mcp_server_not_found', `no enabled MCP server '${slug}' in this workspace`);
    return server;
  };

  /** An MCP operation's input: its action is the operation's unless the caller declares one too. */
  const mcpInput = (input: McpRuntimeInput | undefined, action: string): EvaluationInput => ({ ...input, action: input?.action ?? action });

  const session = async (ctx: RequestContext, id: string | undefined, server: McpTarget, agentId: string) => {
    if (id === undefined) return null;
    const row = await db
      .selectFrom('mcp_sessions')
      .select(['id', 'expires_at'])
      .where('workspace_id', '=', ctx.auth.workspaceId)
      .where('id', '=', id)
      .where('server_id', '=', server.id)
      .where('agent_id', '=', agentId)
      .where('expires_at', '>', new Date())
      .executeTakeFirst();
    if (!row) throw new ApiError('session_not_found', `no open session '${id}' of this agent on '${server.slug}'`);
    return { id: row.id, expiresAt: new Date(row.expires_at) };
  };

  return {
    executeRuntime: async ({ body, ctx }) => {
      const execution = body.execution as HttpExecution | McpExecution;
      const server = execution.mode === 'mcp_proxy' ? await registeredServer(ctx, execution.server) : null;
      const facts: ExecutionFacts =
        execution.mode === 'mcp_proxy' ? mcpFacts((server as McpTarget).slug, execution.tool, execution.arguments) : httpFacts(execution);
      const decided = await decisions.decide(ctx, {
        input: body.input,
        execution: facts,
        fixedAction: facts.mode === 'mcp_proxy' ? 'mcp.call' : undefined,
        approvalId: body.approval_id,
        source: 'execution',
        viaProxy: true,
      });
      const decision = decided.result;
      if (!decision.allowed) return { status: 200, body: { data: { allowed: false, decision, execution: null } } };
      if (execution.mode === 'http_proxy') {
        // sent in the normalised form the policy decided on
        const sent = { ...execution, url: (facts as HttpFacts).url };
        const result = await act(
          decisions,
          ctx,
          decided,
          () => executeHttp(egress, sent),
          (r) => ({ upstream_status: r.status }),
        );
        return { status: 200, body: { data: { allowed: true, decision, execution: result } } };
      }
      const target = server as McpTarget;
      const args = (facts as McpFacts).arguments ?? {};
      const held = await session(ctx, execution.session_id, target, decided.agent.id);
      const result = await act(
        decisions,
        ctx,
        decided,
        () => mcp.use(target, 'execution_failed', held, (client) => callTool(client, execution.tool, args)),
        (r) => ({ tool_error: r.isError }),
      );
      return {
        status: 200,
        body: {
          data: {
            allowed: true,
            decision,
            execution: { mode: 'mcp_proxy' as const, server: target.slug, tool: execution.tool, ...result },
          },
        },
      };
    },

    discoverMcpTools: async ({ body, ctx }) => {
      const server = await registeredServer(ctx, body.server);
      const decided = await decisions.decide(ctx, {
        input: mcpInput(body.input, 'mcp.discover'),
        execution: mcpFacts(server.slug),
        fixedAction: 'mcp.discover',
        source: 'mcp',
        viaProxy: true,
      });
      if (!decided.result.allowed)
        return { status: 200, body: { data: { allowed: false, result: decided.result.result, server: server.slug, tools: [] } } };
      const held = await session(ctx, body.session_id, server, decided.agent.id);
      const listed = await act(
        decisions,
        ctx,
        decided,
        () => mcp.use(server, 'discovery_failed', held, (client) => client.listTools(undefined, { timeout: MCP_REQUEST_TIMEOUT_MS })),
        (r) => ({ tools: r.tools.length }),
      );
      const allowed = await decisions.allowedTools(
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
      return { status: 200, body: { data: { allowed: true, result: decided.result.result, server: server.slug, tools } } };
    },

    callMcpTool: async ({ body, ctx }) => {
      const server = await registeredServer(ctx, body.server);
      const facts = mcpFacts(server.slug, body.tool, body.arguments);
      const decided = await decisions.decide(ctx, {
        input: mcpInput(body.input, 'mcp.call'),
        execution: facts,
        fixedAction: 'mcp.call',
        approvalId: body.approval_id,
        source: 'mcp',
        viaProxy: true,
      });
      const base = { server: server.slug, tool: body.tool, decision: decided.result };
      if (!decided.result.allowed) return { status: 200, body: { data: { allowed: false, ...base, execution: null } } };
      const held = await session(ctx, body.session_id, server, decided.agent.id);
      const execution = await act(
        decisions,
        ctx,
        decided,
        () => mcp.use(server, 'call_failed', held, (client) => callTool(client, body.tool, facts.arguments ?? {})),
        (r) => ({ tool_error: r.isError }),
      );
      return { status: 200, body: { data: { allowed: true, ...base, execution } } };
    },

    openMcpSession: async ({ body, ctx }) => {
      const server = await registeredServer(ctx, body.server);
      const decided = await decisions.decide(ctx, {
        input: mcpInput(body.input, 'mcp.session'),
        execution: mcpFacts(server.slug),
        fixedAction: 'mcp.session',
        source: 'mcp',
        viaProxy: true,
      });
      if (!decided.result.allowed)
        return { status: 200, body: { data: { allowed: false, server: server.slug, session_id: null, expires_at: null } } };
      const held = { id: randomUUID(), expiresAt: new Date(Date.now() + MCP_SESSION_MINUTES * 60_000) };
      // Open the upstream connection now, so a session that cannot work fails here (502).
      await act(
        decisions,
        ctx,
        decided,
        () => mcp.use(server, 'session_failed', held, (client) => client.ping({ timeout: MCP_REQUEST_TIMEOUT_MS })),
        () => ({ session_id: held.id }),
      );
      await db
        .insertInto('mcp_sessions')
        .values({
          workspace_id: ctx.auth.workspaceId,
          id: held.id,
          server_id: server.id,
          agent_id: decided.agent.id,
          expires_at: held.expiresAt,
        })
        .execute();
      return {
        status: 200,
        body: { data: { allowed: true, server: server.slug, session_id: held.id, expires_at: held.expiresAt.toISOString() } },
      };
    },
  } satisfies Partial<Handlers>;
};
