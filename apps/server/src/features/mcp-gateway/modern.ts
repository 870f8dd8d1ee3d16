/**
 * MCP revision 2026-07-28 at the gateway's edge: a request that claims it (its
 * `MCP-Protocol-Version`, or the `_meta` envelope) is served by the v2 SDK's `createMcpHandler`,
 * which owns the revision's wire (the envelope, `server/discover`, `resultType` and cache hints
 * on results, `UnsupportedProtocolVersion`, the methods the revision removed). Every method it
 * dispatches lands in the same governed methods the stateful revisions are served by
 * (McpGateway.register): one act pipeline, whichever revision the client speaks. Upstreams are
 * reached as before, in the revision they speak.
 *
 * What an upstream asks meanwhile reaches the client as `input_required` (input-rounds.ts);
 * what it announces reaches `subscriptions/listen` streams (listen-streams.ts). Not yet in this
 * revision: answers nobody asked (docs/decisions/0030-mcp-both-revisions.md). The tasks extension is
 * task-extension.ts's.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { toNodeHandler } from '@modelcontextprotocol/node';
import { McpError } from '@modelcontextprotocol/sdk/types.js';
import { createMcpHandler, ProtocolError, type ServerContext, Server as ServerV2 } from '@modelcontextprotocol/server';
import { z } from 'zod';
import { TASKS_EXTENSION, takesTasks } from '../../shared/mcp-extensions.ts';
import { isObject } from '../../shared/objects.ts';
import type { McpTarget } from '../execution/mcp-dialer.ts';
import type { Extra, GatewayCaller } from './gateway-answers.ts';
import type { Asker, InputRounds } from './input-rounds.ts';
import { ListenStreams } from './listen-streams.ts';

/** The first revision served here rather than by the stateful transport. */
export const MODERN_REVISION = '2026-07-28';
const VERSION_META = 'io.modelcontextprotocol/protocolVersion';

/** Whether a POST speaks 2026-07-28 or later: it says so in its header or in its `_meta` envelope. */
export function isModernRequest(req: IncomingMessage, body: unknown): boolean {
  const header = req.headers['mcp-protocol-version'];
  if (typeof header === 'string' && header >= MODERN_REVISION) return true;
  const params = isObject(body) && isObject(body.params) ? body.params : undefined;
  return isObject(params?._meta) && typeof params._meta[VERSION_META] === 'string';
}

/** A v1 handler as the method table keeps it: the request parsed by its schema, then handled. */
type Handler = (request: unknown, extra: Extra & { requestId: string | number }) => Promise<unknown>;

/** Takes the gateway's registrations (v1 schemas, as McpGateway.register makes them) into a table by method. */
class MethodTable {
  readonly handlers = new Map<string, Handler>();
  setRequestHandler(schema: unknown, handler: unknown): void {
    const typed = schema as { shape: { method: { value: string } }; parse: (value: unknown) => unknown };
    const run = handler as (request: unknown, extra: unknown) => Promise<unknown>;
    this.handlers.set(typed.shape.method.value, (request, extra) => run(typed.parse(request), extra));
  }
}

/** What one modern request is served for: who calls, on which endpoint, how the methods are registered. */
export interface ModernRequest {
  caller: GatewayCaller;
  single: McpTarget | null;
  info: { name: string; version: string };
  instructions: string;
  register: (methods: MethodTable) => void;
  /** Ends the request's HTTP answer (a listen stream whose caller may no longer act). */
  end?: () => void;
}

/** What the client declared in this request's envelope. */
function declared(ctx: ServerContext): Record<string, unknown> {
  const envelope = (ctx.mcpReq.envelope ?? {}) as Record<string, unknown>;
  const capabilities = envelope['io.modelcontextprotocol/clientCapabilities'] ?? envelope.clientCapabilities;
  return isObject(capabilities) ? capabilities : {};
}

/** Whether the client declared URL elicitation: a pending approval can send it to the approval page. */
export const elicitsUrls = (capabilities: Record<string, unknown>) =>
  isObject(capabilities.elicitation) && isObject(capabilities.elicitation.url);

/** Methods of the stateful revisions that 2026-07-28 removed (the SDK answers them not found). */
const REMOVED_METHODS = new Set(['logging/setLevel', 'resources/subscribe', 'resources/unsubscribe', 'tasks/result', 'tasks/list']);
/** Methods the revision does not define (the tasks extension's): the v2 Server takes them with a params schema; the table parses them. */
const ANY_PARAMS = { params: z.object({}).passthrough() };

/** The requests whose upstream may ask the client something meanwhile: answered in input rounds (input-rounds.ts). */
const ASKING_METHODS = new Set(['tools/call', 'prompts/get', 'resources/read']);

