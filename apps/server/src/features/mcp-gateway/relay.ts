/**
 * What an upstream sends during one of Warden's requests, relayed to the client on that
 * request's own stream: its log messages (`notifications/message`), and what it asks of the
 * client (`sampling/createMessage`, `elicitation/create`, `roots/list`), whose answer the client
 * POSTs back, to this process or any other (McpClientSessions routes it).
 *
 * Upstream sessions are pooled and shared by concurrent calls, and the SDK client hands every
 * message to one handler per session, without saying which request's stream it came on.
 * The stream is read in the async context of the request that opened it (the transport's send,
 * called from the request), so an AsyncLocalStorage entered around the upstream request tells
 * the handler whose it is. The session's own GET stream is opened outside any such scope (by the
 * connection's handshake): what the upstream sends there goes to the client session's own GET
 * stream (`outside`), when the upstream session belongs to one, and a question asked there is
 * decided for that session's agent like one asked during a call. A question inside a request
 * whose stream cannot carry it, or outside any on an upstream session no client session owns,
 * is refused. An upstream client handles only the questions its client session declared it can answer.
 */

import { AsyncLocalStorage } from 'node:async_hooks';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import {
  type ClientCapabilities,
  CreateMessageRequestSchema,
  type CreateMessageResult,
  ElicitationCompleteNotificationSchema,
  ElicitRequestSchema,
  type ElicitResult,
  ErrorCode,
  ListRootsRequestSchema,
  type ListRootsResult,
  LoggingMessageNotificationSchema,
  PromptListChangedNotificationSchema,
  ResourceListChangedNotificationSchema,
  ResourceUpdatedNotificationSchema,
  type ServerNotification,
  type ServerRequest,
  ToolListChangedNotificationSchema,
} from '@modelcontextprotocol/sdk/types.js';
import { isObject } from '../../shared/objects.ts';
import type { McpClientSessions } from '../execution/mcp-client-sessions.ts';
import { rpcError } from './rpc-error.ts';

/** What the upstream may ask of the client during a request. */
export type ClientRequest = Extract<ServerRequest, { method: 'sampling/createMessage' | 'elicitation/create' | 'roots/list' }>;

/** Where a request's relayed messages go: its notifications, and its questions (absent: the request's stream cannot carry one). */
export interface Relay {
  notify: (notification: ServerNotification) => Promise<void>;
  /** `key`: the name a 2026-07-28 upstream gave the question in its `input_required` round (modern-upstream.ts). */
  ask?: (request: ClientRequest, signal: AbortSignal, key?: string) => Promise<unknown>;
  /** The upstream closed this request's stream and is resuming it (SEP-1699 polling): the client may be told to poll too. */
  polled?: () => void;
}

/** How long a relayed question waits for the client's answer at most (a person may be answering it). */
const ANSWER_WAIT_MS = 10 * 60_000;

const scope = new AsyncLocalStorage<Relay>();
/** Upstream clients whose relaying handlers are set (once per client). */
const listening = new WeakSet<Client>();
/** Where what a client's upstream sends outside any request goes (its client session's GET stream). */
const outsides = new WeakMap<Client, Relay>();

/**
 * What an upstream notifies its client of, relayed as it is (to the request's stream, else the
 * session's). Not task status: the client knows a task by Warden's id, not the upstream's.
 */
const RELAYED_NOTIFICATIONS = [
  LoggingMessageNotificationSchema,
  ElicitationCompleteNotificationSchema,
  ResourceUpdatedNotificationSchema,
  ResourceListChangedNotificationSchema,
  ToolListChangedNotificationSchema,
  PromptListChangedNotificationSchema,
];

/**
 * Sets `client`'s relaying handlers: notifications and the questions `declared` names go to the
 * request whose stream they came on, else to `outside` (the client session's GET stream).
 */
export function listen(client: Client, declared: ClientCapabilities, outside?: Relay): void {
  if (listening.has(client)) return;
  listening.add(client);
  if (outside) outsides.set(client, outside);
  for (const schema of RELAYED_NOTIFICATIONS)
    client.setNotificationHandler(schema, (notification) => (scope.getStore() ?? outside)?.notify(notification as ServerNotification));
  const ask =
    <R>() =>
    async (request: ClientRequest, extra: { signal: AbortSignal; requestId?: string | number }): Promise<R> => {
      const relay = scope.getStore() ?? outside;
      if (!relay?.ask)
        throw rpcError(ErrorCode.MethodNotFound, `Warden cannot relay ${request.method} outside a request that can carry it`);
      // deciding and asking run outside the call's scope: a connection opened meanwhile must not inherit it
      const relayAsk = relay.ask;
      // a v1 session's request ids are numbers; a modern upstream's round names its questions
      const key = typeof extra.requestId === 'string' ? extra.requestId : undefined;
      return (await scope.exit(() => relayAsk(request, extra.signal, key))) as R;
    };
  // the SDK refuses a handler for a capability the client did not declare
  if (declared.sampling) client.setRequestHandler(CreateMessageRequestSchema, ask<CreateMessageResult>());
  if (declared.elicitation) client.setRequestHandler(ElicitRequestSchema, ask<ElicitResult>());
  if (declared.roots) client.setRequestHandler(ListRootsRequestSchema, ask<ListRootsResult>());
}

