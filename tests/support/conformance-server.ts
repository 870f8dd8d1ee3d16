/**
 * The reference upstream for the official MCP conformance suite's server scenarios
 * (`@modelcontextprotocol/conformance`, `conformance list --server`): an SDK-built server,
 * stateful Streamable HTTP on a loopback port, offering the tools, resources, prompts,
 * completions, logging and subscriptions each scenario names, and refusing a Host or Origin
 * that is not loopback (the dns-rebinding-protection scenario). Like the suite's reference
 * server, it asks questions both inside a call (sampling, test_elicitation) and outside any
 * (the SEP elicitation tools, on the session's GET stream).
 */
import { randomUUID } from 'node:crypto';
import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { completable } from '@modelcontextprotocol/sdk/server/completable.js';
import { McpServer, ResourceTemplate } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import type { RequestHandlerExtra } from '@modelcontextprotocol/sdk/shared/protocol.js';
import {
  CreateMessageResultSchema,
  ElicitResultSchema,
  type ServerNotification,
  type ServerRequest,
  SubscribeRequestSchema,
  UnsubscribeRequestSchema,
} from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import { readJson } from './mcp-server.ts';

export interface ConformanceUpstream {
  url: string;
  /** Every JSON-RPC method POSTed, in order. */
  methods: () => string[];
  /** URIs currently subscribed to, over all sessions. */
  subscriptions: () => string[];
  close: () => Promise<void>;
}

/** A 1×1 PNG and a 44-byte silent WAV, base64. */
const PNG = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==';
const WAV = Buffer.concat([
  Buffer.from('RIFF'),
  Buffer.from([36, 0, 0, 0]),
  Buffer.from('WAVEfmt '),
  Buffer.from([16, 0, 0, 0, 1, 0, 1, 0, 0x40, 0x1f, 0, 0, 0x80, 0x3e, 0, 0, 2, 0, 16, 0]),
  Buffer.from('data'),
  Buffer.from([0, 0, 0, 0]),
]).toString('base64');

