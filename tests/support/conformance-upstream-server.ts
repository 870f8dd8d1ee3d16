/**
 * The conformance upstream's server factory (conformance-upstream.ts serves it): one set of
 * registrations for both protocol eras, the tools, resources, prompts and completions each server
 * scenario of the 2025-11-25 and 2026-07-28 requirement sets names. The tools are in
 * conformance-upstream-tools.ts, the input_required ones in conformance-upstream-mrtr.ts.
 */

import {
  completable,
  McpServer,
  type PromptMessage,
  type RequestStateCodec,
  ResourceTemplate,
  type ServerNotifier,
} from '@modelcontextprotocol/server';
import { z } from 'zod';
import { registerInputRequiredTools } from './conformance-upstream-mrtr.ts';
import { PNG, registerContentTools, registerDiagnosticTools, registerQuestionTools } from './conformance-upstream-tools.ts';

/** What a server instance knows of where it serves. */
export interface UpstreamScope {
  /** `legacy`: a 2025 session's instance; `modern`: one 2026-07-28 request's instance. */
  era: 'legacy' | 'modern';
  /** URIs subscribed to with resources/subscribe, over all sessions. */
  subscribed: Set<string>;
  /** Seals and checks the requestState that round-trips through the client. */
  codec: RequestStateCodec<Record<string, unknown>>;
  /** The modern handler's publisher for open `subscriptions/listen` streams. */
  notify: () => ServerNotifier | undefined;
}

export function buildConformanceServer(scope: UpstreamScope): McpServer {
  const server = new McpServer(
    { name: 'conformance-upstream', version: '2.0.0' },
    {
      capabilities: {
        tools: { listChanged: true },
        resources: { subscribe: true, listChanged: true },
        prompts: { listChanged: true },
        logging: {},
        completions: {},
      },
      // every re-entry's requestState is verified before its handler runs (-32602 if forged)
      requestState: { verify: scope.codec.verify },
      // 2026-07-28 cache hints: lists a minute, per client; the rest the SDK's 0 / private
      cacheHints: {
        'tools/list': { ttlMs: 60_000, cacheScope: 'private' },
        'prompts/list': { ttlMs: 60_000, cacheScope: 'private' },
        'resources/list': { ttlMs: 60_000, cacheScope: 'private' },
        'resources/templates/list': { ttlMs: 60_000, cacheScope: 'private' },
      },
    },
  );
  registerContentTools(server);
  registerQuestionTools(server, scope);
  registerDiagnosticTools(server, scope);
  registerInputRequiredTools(server, scope);
  registerResources(server, scope);
  registerPrompts(server);
  return server;
}

function registerResources(server: McpServer, scope: UpstreamScope): void {
  server.registerResource(
    'static-text',
    'test://static-text',
    // an unchanging text: shared caches may keep it five minutes
    { description: 'A text', mimeType: 'text/plain', cacheHint: { ttlMs: 300_000, cacheScope: 'public' } },
    async (uri) => ({ contents: [{ uri: uri.href, mimeType: 'text/plain', text: 'This is the content of the static text resource.' }] }),
  );
  server.registerResource('static-binary', 'test://static-binary', { description: 'An image', mimeType: 'image/png' }, async (uri) => ({
    contents: [{ uri: uri.href, mimeType: 'image/png', blob: PNG }],
  }));
  server.registerResource(
    'watched-resource',
    'test://watched-resource',
    { description: 'Watched', mimeType: 'text/plain' },
    async (uri) => ({
      contents: [{ uri: uri.href, mimeType: 'text/plain', text: 'watched' }],
    }),
  );
  server.registerResource(
    'template-data',
    new ResourceTemplate('test://template/{id}/data', { list: undefined }),
    { description: 'Data by id', mimeType: 'application/json' },
    async (uri, { id }) => ({
      contents: [
        { uri: uri.href, mimeType: 'application/json', text: JSON.stringify({ id, templateTest: true, data: `Data for ID: ${id}` }) },
      ],
    }),
  );
  server.server.setRequestHandler('resources/subscribe', async (request) => {
    scope.subscribed.add(request.params.uri);
    return {};
  });
  server.server.setRequestHandler('resources/unsubscribe', async (request) => {
    scope.subscribed.delete(request.params.uri);
    return {};
  });
}

function registerPrompts(server: McpServer): void {
  const user = (content: PromptMessage['content']) => ({ role: 'user' as const, content });
  server.registerPrompt('test_simple_prompt', { description: 'A prompt without arguments' }, () => ({
    messages: [user({ type: 'text', text: 'This is a simple prompt for testing.' })],
  }));
  server.registerPrompt(
    'test_prompt_with_arguments',
    {
      description: 'A prompt with two arguments',
      argsSchema: z.object({
        arg1: completable(z.string(), (value) => ['paris', 'park', 'party', 'test'].filter((word) => word.startsWith(value))),
        arg2: z.string(),
      }),
    },
    ({ arg1, arg2 }) => ({ messages: [user({ type: 'text', text: `Prompt with arguments: arg1='${arg1}', arg2='${arg2}'` })] }),
  );
  server.registerPrompt(
    'test_prompt_with_embedded_resource',
    { description: 'A prompt that embeds a resource', argsSchema: z.object({ resourceUri: z.string() }) },
    ({ resourceUri }) => ({
      messages: [
        user({ type: 'resource', resource: { uri: resourceUri, mimeType: 'text/plain', text: 'Embedded resource content for testing.' } }),
        user({ type: 'text', text: 'Please process the embedded resource above.' }),
      ],
    }),
  );
  server.registerPrompt('test_prompt_with_image', { description: 'A prompt with an image' }, () => ({
    messages: [user({ type: 'image', data: PNG, mimeType: 'image/png' }), user({ type: 'text', text: 'Please analyze the image above.' })],
  }));
}
