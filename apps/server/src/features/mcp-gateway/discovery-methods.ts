/**
 * The gateway's listings: tools/list, resources/list, resources/templates/list and
 * prompts/list, each decided as `mcp.discover` per server (ExecutionService), the answers of
 * every server of the endpoint joined. On the aggregate, names and URIs are namespaced
 * `<server>__<name>` and a server that fails is left out; on a server's own endpoint its cursor
 * is passed on and its failure is the answer. tools/list is filtered to the tools policy lets
 * the agent call (ExecutionService.listTools).
 */
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import type { Server } from '@modelcontextprotocol/sdk/server/index.js';
import {
  ListPromptsRequestSchema,
  ListResourcesRequestSchema,
  ListResourceTemplatesRequestSchema,
  ListToolsRequestSchema,
  type Prompt,
  type Resource,
  type ResourceTemplate,
  type Tool,
} from '@modelcontextprotocol/sdk/types.js';
import { MCP_REQUEST_TIMEOUT_MS } from '../execution/execution.service.ts';
import type { McpTarget } from '../execution/mcp-dialer.ts';

/** What the gateway lends the listings for one request. */
export interface DiscoveryContext {
  /** The endpoint's one server, or null on the aggregate. */
  single: McpTarget | null;
  servers: () => Promise<McpTarget[]>;
  /** The name a client sees for a server's item (namespaced on the aggregate). */
  named: (target: McpTarget, name: string) => string;
  listTools: (target: McpTarget, cursor: string | undefined) => Promise<{ tools: Tool[] | null; nextCursor?: string }>;
  /** Decides `mcp.discover` for `method` and, when allowed and the server offers `capability`, runs `run`; `count` says what the audit records. */
  discover: <R>(
    target: McpTarget,
    method: string,
    capability: 'resources' | 'prompts',
    run: (client: Client) => Promise<R>,
    count: (result: R) => number,
  ) => Promise<{ value: R | null }>;
  /** A server's failure: null (left out) on the aggregate, thrown on its own endpoint. */
  skipOnAggregate: (error: unknown) => null;
}

export function registerDiscoveryMethods(server: Pick<Server, 'setRequestHandler'>, context: DiscoveryContext): void {
  const { single, servers, named } = context;
  const cursorOf = (request: { params?: { cursor?: string } }) => (single ? request.params?.cursor : undefined);

  server.setRequestHandler(ListToolsRequestSchema, async (request) => {
    const tools: Tool[] = [];
    let nextCursor: string | undefined;
    for (const target of await servers()) {
      const listed = await context.listTools(target, cursorOf(request)).catch(context.skipOnAggregate);
      if (!listed?.tools) continue;
      for (const tool of listed.tools) tools.push({ ...tool, name: named(target, tool.name) });
      if (single) nextCursor = listed.nextCursor;
    }
    return nextCursor ? { tools, nextCursor } : { tools };
  });

  /** One listing over the endpoint's servers: their items renamed for the client, the cursor of a single server. */
  const list =
    <T, R>(
      capability: 'resources' | 'prompts',
      method: string,
      run: (client: Client, cursor: string | undefined) => Promise<R & { nextCursor?: string }>,
      items: (result: R) => T[],
      rename: (target: McpTarget, item: T) => T,
    ) =>
    async (request: { params?: { cursor?: string } }) => {
      const all: T[] = [];
      let nextCursor: string | undefined;
      for (const target of await servers()) {
        const listed = await context
          .discover(
            target,
            method,
            capability,
            (client) => run(client, cursorOf(request)),
            (r) => items(r).length,
          )
          .catch(context.skipOnAggregate);
        if (!listed?.value) continue;
        for (const item of items(listed.value)) all.push(rename(target, item));
        if (single) nextCursor = listed.value.nextCursor;
      }
      return { all, nextCursor };
    };
  const page = (cursor: string | undefined) => (cursor ? { cursor } : undefined);
  const timeout = { timeout: MCP_REQUEST_TIMEOUT_MS };

  const resources = list<Resource, { resources: Resource[] }>(
    'resources',
    'resources/list',
    (client, cursor) => client.listResources(page(cursor), timeout),
    (r) => r.resources,
    (target, item) => ({ ...item, uri: named(target, item.uri) }),
  );
  server.setRequestHandler(ListResourcesRequestSchema, async (request) => {
    const { all, nextCursor } = await resources(request);
    return nextCursor ? { resources: all, nextCursor } : { resources: all };
  });

  const templates = list<ResourceTemplate, { resourceTemplates: ResourceTemplate[] }>(
    'resources',
    'resources/templates/list',
    (client, cursor) => client.listResourceTemplates(page(cursor), timeout),
    (r) => r.resourceTemplates,
    (target, item) => ({ ...item, uriTemplate: named(target, item.uriTemplate) }),
  );
  server.setRequestHandler(ListResourceTemplatesRequestSchema, async (request) => {
    const { all, nextCursor } = await templates(request);
    return nextCursor ? { resourceTemplates: all, nextCursor } : { resourceTemplates: all };
  });

  const prompts = list<Prompt, { prompts: Prompt[] }>(
    'prompts',
    'prompts/list',
    (client, cursor) => client.listPrompts(page(cursor), timeout),
    (r) => r.prompts,
    (target, item) => ({ ...item, name: named(target, item.name) }),
  );
  server.setRequestHandler(ListPromptsRequestSchema, async (request) => {
    const { all, nextCursor } = await prompts(request);
    return nextCursor ? { prompts: all, nextCursor } : { prompts: all };
  });
}