const LOOPBACK = /^(localhost|127\.\d+\.\d+\.\d+|\[::1\])(:\d+)?$/i;
const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function buildServer(subscribed: Set<string>): McpServer {
  const server = new McpServer(
    { name: 'conformance-upstream', version: '1.0.0' },
    { capabilities: { logging: {}, completions: {}, resources: { subscribe: true, listChanged: true } } },
  );
  const text = (value: string) => ({ content: [{ type: 'text' as const, text: value }] });

  server.registerTool('test_simple_text', { description: 'Answers a line of text' }, async () =>
    text('This is a simple text response for testing.'),
  );
  server.registerTool('test_image_content', { description: 'Answers an image' }, async () => ({
    content: [{ type: 'image', data: PNG, mimeType: 'image/png' }],
  }));
  server.registerTool('test_audio_content', { description: 'Answers a sound' }, async () => ({
    content: [{ type: 'audio', data: WAV, mimeType: 'audio/wav' }],
  }));
  server.registerTool('test_embedded_resource', { description: 'Answers an embedded resource' }, async () => ({
    content: [
      {
        type: 'resource',
        resource: { uri: 'test://embedded-resource', mimeType: 'text/plain', text: 'This is an embedded resource content.' },
      },
    ],
  }));
  server.registerTool('test_multiple_content_types', { description: 'Answers text, an image and a resource' }, async () => ({
    content: [
      { type: 'text', text: 'Multiple content types test:' },
      { type: 'image', data: PNG, mimeType: 'image/png' },
      {
        type: 'resource',
        resource: { uri: 'test://mixed-content-resource', mimeType: 'application/json', text: '{"test":"data","value":123}' },
      },
    ],
  }));
  server.registerTool('test_tool_with_logging', { description: 'Logs three lines while it runs' }, async (extra) => {
    const log = (data: string) =>
      extra.sendNotification({ method: 'notifications/message', params: { level: 'info', data } } as ServerNotification);
    await log('Tool execution started');
    await pause(50);
    await log('Tool processing data');
    await pause(50);
    await log('Tool execution completed');
    return text('Logged three messages');
  });
  server.registerTool('test_error_handling', { description: 'Always fails' }, async () => {
    throw new Error('This tool intentionally returns an error for testing');
  });
  server.registerTool('test_tool_with_progress', { description: 'Reports progress 0, 50, 100 of 100' }, async (extra) => {
    const token = extra._meta?.progressToken;
    for (const progress of [0, 50, 100]) {
      if (token !== undefined)
        await extra.sendNotification({ method: 'notifications/progress', params: { progressToken: token, progress, total: 100 } });
      if (progress < 100) await pause(50);
    }
    return text('Progress reported');
  });
  server.registerTool(
    'test_sampling',
    { description: 'Asks the client to sample', inputSchema: { prompt: z.string() } },
    async ({ prompt }, extra) => {
      const answer = await extra.sendRequest(
        {
          method: 'sampling/createMessage',
          params: { messages: [{ role: 'user', content: { type: 'text', text: prompt } }], maxTokens: 100 },
        },
        CreateMessageResultSchema,
      );
      return text(`LLM response: ${answer.content.type === 'text' ? answer.content.text : answer.content.type}`);
    },
  );
  // test_elicitation asks inside the call (extra.sendRequest: on the call's stream); the SEP
  // tools ask outside it, as the suite's own reference server does (server.request: on the
  // session's GET stream). Real servers do both.
  const elicit = async (
    extra: RequestHandlerExtra<ServerRequest, ServerNotification> | 'outside',
    message: string,
    requestedSchema: unknown,
  ) => {
    const request = { method: 'elicitation/create', params: { message, requestedSchema } } as ServerRequest;
    const answer =
      extra === 'outside' ? await server.server.request(request, ElicitResultSchema) : await extra.sendRequest(request, ElicitResultSchema);
    return `action=${answer.action}, content=${JSON.stringify(answer.content ?? {})}`;
  };
  server.registerTool(
    'test_elicitation',
    { description: 'Asks the user for a name and an address', inputSchema: { message: z.string() } },
    async ({ message }, extra) =>
      text(
        `User response: ${await elicit(extra, message, {
          type: 'object',
          properties: {
            username: { type: 'string', description: "User's response" },
            email: { type: 'string', description: "User's email address" },
          },
          required: ['username', 'email'],
        })}`,
      ),
  );
  server.registerTool('test_elicitation_sep1034_defaults', { description: 'Elicits with defaults of every type' }, async () =>
    text(
      `Elicitation completed: ${await elicit('outside', 'Confirm your details', {
        type: 'object',
        properties: {
          name: { type: 'string', default: 'John Doe' },
          age: { type: 'integer', default: 30 },
          score: { type: 'number', default: 95.5 },
          status: { type: 'string', enum: ['active', 'inactive', 'pending'], default: 'active' },
          verified: { type: 'boolean', default: true },
        },
      })}`,
    ),
  );
  server.registerTool('test_elicitation_sep1330_enums', { description: 'Elicits with every kind of enum' }, async () =>
    text(
      `Elicitation completed: ${await elicit('outside', 'Choose', {
        type: 'object',
        properties: {
          untitledSingle: { type: 'string', enum: ['option1', 'option2', 'option3'] },
          titledSingle: {
            type: 'string',
            oneOf: [
              { const: 'value1', title: 'First Option' },
              { const: 'value2', title: 'Second Option' },
              { const: 'value3', title: 'Third Option' },
            ],
          },
          legacyEnum: { type: 'string', enum: ['opt1', 'opt2', 'opt3'], enumNames: ['Option One', 'Option Two', 'Option Three'] },
          untitledMulti: { type: 'array', items: { type: 'string', enum: ['option1', 'option2', 'option3'] } },
          titledMulti: {
            type: 'array',
            items: {
              anyOf: [
                { const: 'value1', title: 'First Choice' },
                { const: 'value2', title: 'Second Choice' },
                { const: 'value3', title: 'Third Choice' },
              ],
            },
          },
        },
      })}`,
    ),
  );

  server.registerResource('static-text', 'test://static-text', { description: 'A text', mimeType: 'text/plain' }, async (uri) => ({
    contents: [{ uri: uri.href, mimeType: 'text/plain', text: 'This is the content of the static text resource.' }],
  }));
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
  server.server.setRequestHandler(SubscribeRequestSchema, async (request) => {
    subscribed.add(request.params.uri);
    return {};
  });
  server.server.setRequestHandler(UnsubscribeRequestSchema, async (request) => {
    subscribed.delete(request.params.uri);
    return {};
  });

  const user = (content: Record<string, unknown>) => ({ role: 'user' as const, content: content as never });
  server.registerPrompt('test_simple_prompt', { description: 'A prompt without arguments' }, () => ({
    messages: [user({ type: 'text', text: 'This is a simple prompt for testing.' })],
  }));
  server.registerPrompt(
    'test_prompt_with_arguments',
    {
      description: 'A prompt with two arguments',
      argsSchema: {
        arg1: completable(z.string(), (value) => ['paris', 'park', 'party', 'test'].filter((word) => word.startsWith(value))),
        arg2: z.string(),
      },
    },
    ({ arg1, arg2 }) => ({ messages: [user({ type: 'text', text: `Prompt with arguments: arg1='${arg1}', arg2='${arg2}'` })] }),
  );
  server.registerPrompt(
    'test_prompt_with_embedded_resource',
    { description: 'A prompt that embeds a resource', argsSchema: { resourceUri: z.string() } },
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
  return server;
}

export async function startConformanceUpstream(): Promise<ConformanceUpstream> {
  const transports = new Map<string, StreamableHTTPServerTransport>();
  const subscribed = new Set<string>();
  const methods: string[] = [];
  const refuse = (res: ServerResponse, status: number, message: string) =>
    res
      .writeHead(status, { 'content-type': 'application/json' })
      .end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32000, message }, id: null }));
  const http: Server = createServer(async (req, res) => {
    try {
      // DNS rebinding: a page of another name that resolves to this address is refused
      const origin = req.headers.origin;
      if (!LOOPBACK.test(req.headers.host ?? '') || (origin !== undefined && !LOOPBACK.test(origin.replace(/^https?:\/\//, ''))))
        return refuse(res, 403, 'Host or Origin not allowed');
      const sessionId = req.headers['mcp-session-id'] as string | undefined;
      const body = req.method === 'POST' ? await readJson(req) : undefined;
      for (const message of (Array.isArray(body) ? body : [body]) as ({ method?: unknown } | undefined)[])
        if (typeof message?.method === 'string') methods.push(message.method);
      let transport = sessionId ? transports.get(sessionId) : undefined;
      if (!transport) {
        if (sessionId) return refuse(res, 404, 'Session not found');
        const created = new StreamableHTTPServerTransport({
          sessionIdGenerator: () => randomUUID(),
          onsessioninitialized: (id) => {
            transports.set(id, created);
          },
        });
        created.onclose = () => {
          if (created.sessionId) transports.delete(created.sessionId);
        };
        await buildServer(subscribed).connect(created);
        transport = created;
      }
      await transport.handleRequest(req, res, body);
    } catch (error) {
      if (!res.headersSent) res.writeHead(500).end(String(error));
    }
  });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  const { port } = http.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    methods: () => [...methods],
    subscriptions: () => [...subscribed],
    close: async () => {
      for (const t of transports.values()) await t.close().catch(() => undefined);
      http.closeAllConnections();
      await new Promise<void>((resolve) => http.close(() => resolve()));
    },
  };
}
