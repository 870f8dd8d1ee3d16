/**
 * The conformance upstream's multi-round-trip registrations (SEP-2322): tools and a prompt that
 * return `inputRequired(...)` until the retried request carries the answers they asked for, by the
 * input keys the input-required-result-* scenarios expect. Written once for both eras: a
 * 2026-07-28 client answers in-band; on a 2025 session the SDK's legacy shim asks with real
 * server→client requests and re-enters the handler itself. requestState is sealed with the
 * upstream's codec and verified by the server before a handler sees it.
 */
import { randomUUID } from 'node:crypto';
import {
  acceptedContent,
  CLIENT_CAPABILITIES_META_KEY,
  type ClientCapabilities,
  type ElicitRequestFormParams,
  type InputRequests,
  inputRequired,
  inputResponse,
  type McpServer,
} from '@modelcontextprotocol/server';
import type { UpstreamScope } from './conformance-upstream-server.ts';
import { noArguments, text } from './conformance-upstream-tools.ts';

/** A form asking for one string field. */
const askFor = (message: string, field: string): ElicitRequestFormParams => ({
  message,
  requestedSchema: { type: 'object', properties: { [field]: { type: 'string' } }, required: [field] },
});
const CONFIRM: ElicitRequestFormParams = {
  message: 'Please confirm',
  requestedSchema: { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'] },
};
const askSampling = (prompt: string, maxTokens: number) =>
  inputRequired.createMessage({ messages: [{ role: 'user', content: { type: 'text', text: prompt } }], maxTokens });

export function registerInputRequiredTools(server: McpServer, scope: UpstreamScope): void {
  const seal = (payload: Record<string, unknown>) => scope.codec.mint({ ...payload, nonce: randomUUID() });

  server.registerTool(
    'test_input_required_result_elicitation',
    { description: 'Asks for the caller name (elicitation)', inputSchema: noArguments },
    async (_args, ctx) => {
      const name = acceptedContent<{ name?: unknown }>(ctx.mcpReq.inputResponses, 'user_name')?.name;
      // anything but an accepted name, including a wrong key, is asked again
      if (typeof name !== 'string')
        return inputRequired({ inputRequests: { user_name: inputRequired.elicit(askFor('What is your name?', 'name')) } });
      return text(`Hello, ${name}!`);
    },
  );
  server.registerTool(
    'test_input_required_result_sampling',
    { description: 'Asks the client for a completion (sampling)', inputSchema: noArguments },
    async (_args, ctx) => {
      const answer = inputResponse(ctx.mcpReq.inputResponses, 'capital_question');
      if (answer.kind !== 'sampling')
        return inputRequired({ inputRequests: { capital_question: askSampling('What is the capital of France?', 100) } });
      const block = Array.isArray(answer.result.content) ? answer.result.content[0] : answer.result.content;
      return text(`Sampling response: ${block?.type === 'text' ? block.text : block?.type}`);
    },
  );
  server.registerTool(
    'test_input_required_result_list_roots',
    { description: 'Asks the client for its roots (roots/list)', inputSchema: noArguments },
    async (_args, ctx) => {
      const answer = inputResponse(ctx.mcpReq.inputResponses, 'client_roots');
      if (answer.kind !== 'roots') return inputRequired({ inputRequests: { client_roots: inputRequired.listRoots() } });
      return text(`Client exposed ${answer.roots.length} root(s): ${answer.roots.map((root) => root.uri).join(', ')}`);
    },
  );
  server.registerTool(
    'test_input_required_result_request_state',
    { description: 'Asks for a confirmation and round-trips sealed requestState', inputSchema: noArguments },
    async (_args, ctx) => {
      const state = ctx.mcpReq.requestState<Record<string, unknown>>();
      if (state?.tool === 'request_state' && acceptedContent(ctx.mcpReq.inputResponses, 'confirm') !== undefined)
        return text('state-ok: requestState verified and confirmation received');
      return inputRequired({
        inputRequests: { confirm: inputRequired.elicit(CONFIRM) },
        requestState: await seal({ tool: 'request_state' }),
      });
    },
  );
  server.registerTool(
    'test_input_required_result_multiple_inputs',
    { description: 'Asks for an elicitation, a completion and the roots in one round', inputSchema: noArguments },
    async (_args, ctx) => {
      const responses = ctx.mcpReq.inputResponses;
      const name = acceptedContent<{ name?: unknown }>(responses, 'user_name')?.name;
      const greeting = inputResponse(responses, 'greeting');
      const roots = inputResponse(responses, 'client_roots');
      if (typeof name === 'string' && greeting.kind === 'sampling' && roots.kind === 'roots')
        return text(`Hello ${name}: ${roots.roots.length} root(s) visible`);
      return inputRequired({
        inputRequests: {
          user_name: inputRequired.elicit(askFor('What is your name?', 'name')),
          greeting: askSampling('Generate a greeting', 50),
          client_roots: inputRequired.listRoots(),
        },
        requestState: await seal({ tool: 'multiple_inputs' }),
      });
    },
  );
  server.registerTool(
    'test_input_required_result_multi_round',
    { description: 'Two elicitation rounds, the round kept in sealed requestState', inputSchema: noArguments },
    async (_args, ctx) => {
      const state = ctx.mcpReq.requestState<Record<string, unknown>>();
      const round = state?.tool === 'multi_round' && typeof state.round === 'number' ? state.round : 0;
      if (round === 0)
        return inputRequired({
          inputRequests: { step1: inputRequired.elicit(askFor('Step 1: What is your name?', 'name')) },
          requestState: await seal({ tool: 'multi_round', round: 1 }),
        });
      if (round === 1) {
        const name = acceptedContent<{ name?: unknown }>(ctx.mcpReq.inputResponses, 'step1')?.name;
        return inputRequired({
          inputRequests: { step2: inputRequired.elicit(askFor('Step 2: What is your favorite color?', 'color')) },
          requestState: await seal({ tool: 'multi_round', round: 2, name: typeof name === 'string' ? name : 'unknown' }),
        });
      }
      const color = acceptedContent<{ color?: unknown }>(ctx.mcpReq.inputResponses, 'step2')?.color;
      return text(`Multi-round complete: ${String(state?.name)} likes ${typeof color === 'string' ? color : 'unknown'}`);
    },
  );
  // A forged requestState never reaches this handler: the server's verify hook answers -32602.
  server.registerTool(
    'test_input_required_result_tampered_state',
    { description: 'Refuses a retry whose requestState fails verification', inputSchema: noArguments },
    async (_args, ctx) => {
      if (ctx.mcpReq.requestState() !== undefined && acceptedContent(ctx.mcpReq.inputResponses, 'confirm') !== undefined)
        return text('integrity-ok: requestState verified');
      return inputRequired({
        inputRequests: { confirm: inputRequired.elicit(CONFIRM) },
        requestState: await seal({ tool: 'tampered_state' }),
      });
    },
  );
  server.registerTool(
    'test_input_required_result_capabilities',
    { description: 'Asks only for the kinds of input the client declared', inputSchema: noArguments },
    async (_args, ctx) => {
      if (ctx.mcpReq.inputResponses !== undefined) return text('Capability-aware input requests fulfilled');
      // 2026-07-28: the request's own envelope; 2025: what the session's initialize declared
      const envelope = ctx.mcpReq.envelope as Record<string, ClientCapabilities | undefined> | undefined;
      const declared = envelope?.[CLIENT_CAPABILITIES_META_KEY] ?? server.server.getClientCapabilities() ?? {};
      const inputRequests: InputRequests = {};
      if (declared.elicitation) inputRequests.user_name = inputRequired.elicit(askFor('What is your name?', 'name'));
      if (declared.sampling) inputRequests.greeting = askSampling('Generate a short greeting', 50);
      if (declared.roots) inputRequests.client_roots = inputRequired.listRoots();
      if (Object.keys(inputRequests).length === 0) return text('The client declared no capability to answer with');
      return inputRequired({ inputRequests });
    },
  );

  // The client-side MRTR mock's tools (conformance mrtr-client scenarios), so a client under
  // test, or a gateway in front of this upstream, can be driven through the same flows.
  server.registerTool(
    'test_mrtr_echo_state',
    { description: 'MRTR with requestState: the client must echo it back unchanged', inputSchema: noArguments },
    async (_args, ctx) => {
      if (ctx.mcpReq.inputResponses === undefined)
        return inputRequired({
          inputRequests: { confirm: inputRequired.elicit(CONFIRM) },
          requestState: await seal({ tool: 'echo_state' }),
        });
      if (ctx.mcpReq.requestState<Record<string, unknown>>()?.tool !== 'echo_state') return text('requestState was not echoed back', true);
      return text('echo-state-ok');
    },
  );
  server.registerTool(
    'test_mrtr_no_state',
    { description: 'MRTR without requestState: the client must not send one', inputSchema: noArguments },
    async (_args, ctx) => {
      if (ctx.mcpReq.inputResponses === undefined) return inputRequired({ inputRequests: { confirm: inputRequired.elicit(CONFIRM) } });
      if (ctx.mcpReq.requestState() !== undefined) return text('the retry carried a requestState nobody sent', true);
      return text('no-state-ok');
    },
  );
  server.registerTool(
    'test_mrtr_unrelated',
    { description: 'A plain call between MRTR rounds: it must carry no inputResponses or requestState', inputSchema: noArguments },
    async (_args, ctx) => {
      if (ctx.mcpReq.inputResponses !== undefined || ctx.mcpReq.requestState() !== undefined)
        return text('an unrelated call carried another flow’s inputResponses or requestState', true);
      return text('unrelated-ok');
    },
  );
  // The SDK stamps resultType on every 2026-07-28 result; this one is just plainly complete.
  server.registerTool('test_mrtr_no_result_type', { description: 'A complete result', inputSchema: noArguments }, async () =>
    text('no-result-type-ok'),
  );

  server.registerPrompt('test_input_required_result_prompt', { description: 'Asks for context before it renders' }, async (ctx) => {
    const context = acceptedContent<{ context?: unknown }>(ctx.mcpReq.inputResponses, 'user_context')?.context;
    if (typeof context !== 'string')
      return inputRequired({
        inputRequests: { user_context: inputRequired.elicit(askFor('What context should the prompt use?', 'context')) },
      });
    return { messages: [{ role: 'user', content: { type: 'text', text: `Use the following context: ${context}` } }] };
  });
}
