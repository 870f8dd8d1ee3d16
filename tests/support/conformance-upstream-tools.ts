/**
 * The conformance upstream's tools (conformance-upstream-server.ts registers them on every
 * instance, of either era).
 *
 * Questions to the client: a handler returns `inputRequired(...)` and reads the answers on
 * re-entry; on the 2026-07-28 era the client answers in-band, on a 2025 session the SDK's legacy
 * shim sends them as real server→client requests on the call's own stream. Like the suite's own
 * reference server, the SEP elicitation tools instead ask outside any request on a 2025 session
 * (`server.server.request`, which the transport sends on the session's GET stream).
 */

import {
  type ElicitRequestFormParams,
  fromJsonSchema,
  inputRequired,
  inputResponse,
  type JsonSchemaType,
  type McpServer,
} from '@modelcontextprotocol/server';
import { z } from 'zod';
import type { UpstreamScope } from './conformance-upstream-server.ts';

/** A 1×1 PNG and a 44-byte silent WAV, base64. */
export const PNG = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==';
const WAV = Buffer.concat([
  Buffer.from('RIFF'),
  Buffer.from([36, 0, 0, 0]),
  Buffer.from('WAVEfmt '),
  Buffer.from([16, 0, 0, 0, 1, 0, 1, 0, 0x40, 0x1f, 0, 0, 0x80, 0x3e, 0, 0, 2, 0, 16, 0]),
  Buffer.from('data'),
  Buffer.from([0, 0, 0, 0]),
]).toString('base64');

export const text = (value: string, isError?: true) => ({ content: [{ type: 'text' as const, text: value }], ...(isError && { isError }) });
const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
export const noArguments = z.object({});

export function registerContentTools(server: McpServer): void {
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
  server.registerTool('test_error_handling', { description: 'Always fails' }, async () => {
    throw new Error('This tool intentionally returns an error for testing');
  });
  server.registerTool(
    'test_tool_with_logging',
    { description: 'Logs three lines while it runs', inputSchema: noArguments },
    async (_args, ctx) => {
      for (const [index, data] of ['Tool execution started', 'Tool processing data', 'Tool execution completed'].entries()) {
        if (index > 0) await pause(50);
        await ctx.mcpReq.notify({ method: 'notifications/message', params: { level: 'info', data } });
      }
      return text('Logged three messages');
    },
  );
  server.registerTool(
    'test_tool_with_progress',
    { description: 'Reports progress 0, 50, 100 of 100', inputSchema: noArguments },
    async (_args, ctx) => {
      const progressToken = ctx.mcpReq._meta?.progressToken;
      for (const progress of [0, 50, 100]) {
        // progress only for a client that asked for it with a token
        if (progressToken !== undefined)
          await ctx.mcpReq.notify({ method: 'notifications/progress', params: { progressToken, progress, total: 100 } });
        if (progress < 100) await pause(50);
      }
      return text('Progress reported');
    },
  );
}

const SEP1034_DEFAULTS: ElicitRequestFormParams = {
  message: 'Confirm your details',
  requestedSchema: {
    type: 'object',
    properties: {
      name: { type: 'string', default: 'John Doe' },
      age: { type: 'integer', default: 30 },
      score: { type: 'number', default: 95.5 },
      status: { type: 'string', enum: ['active', 'inactive', 'pending'], default: 'active' },
      verified: { type: 'boolean', default: true },
    },
  },
};

const SEP1330_ENUMS: ElicitRequestFormParams = {
  message: 'Choose',
  requestedSchema: {
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
  },
};

export function registerQuestionTools(server: McpServer, scope: UpstreamScope): void {
  server.registerTool(
    'test_sampling',
    { description: 'Asks the client to sample', inputSchema: z.object({ prompt: z.string() }) },
    async ({ prompt }, ctx) => {
      const answer = inputResponse(ctx.mcpReq.inputResponses, 'completion');
      if (answer.kind !== 'sampling')
        return inputRequired({
          inputRequests: {
            completion: inputRequired.createMessage({
              messages: [{ role: 'user', content: { type: 'text', text: prompt } }],
              maxTokens: 100,
            }),
          },
        });
      const content = answer.result.content;
      const block = Array.isArray(content) ? content[0] : content;
      return text(`LLM response: ${block?.type === 'text' ? block.text : block?.type}`);
    },
  );
  server.registerTool(
    'test_elicitation',
    { description: 'Asks the user for a name and an address', inputSchema: z.object({ message: z.string() }) },
    async ({ message }, ctx) => {
      const answer = inputResponse(ctx.mcpReq.inputResponses, 'user');
      if (answer.kind !== 'elicit')
        return inputRequired({
          inputRequests: {
            user: inputRequired.elicit({
              message,
              requestedSchema: {
                type: 'object',
                properties: {
                  username: { type: 'string', description: "User's response" },
                  email: { type: 'string', description: "User's email address" },
                },
                required: ['username', 'email'],
              },
            }),
          },
        });
      return text(`User response: action=${answer.action}, content=${JSON.stringify(answer.content ?? {})}`);
    },
  );
  // A 2025 session is asked outside the call, on its GET stream; a 2026-07-28 request in-band.
  const elicitOutsideTheCall = (name: string, description: string, params: ElicitRequestFormParams) =>
    server.registerTool(name, { description, inputSchema: noArguments }, async (_args, ctx) => {
      if (scope.era === 'legacy') {
        const answer = await server.server.request({ method: 'elicitation/create', params });
        return text(`Elicitation completed: action=${answer.action}, content=${JSON.stringify(answer.content ?? {})}`);
      }
      const answer = inputResponse(ctx.mcpReq.inputResponses, 'form');
      if (answer.kind !== 'elicit') return inputRequired({ inputRequests: { form: inputRequired.elicit(params) } });
      return text(`Elicitation completed: action=${answer.action}, content=${JSON.stringify(answer.content ?? {})}`);
    });
  elicitOutsideTheCall('test_elicitation_sep1034_defaults', 'Elicits with defaults of every type', SEP1034_DEFAULTS);
  elicitOutsideTheCall('test_elicitation_sep1330_enums', 'Elicits with every kind of enum', SEP1330_ENUMS);
}