/**
 * Runs `work` (one upstream request on `client`) with what the upstream sends on that request's
 * stream relayed by `relay`, until `work` settles; nothing is relayed after.
 */
export async function relayed<T>(client: Client, relay: Relay, work: () => Promise<T>): Promise<T> {
  listen(client, {});
  let open = true;
  const scoped: Relay = {
    notify: (notification) => (open ? relay.notify(notification).catch(() => undefined) : Promise.resolve()),
    polled: () => {
      if (open) relay.polled?.();
    },
    ...(relay.ask
      ? {
          ask: (request, signal, key) => {
            if (!open) throw rpcError(ErrorCode.InvalidRequest, 'The request this question belongs to has ended');
            return (relay.ask as NonNullable<Relay['ask']>)(request, signal, key);
          },
        }
      : {}),
  };
  try {
    return await scope.run(scoped, work);
  } finally {
    open = false;
  }
}

/** Tells the request in whose async context it is called that its upstream polls (ClientOwner.polled). */
export const upstreamPolled = (): void => scope.getStore()?.polled?.();

/**
 * Runs one of Warden's requests on `client` as a request: what the upstream sends on its stream
 * is not mistaken for what it sends outside any request. Notifications still reach the session's
 * GET stream; a question is refused (this request's stream cannot carry it), unless `work` relays
 * it itself (relayed(), a tool call's).
 */
export function inRequest<T>(client: Client, work: () => Promise<T>): Promise<T> {
  const outside = outsides.get(client);
  return scope.run({ notify: (notification) => outside?.notify(notification) ?? Promise.resolve() }, work);
}

/** An answer the client sent, as it travels to the process that asked. */
interface Answer {
  agentId: string;
  message: { result?: unknown; error?: unknown };
}

/** The prefix of the JSON-RPC ids Warden asks clients under (McpClientSessions.questionId). */
const QUESTION_PREFIX = 'warden-';

/**
 * Questions relayed to clients, waiting for their answers: asked here, answered by a POST to any
 * process (McpClientSessions routes the answer to the process that asked).
 */
export class Questions {
  constructor(private readonly sessions: McpClientSessions) {}

  /**
   * Sends `request` to the client with `send` (under an id of Warden's) and waits for the
   * answer that the same agent POSTs back (answer), the upstream's cancellation, or
   * ANSWER_WAIT_MS.
   */
  ask(agentId: string, request: ClientRequest, signal: AbortSignal, send: (message: string) => void): Promise<unknown> {
    const id = this.sessions.questionId(agentId);
    return new Promise((resolve, reject) => {
      const done = () => {
        release();
        clearTimeout(timer);
        signal.removeEventListener('abort', cancelled);
      };
      const timer = setTimeout(() => {
        done();
        reject(rpcError(ErrorCode.RequestTimeout, `The client did not answer ${request.method} in time`));
      }, ANSWER_WAIT_MS);
      const cancelled = () => {
        done();
        reject(rpcError(ErrorCode.RequestTimeout, `${request.method} was cancelled`));
      };
      signal.addEventListener('abort', cancelled, { once: true });
      const release = this.sessions.receive(`question:${id}`, (sent) => {
        const { agentId: from, message } = sent as Answer;
        // only the agent asked may answer
        if (from !== agentId) return;
        done();
        const error = isObject(message.error) ? message.error : undefined;
        if (error) reject(rpcError(Number(error.code) || ErrorCode.InternalError, String(error.message ?? ''), error.data));
        else resolve(message.result);
      });
      send(JSON.stringify({ jsonrpc: '2.0', id, method: request.method, params: request.params }));
    });
  }

  /**
   * When `body` is the client's answer to relayed questions (JSON-RPC responses only, each to an
   * id of Warden's), sends each to the process that asked and says true; otherwise false and
   * nothing is done. An answer to an id Warden never gave this agent is dropped here, one for a
   * question nobody waits for any more where it arrives.
   */
  async answer(agentId: string, body: unknown): Promise<boolean> {
    const messages = Array.isArray(body) ? body : [body];
    if (messages.length === 0) return false;
    for (const message of messages)
      if (!isObject(message) || 'method' in message || typeof message.id !== 'string' || !message.id.startsWith(QUESTION_PREFIX))
        return false;
      else if (!('result' in message || 'error' in message)) return false;
    for (const message of messages as Record<string, unknown>[]) {
      if (!this.sessions.askedOf(message.id as string, agentId)) continue;
      const answer: Answer = { agentId, message: 'error' in message ? { error: message.error } : { result: message.result } };
      await this.sessions.send(`question:${message.id}`, answer);
    }
    return true;
  }
}
