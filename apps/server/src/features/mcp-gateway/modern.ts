/**
 * MCP revision 2026-07-28 at the gateway's edge: a request that claims it (its
 * `MCP-Protocol-Version`, or the `_meta` envelope) is served by the v2 SDK's `createMcpHandler`,
 * which owns the revision's wire (the envelope, `server/discover`, `resultType` and cache hints
 * on results, `UnsupportedProtocolVersion`, the methods the revision removed). Every method it
 * dispatches lands in the same governed methods the stateful revisions are served by
 * (McpGateway.register): one act pipeline, whichever revision the client speaks. Upstreams are
 * reached as before, in the revision they speak.
 *
 * Not yet in this revision (docs/decisions/0030-mcp-both-revisions.md): `input_required` for an
 * upstream's questions (they are refused to the upstream, as a request whose stream cannot
 * carry them), `subscriptions/listen` fed by upstream changes, and the tasks extension.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { toNodeHandler } from '@modelcontextprotocol/node';
import { McpError } from '@modelcontextprotocol/sdk/types.js';
import { createMcpHandler, ProtocolError, type ServerContext, Server as ServerV2 } from '@modelcontextprotocol/server';
import { isObject } from '../../shared/objects.ts';
import type { McpTarget } from '../execution/mcp-connector.ts';
import type { Extra, GatewayCaller } from './gateway-answers.ts';

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
}

/** Whether the client declared URL elicitation in this request's envelope: it can be sent to the approval page. */
function elicitsUrls(ctx: ServerContext): boolean {
  const envelope = (ctx.mcpReq.envelope ?? {}) as Record<string, unknown>;
  const capabilities = envelope['io.modelcontextprotocol/clientCapabilities'] ?? envelope.clientCapabilities;
  const elicitation = isObject(capabilities) ? capabilities.elicitation : undefined;
  return isObject(elicitation) && isObject(elicitation.url);
}

/** The v1 SDK's errors keep their JSON-RPC code through the v2 server (an unknown tool stays -32602). */
const asV2Error = (error: unknown) => (error instanceof McpError ? new ProtocolError(error.code, error.message, error.data) : error);

export class ModernEdge {
  private readonly current = new AsyncLocalStorage<ModernRequest>();
  private readonly handle = toNodeHandler(
    createMcpHandler(() => this.server(this.current.getStore() as ModernRequest), { legacy: 'reject' }),
  );

  serve(request: ModernRequest, req: IncomingMessage, res: ServerResponse, body: unknown): Promise<void> {
    return this.current.run(request, () => this.handle(req, res, body));
  }

  private server({ info, instructions, register }: ModernRequest): ServerV2 {
    const table = new MethodTable();
    register(table);
    const server = new ServerV2(info, { capabilities: { tools: {}, resources: {}, prompts: {}, completions: {} }, instructions });
    server.fallbackRequestHandler = async (request, ctx: ServerContext) => {
      const handler = table.handlers.get(request.method);
      if (!handler) throw new ProtocolError(-32601, `Method not found: ${request.method}`);
      const extra = {
        signal: ctx.mcpReq.signal,
        requestId: ctx.mcpReq.id,
        ...(ctx.mcpReq._meta ? { _meta: ctx.mcpReq._meta as Extra['_meta'] } : {}),
        sendNotification: (notification: { method: string; params?: Record<string, unknown> }) => ctx.mcpReq.notify(notification),
        handBack: elicitsUrls(ctx),
      };
      try {
        return (await handler(
          { method: request.method, params: request.params ?? {} },
          extra as Extra & { requestId: string | number },
        )) as never;
      } catch (error) {
        throw asV2Error(error);
      }
    };
    return server;
  }
}
