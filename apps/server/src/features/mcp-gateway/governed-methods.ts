/**
 * The gateway's MCP methods other than tools and listings: each a governed act with an action
 * of its own (decided by the one decision path, ExecutionService.governMcp, audited, blockable
 * by policy), forwarded to the upstream once allowed, its answer or JSON-RPC error relayed as
 * the upstream sent it:
 *
 * - `resources/read`: `mcp.resources.read`, resource the URI, normalised and sent in that form
 *   (acts/resource-uri.ts); on the aggregate the answer's URIs are namespaced too;
 * - `prompts/get`: `mcp.prompts.get`, resource the prompt's name; decided on every parameter
 *   sent, so an approval binds the arguments too;
 * - `logging/setLevel`: `mcp.logging`, resource the level; on the aggregate, sent to every
 *   server (the first refusal or failure is the answer, after all were tried);
 * - `completion/complete`: `mcp.completion`, resource the prompt's name or the template's URI;
 * - `resources/subscribe` and `resources/unsubscribe`: `mcp.resources.subscribe`, resource the URI.
 *
 * The client's `_meta` is never forwarded (acts/act.ts, McpFacts). The upstream's log
 * notifications during a request reach the client through relay.ts.
 */
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import type { Server } from '@modelcontextprotocol/sdk/server/index.js';
import {
  CompleteRequestSchema,
  GetPromptRequestSchema,
  ReadResourceRequestSchema,
  SetLevelRequestSchema,
  SubscribeRequestSchema,
  UnsubscribeRequestSchema,
} from '@modelcontextprotocol/sdk/types.js';
import { MCP_METHOD_ACTIONS } from '../acts/act.ts';
import { MCP_REQUEST_TIMEOUT_MS } from '../execution/execution.service.ts';
import type { McpTarget } from '../execution/mcp-dialer.ts';
import type { Asker } from './input-rounds.ts';

/** The fixed actions of these methods (a policy matches them in `match.action`): their methods' (acts/act.ts, the one table). */
export const GOVERNED_ACTIONS = {
  read: MCP_METHOD_ACTIONS['resources/read'] as string,
  prompt: MCP_METHOD_ACTIONS['prompts/get'] as string,
  logging: MCP_METHOD_ACTIONS['logging/setLevel'] as string,
  completion: MCP_METHOD_ACTIONS['completion/complete'] as string,
  subscribe: MCP_METHOD_ACTIONS['resources/subscribe'] as string,
};

/** A read, a prompt or another governed request: what is decided, and who may be asked what its upstream asks meanwhile. */
export interface GovernedAct {
  action: string;
  resource: string;
  method: string;
  params: Record<string, unknown>;
  signal?: AbortSignal;
  ask?: Asker;
}

/** What the gateway lends these methods for one request: its servers, its routing and its governed path. */
export interface GovernedContext {
  /** The servers of this endpoint (one, or every enabled server on the aggregate). */
  servers: () => Promise<McpTarget[]>;
  /** The server a (possibly namespaced) name or URI belongs to, and the name it knows it by. */
  route: (name: string) => Promise<{ target: McpTarget; name: string }>;
  /** Decides the act, runs `work` on the upstream when allowed; a refusal is a JSON-RPC error naming the policy. */
  governed: <T>(target: McpTarget, act: GovernedAct, work: (client: Client) => Promise<T>) => Promise<T>;
  /** A resource URI in the one form it is decided on and sent in (acts/resource-uri.ts). */
  resourceUri: (uri: string) => string;
  /** On the aggregate, the name a client sees for a server's URI; null on a server's own endpoint. */
  namespaced: ((target: McpTarget, name: string) => string) | null;
}

/** Who may be asked what an upstream asks during the request (a 2026-07-28 request's, modern.ts). */
const askerOf = (extra: object): Asker | undefined => (extra as { ask?: Asker }).ask;

/** Registers these methods on a request's Server (its capabilities must declare `resources`, `prompts`, `logging` and `completions`). */
export function registerGovernedMethods(server: Pick<Server, 'setRequestHandler'>, gateway: GovernedContext): void {
  server.setRequestHandler(ReadResourceRequestSchema, async (request, extra) => {
    const { target, name } = await gateway.route(request.params.uri);
    const { _meta, ...params } = request.params;
    const sent = { ...params, uri: gateway.resourceUri(name) };
    const result = await gateway.governed(
      target,
      {
        action: GOVERNED_ACTIONS.read,
        resource: sent.uri,
        method: request.method,
        params: sent,
        signal: extra.signal,
        ask: askerOf(extra),
      },
      (client) => client.readResource(sent, { timeout: MCP_REQUEST_TIMEOUT_MS, signal: extra.signal }),
    );
    const { namespaced } = gateway;
    return namespaced ? { ...result, contents: result.contents.map((c) => ({ ...c, uri: namespaced(target, c.uri) })) } : result;
  });

  server.setRequestHandler(GetPromptRequestSchema, async (request, extra) => {
    const { target, name } = await gateway.route(request.params.name);
    const { _meta, ...params } = request.params;
    const sent = { ...params, name };
    return gateway.governed(
      target,
      { action: GOVERNED_ACTIONS.prompt, resource: name, method: request.method, params: sent, signal: extra.signal, ask: askerOf(extra) },
      (client) => client.getPrompt(sent, { timeout: MCP_REQUEST_TIMEOUT_MS, signal: extra.signal }),
    );
  });

  server.setRequestHandler(SetLevelRequestSchema, async (request, extra) => {
    const { _meta, ...sent } = request.params;
    const failures: unknown[] = [];
    for (const target of await gateway.servers())
      await gateway
        .governed(
          target,
          { action: GOVERNED_ACTIONS.logging, resource: sent.level, method: request.method, params: sent, signal: extra.signal },
          (client) => client.setLoggingLevel(sent.level, { timeout: MCP_REQUEST_TIMEOUT_MS, signal: extra.signal }),
        )
        .catch((error) => failures.push(error));
    if (failures.length > 0) throw failures[0];
    return {};
  });

  server.setRequestHandler(CompleteRequestSchema, async (request, extra) => {
    const { _meta, ...params } = request.params;
    const { ref } = params;
    const named = ref.type === 'ref/prompt' ? ref.name : ref.uri;
    const { target, name } = await gateway.route(named);
    const routed = ref.type === 'ref/prompt' ? { ...ref, name } : { ...ref, uri: name };
    const sent = { ...params, ref: routed };
    return gateway.governed(
      target,
      { action: GOVERNED_ACTIONS.completion, resource: name, method: request.method, params: sent, signal: extra.signal },
      (client) => client.complete(sent, { timeout: MCP_REQUEST_TIMEOUT_MS, signal: extra.signal }),
    );
  });

  for (const schema of [SubscribeRequestSchema, UnsubscribeRequestSchema] as const)
    server.setRequestHandler(schema, async (request, extra) => {
      const { _meta, ...params } = request.params;
      const { target, name } = await gateway.route(params.uri);
      // the form decided is the form sent, as for resources/read
      const sent = { ...params, uri: gateway.resourceUri(name) };
      const options = { timeout: MCP_REQUEST_TIMEOUT_MS, signal: extra.signal };
      await gateway.governed(
        target,
        { action: GOVERNED_ACTIONS.subscribe, resource: sent.uri, method: request.method, params: sent, signal: extra.signal },
        (client) =>
          request.method === 'resources/subscribe' ? client.subscribeResource(sent, options) : client.unsubscribeResource(sent, options),
      );
      return {};
    });
}