/** The v1 SDK's errors keep their JSON-RPC code through the v2 server (an unknown tool stays -32602). */
const asV2Error = (error: unknown) => (error instanceof McpError ? new ProtocolError(error.code, error.message, error.data) : error);

export class ModernEdge {
  /** `checkMs`: how often a listen stream's caller is asked again whether it may still act. */
  constructor(
    private readonly rounds: InputRounds,
    checkMs: number,
  ) {
    this.listening = new ListenStreams(() => {
      const request = this.current.getStore();
      return (
        request && {
          workspaceId: request.caller.ctx.auth.workspaceId,
          single: request.single,
          stillAllowed: request.caller.stillAllowed,
          end: request.end,
        }
      );
    }, checkMs);
    this.handle = toNodeHandler(
      createMcpHandler(() => this.server(this.current.getStore() as ModernRequest), { legacy: 'reject', bus: this.listening }),
    );
  }

  private readonly current = new AsyncLocalStorage<ModernRequest>();
  /** The `subscriptions/listen` streams open here, each scoped to where it was opened (listen-streams.ts). */
  readonly listening: ListenStreams;
  private readonly handle: ReturnType<typeof toNodeHandler>;

  serve(request: ModernRequest, req: IncomingMessage, res: ServerResponse, body: unknown): Promise<void> {
    // a listen stream ended while the SDK may still write it: the socket goes, not just the body
    return this.current.run({ ...request, end: () => res.destroy() }, () => this.handle(req, res, body));
  }

  private server({ caller, info, instructions, register }: ModernRequest): ServerV2 {
    const table = new MethodTable();
    register(table);
    // list changes and resource updates are told on subscriptions/listen (listen-streams.ts)
    const capabilities = {
      tools: { listChanged: true },
      resources: { listChanged: true, subscribe: true },
      prompts: { listChanged: true },
      completions: {},
      // a task is the upstream's choice, passed on to a client that declares the extension (task-extension.ts)
      extensions: { [TASKS_EXTENSION]: {} },
    };
    const server = new ServerV2(info, { capabilities, instructions });
    const serve = async (handler: Handler, request: { method: string; params?: unknown }, ctx: ServerContext) => {
      const capabilities = declared(ctx);
      const params = (request.params ?? {}) as Record<string, unknown>;
      // the rounds' own params are the rounds' (input-rounds.ts): never decided on, never sent upstream
      const { inputResponses: _answers, requestState: _state, ...rest } = params;
      // the answers of tasks/update are the task's, not a round's (the SDK lifts them out of the params)
      const sent =
        request.method === 'tasks/update'
          ? { ...rest, inputResponses: params.inputResponses ?? (ctx.mcpReq as { inputResponses?: unknown }).inputResponses }
          : rest;
      const run = (ask: Asker | undefined, signal: AbortSignal) =>
        handler(
          { method: request.method, params: sent },
          {
            signal,
            requestId: ctx.mcpReq.id,
            ...(ctx.mcpReq._meta ? { _meta: ctx.mcpReq._meta as Extra['_meta'] } : {}),
            sendNotification: (notification: { method: string; params?: Record<string, unknown> }) => ctx.mcpReq.notify(notification),
            handBack: elicitsUrls(capabilities),
            tasks: takesTasks(capabilities),
            ask,
          },
        );
      try {
        if (!ASKING_METHODS.has(request.method)) return (await run(undefined, ctx.mcpReq.signal)) as never;
        const { requestState, inputResponses } = ctx.mcpReq as { requestState?: () => unknown; inputResponses?: unknown };
        const asked = {
          agentId: caller.agent.id,
          method: request.method,
          params: sent,
          state: params.requestState ?? requestState?.(),
          answers: params.inputResponses ?? inputResponses,
          capabilities,
          signal: ctx.mcpReq.signal,
        };
        return (await this.rounds.serve(asked, run)) as never;
      } catch (error) {
        throw asV2Error(error);
      }
    };
    // each method the gateway serves, by name: the SDK answers any other itself (404, -32601)
    for (const [method, handler] of table.handlers) {
      if (REMOVED_METHODS.has(method)) continue;
      if (method.startsWith('tasks/'))
        (server.setRequestHandler as (m: string, s: object, h: (params: unknown, ctx: ServerContext) => unknown) => void)(
          method,
          ANY_PARAMS,
          (params, ctx) => serve(handler, { method, params }, ctx),
        );
      else server.setRequestHandler(method as 'ping', (request, ctx) => serve(handler, request, ctx) as never);
    }
    return server;
  }
}
