/**
 * The gateway's plain tools/call (plain-tool-call.ts), answered without the SDK's server, for
 * both eras: run by GatewayMethods.callTool as any call; a 2025 client's answer as JSON, or as
 * an SSE stream once the upstream sends something meanwhile (log messages, questions), and
 * polled when its upstream polls (polled-streams.ts); a 2026-07-28 client's through input rounds
 * (input-rounds.ts), stamped as the revision asks.
 */
import type { ServerResponse } from 'node:http';
import { McpError } from '@modelcontextprotocol/sdk/types.js';
import { isObject } from '../../shared/objects.ts';
import type { McpTarget } from '../execution/mcp-dialer.ts';
import { type Extra, type GatewayCaller, serverInfo } from './gateway-answers.ts';
import type { GatewayMethods } from './gateway-methods.ts';
import { sseEvent } from './gateway-sessions.ts';
import { type InputRounds, MISSING_CAPABILITY } from './input-rounds.ts';
import { elicitsUrls } from './modern.ts';
import { type PlainToolCall, toolCallAnswer } from './plain-tool-call.ts';
import type { PolledStream, PolledStreams } from './polled-streams.ts';
import type { Questions } from './relay.ts';

/** A tool call's result as revision 2026-07-28 has it: its `resultType`, and the server's identity in `_meta`. */
const modernResult = (result: Record<string, unknown>, single: McpTarget | null) => ({
  ...result,
  resultType: result.resultType ?? 'complete',
  _meta: { ...(isObject(result._meta) ? result._meta : {}), 'io.modelcontextprotocol/serverInfo': serverInfo(single) },
});

/** Where a plain call is answered: for whom, on which endpoint, and whether its client can be told to poll. */
export interface PlainCallAt {
  caller: GatewayCaller;
  single: McpTarget | null;
  origin: string;
  polls?: boolean;
}

export class PlainCalls {
  constructor(
    private readonly methods: GatewayMethods,
    private readonly questions: Questions,
    private readonly rounds: InputRounds,
    private readonly polled: PolledStreams,
  ) {}

  /**
   * A plain tools/call (plain-tool-call.ts), answered as the SDK's server answers it: run by
   * callTool as any call, and cancelled (its signal aborted) when the client goes away.
   */
  async answer(
    where: PlainCallAt,
    plain: PlainToolCall,
    res: ServerResponse,
    /** A 2026-07-28 call (with the capabilities it declared): its questions are answered in input rounds, its result is stamped as the revision asks. */
    modern?: Record<string, unknown>,
  ): Promise<void> {
    const cancelled = new AbortController();
    let answered = false;
    // only a call still running is cancelled: the SDK client keeps its abort listener after
    // the upstream answered, and would tell the upstream to cancel a request it had finished
    res.once('close', () => {
      // a client told to poll comes back for the answer
      if (!answered && !polling) cancelled.abort();
    });
    // no progress was asked for; what the upstream sends meanwhile (log messages, questions) turns the answer into an SSE stream
    let streaming = false;
    const startStream = () => {
      if (!streaming) res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      streaming = true;
    };
    /** Set once the upstream polled: the client's stream was closed, the rest goes where its resuming GET reads it. */
    let polling: PolledStream | undefined;
    const stream = (message: string) => {
      if (answered || cancelled.signal.aborted) return;
      if (polling) return polling.write(message);
      startStream();
      res.write(sseEvent(message));
    };
    const polled = () => {
      if (polling || answered || cancelled.signal.aborted) return;
      polling = this.polled.open(where.caller.client?.id as string, where.caller.agent.id);
      startStream();
      res.end(polling.priming);
    };
    let answer: string;
    let status = 200;
    try {
      const { target, name } = await this.methods.route(where.caller, where.single, plain.name);
      const call = (extra: Extra) =>
        this.methods.callTool({
          caller: where.caller,
          target,
          tool: name,
          args: plain.args,
          extra,
          origin: where.origin,
          aggregate: where.single === null,
        });
      if (modern === undefined)
        answer = toolCallAnswer(plain.id, {
          result: await call({
            signal: cancelled.signal,
            ...(plain.meta ? { _meta: plain.meta } : {}),
            sendNotification: async (notification) => stream(JSON.stringify({ jsonrpc: '2.0', ...notification })),
            ask: (request, signal, decide) => decide(() => this.questions.ask(where.caller.agent.id, request, signal, stream)),
            ...(where.polls ? { polled } : {}),
          }),
        });
      else {
        const asked = { agentId: where.caller.agent.id, method: 'tools/call', params: { name: plain.name, arguments: plain.args } };
        const result = await this.rounds.serve({ ...asked, capabilities: modern, signal: cancelled.signal }, (ask, signal) =>
          call({ signal, sendNotification: async () => undefined, handBack: elicitsUrls(modern), ask }),
        );
        answer = toolCallAnswer(plain.id, { result: modernResult(result as Record<string, unknown>, where.single) });
      }
    } catch (error) {
      // a request that needs a capability the client did not declare is a bad request (revision 2026-07-28)
      if (error instanceof McpError && error.code === MISSING_CAPABILITY) status = 400;
      answer = toolCallAnswer(plain.id, { error });
    }
    answered = true;
    if (polling) return polling.end(answer, plain.id);
    if (cancelled.signal.aborted) return;
    if (streaming) res.end(sseEvent(answer));
    else res.writeHead(status, { 'content-type': 'application/json' }).end(answer);
  }
}