/** An argument the client mirrors into an `Mcp-Param-<header>` header (SEP-2243). */
const mirrored = (type: 'string' | 'integer' | 'boolean', header: string) =>
  // `x-mcp-header` is an MCP keyword the JSON Schema type does not know
  ({ type, description: `Mirrored as Mcp-Param-${header}`, 'x-mcp-header': header }) as JsonSchemaType;

const CUSTOM_HEADERS_SCHEMA: JsonSchemaType = {
  type: 'object',
  properties: {
    region: mirrored('string', 'Region'),
    priority: mirrored('integer', 'Priority'),
    verbose: mirrored('boolean', 'Verbose'),
    query: { type: 'string', description: 'Not mirrored' },
  },
  required: ['region', 'priority', 'query'],
};

/** SEP-1613 / SEP-2106: 2020-12 keywords that tools/list must carry verbatim. */
const JSON_SCHEMA_2020_12: JsonSchemaType = {
  $schema: 'https://json-schema.org/draft/2020-12/schema',
  type: 'object',
  $defs: {
    address: {
      $anchor: 'addressDef',
      type: 'object',
      properties: { street: { type: 'string' }, city: { type: 'string' } },
    },
  },
  properties: {
    name: { type: 'string' },
    address: { $ref: '#/$defs/address' },
    contactMethod: { type: 'string', enum: ['phone', 'email'] },
    phone: { type: 'string' },
    email: { type: 'string' },
  },
  allOf: [{ anyOf: [{ required: ['phone'] }, { required: ['email'] }] }],
  if: { properties: { contactMethod: { const: 'phone' } }, required: ['contactMethod'] },
  // biome-ignore lint/suspicious/noThenProperty: `then` is a JSON Schema keyword
  then: { required: ['phone'] },
  else: { required: ['email'] },
  additionalProperties: false,
};

export function registerDiagnosticTools(server: McpServer, scope: UpstreamScope): void {
  server.registerTool(
    'test_reconnection',
    { description: 'Closes its SSE stream mid-call; the answer arrives on the resumed stream (SEP-1699)', inputSchema: noArguments },
    async (_args, ctx) => {
      ctx.http?.closeSSE?.();
      await pause(100);
      return text('Reconnection test completed: the answer was replayed on the resumed stream.');
    },
  );
  server.registerTool(
    'test_custom_headers',
    { description: 'Arguments mirrored into Mcp-Param-* headers', inputSchema: fromJsonSchema(CUSTOM_HEADERS_SCHEMA) },
    async (args) => text(`custom headers: ${JSON.stringify(args)}`),
  );
  server.registerTool(
    'test_custom_headers_null',
    {
      description: 'Mirrored arguments that may be left out',
      inputSchema: fromJsonSchema({ ...CUSTOM_HEADERS_SCHEMA, required: ['query'] }),
    },
    async (args) => text(`custom headers: ${JSON.stringify(args)}`),
  );
  server.registerTool(
    'json_schema_2020_12_tool',
    { description: 'Takes a JSON Schema 2020-12 input', inputSchema: fromJsonSchema(JSON_SCHEMA_2020_12) },
    async (args) => text(`JSON Schema 2020-12 tool called with: ${JSON.stringify(args)}`),
  );
  // SEP-2575 (server-stateless) diagnostics, by the names the scenario calls
  server.registerTool(
    'test_missing_capability',
    { description: 'Needs the sampling capability: a client without it is refused (-32021)', inputSchema: noArguments },
    async (_args, ctx) => {
      if (inputResponse(ctx.mcpReq.inputResponses, 'pong').kind === 'sampling') return text('sampling round trip complete');
      return inputRequired({
        inputRequests: {
          pong: inputRequired.createMessage({
            messages: [{ role: 'user', content: { type: 'text', text: 'Reply with the single word: pong' } }],
            maxTokens: 16,
          }),
        },
      });
    },
  );
  server.registerTool(
    'test_streaming_elicitation',
    { description: 'Its response stream carries no request of its own', inputSchema: noArguments },
    async () => text('result frames only'),
  );
  server.registerTool(
    'test_logging_tool',
    { description: 'Logs only when the request set _meta logLevel', inputSchema: noArguments },
    async (_args, ctx) => {
      await ctx.mcpReq.log('info', 'test_logging_tool ran');
      return text('logged through the request-scoped channel');
    },
  );
  server.registerTool(
    'test_trigger_tool_change',
    { description: 'Announces that the tool list changed', inputSchema: noArguments },
    async () => {
      if (scope.era === 'legacy') server.sendToolListChanged();
      else scope.notify()?.toolsChanged();
      return text('tools list_changed sent');
    },
  );
  server.registerTool(
    'test_trigger_prompt_change',
    { description: 'Announces that the prompt list changed', inputSchema: noArguments },
    async () => {
      if (scope.era === 'legacy') server.sendPromptListChanged();
      else scope.notify()?.promptsChanged();
      return text('prompts list_changed sent');
    },
  );
}
