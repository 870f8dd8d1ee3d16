/**
 * What an upstream sends during one of Warden's requests, relayed to the client on that
 * request's own stream: its log messages (`notifications/message`), and what it asks of the
 * client (`sampling/createMessage`, `elicitation/create`), whose answer the client POSTs back.
 *
 * Upstream sessions are pooled and shared by concurrent calls, and the SDK client hands every
 * message to one handler per session, without saying which request's stream it came on.
 * The stream is read in the async context of the request that opened it (the transport's send,
 * called from the request), so an AsyncLocalStorage entered around the upstream request tells
 * the handler whose it is. The session's own GET stream is opened outside any such scope (by the
 * connection's handshake), so what the upstream sends there reaches no client, and a request
 * asked there is refused.
 */

import { AsyncLocalStorage } from 'node:async_hooks';
import { randomUUID } from 'node:crypto';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import {
  CreateMessageRequestSchema,
  type CreateMessageResult,
  ElicitRequestSchema,
  type ElicitResult,
  ErrorCode,
  LoggingMessageNotificationSchema,
  type ServerNotification,
  type ServerRequest,
} from '@modelcontextprotocol/sdk/types.js';
import { isObject } from '../../shared/objects.ts';
import { rpcError } from './rpc-error.ts';

/** What the upstream may ask of the client during a request. */
export type ClientRequest = Extract<ServerRequest, { method: 'sampling/createMessage' | 'elicitation/create' }>;

/** Where a request's relayed messages go: its notifications, and its questions (absent: the request's stream cannot carry one). */
export interface Relay {
  notify: (notification: ServerNotification) => Promise<void>;
  ask?: (request: ClientRequest, signal: AbortSignal) => Promise<unknown>;
}

/** How long a relayed question waits for the client's answer at most (a person may be answering it). */
const ANSWER_WAIT_MS = 10 * 60_000;

const scope = new AsyncLocalStorage<Relay>();
/** Upstream clients whose relaying handlers are set (once per client). */
const listening = new WeakSet<Client>();

function listen(client: Client): void {
  listening.add(client);
  client.setNotificationHandler(LoggingMessageNotificationSchema, (notification) => scope.getStore()?.notify(notification));
  const ask =
    <R>() =>
    async (request: ClientRequest, extra: { signal: AbortSignal }): Promise<R> => {
      const relay = scope.getStore();
      if (!relay?.ask)
        throw rpcError(ErrorCode.MethodNotFound, `Warden cannot relay ${request.method} outside a request that can carry it`);
      // deciding and asking run outside the call's scope: a connection opened meanwhile must not inherit it
      const relayAsk = relay.ask;
      return (await scope.exit(() => relayAsk(request, extra.signal))) as R;
    };
  client.setRequestHandler(CreateMessageRequestSchema, ask<CreateMessageResult>());
  client.setRequestHandler(ElicitRequestSchema, ask<ElicitResult>());
}

/**
 * Runs `work` (one upstream request on `client`) with what the upstream sends on that request's
 * stream relayed by `relay`, until `work` settles; nothing is relayed after.
 */
export async function relayed<T>(client: Client, relay: Relay, work: () => Promise<T>): Promise<T> {
  if (!listening.has(client)) listen(client);
  let open = true;
  const scoped: Relay = {
    notify: (notification) => (open ? relay.notify(notification).catch(() => undefined) : Promise.resolve()),
    ...(relay.ask
      ? {
          ask: (request, signal) => {
            if (!open) throw rpcError(ErrorCode.InvalidRequest, 'The request this question belongs to has ended');
            return (relay.ask as NonNullable<Relay['ask']>)(request, signal);
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

interface Pending {
  /** Who may answer: the agent the question was relayed to. */
  agentId: string;
  settle: (answer: { result?: unknown; error?: { code: number; message: string; data?: unknown } }) => void;
}

/** Questions relayed to clients in this process, by the JSON-RPC id they were sent with. */
const pending = new Map<string, Pending>();

/**
 * Sends `request` to the client with `send` (under an id of Warden's) and waits for the
 * answer that the same agent POSTs back (answerRelayed), the upstream's cancellation, or
 * ANSWER_WAIT_MS.
 */
export function askClient(agentId: string, request: ClientRequest, signal: AbortSignal, send: (message: string) => void): Promise<unknown> {
  const id = `warden-${randomUUID()}`;
  return new Promise((resolve, reject) => {
    const done = () => {
      pending.delete(id);
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
    pending.set(id, {
      agentId,
      settle: (answer) => {
        done();
        if (answer.error) reject(rpcError(answer.error.code, answer.error.message, answer.error.data));
        else resolve(answer.result);
      },
    });
    send(JSON.stringify({ jsonrpc: '2.0', id, method: request.method, params: request.params }));
  });
}

/**
 * When `body` is the client's answer to relayed questions (JSON-RPC responses only, each to a
 * question this agent was asked in this process), hands them over and says true; otherwise
 * false and nothing is done.
 */
export function answerRelayed(agentId: string, body: unknown): boolean {
  const messages = Array.isArray(body) ? body : [body];
  const answers: { entry: Pending; message: Record<string, unknown> }[] = [];
  for (const message of messages) {
    if (!isObject(message) || 'method' in message || typeof message.id !== 'string' || !('result' in message || 'error' in message))
      return false;
    const entry = pending.get(message.id);
    if (!entry || entry.agentId !== agentId) return false;
    answers.push({ entry, message });
  }
  if (answers.length === 0) return false;
  for (const { entry, message } of answers) {
    const error = isObject(message.error) ? message.error : undefined;
    entry.settle(
      error
        ? { error: { code: Number(error.code) || ErrorCode.InternalError, message: String(error.message ?? ''), data: error.data } }
        : { result: message.result },
    );
  }
  return true;
}
