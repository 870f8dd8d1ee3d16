/**
 * Revision 2026-07-28's multi-round-trip requests (`input_required`) for what an upstream asks
 * while it serves a request. A stateful upstream asks on the request's stream and waits; a
 * 2026-07-28 client keeps no stream open for that, so it is answered `input_required` with the
 * questions (each decided first, as any question: GatewayMethods.governedAsk), and retries the
 * same request with its answers (`inputResponses`) and the `requestState` it was given. Between
 * rounds the upstream request stays open in this process, bound to the agent and the exact
 * request; its outcome is recorded once, when it ends, as any call's.
 *
 * `requestState` is a random id the held exchange takes for the round, and nothing else: a
 * client that alters it names no exchange, and one exchange answers only its agent's retry of
 * the same request. A retry that reaches another process is sent on to the one holding the
 * exchange (its address `round:<requestState>` on the gateway's relay, McpClientSessions), and
 * its answer comes back the same way.
 * A question needing a capability the client did not declare is never sent it: when nothing
 * else is left to ask, the request fails with MissingRequiredClientCapability (-32021).
 */
import { hash, randomUUID } from 'node:crypto';
import { McpError } from '@modelcontextprotocol/sdk/types.js';
import { stableJson } from '../../shared/canonical-json.ts';
import { isObject } from '../../shared/objects.ts';
import { bareMcpMessage } from '../../shared/text.ts';
import type { ClientRequest } from './relay.ts';
import { rpcError } from './rpc-error.ts';

/** JSON-RPC code of a request that needs a client capability the client did not declare. */
export const MISSING_CAPABILITY = -32021;
/** Questions of one round are sent together: the round is answered once none came for this long. */
const ROUND_QUIET_MS = 20;
/** How long an upstream request waits for the client's next round at most (as a question relayed to a session waits). */
const HELD_WAIT_MS = 10 * 60_000;
/** Upstream requests one agent may keep waiting for its answers; past it, its oldest is given up. */
const MAX_HELD_PER_AGENT = 32;
/** How long a retry sent to another process waits for that process to take it (else the state names no exchange). */
const TAKEN_WAIT_MS = 5_000;
/** How long an answered requestState is refused at once; and how many are remembered so at most. */
const SPENT_KEEP_MS = 60_000;
const MAX_SPENT = 10_000;

/** The relay between server processes (McpClientSessions): an address held by one process, and messages sent to it. */
export interface RoundsRelay {
  receive: (address: string, receiver: (message: unknown) => void) => () => void;
  send: (address: string, message: unknown) => Promise<void>;
}

/** A retry as it travels to the process holding its exchange. */
interface RemoteRetry {
  agentId: string;
  act: string;
  answers?: unknown;
  /** When it was sent (ms since the epoch): one its sender may have given up on is not taken. */
  sentAt: number;
  reply: string;
}
/** What comes back: taken first, then the round's answer. */
type RemoteAnswer = { taken: true } | { value: unknown } | { error: { code: number; message: string; data?: unknown } };

/** What a requestState of Warden's looks like (a random UUID): anything else names no exchange, here or elsewhere. */
const STATE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const INVALID_STATE = 'Invalid or expired requestState: send the request again without it';
const invalidState = () => rpcError(-32602, INVALID_STATE);

const CAPABILITY: Record<ClientRequest['method'], string> = {
  'sampling/createMessage': 'sampling',
  'elicitation/create': 'elicitation',
  'roots/list': 'roots',
};

/**
 * Asks the client `request`, once `decide` has let it be asked (decide runs the governed act and
 * calls `deliver`); `key`, the name a 2026-07-28 upstream gave it, is the name the client sees.
 */
export type Asker = (
  request: ClientRequest,
  signal: AbortSignal,
  decide: (deliver: () => Promise<unknown>) => Promise<unknown>,
  key?: string,
) => Promise<unknown>;

/** One request of a 2026-07-28 client, as input rounds see it. */
export interface RoundRequest {
  agentId: string;
  method: string;
  /** Its params, without the rounds' own (`requestState`, `inputResponses`). */
  params: Record<string, unknown>;
  /** The `requestState` of a retry. */
  state?: unknown;
  /** The `inputResponses` of a retry. */
  answers?: unknown;
  /** What the client declared in this request's envelope. */
  capabilities: Record<string, unknown>;
  /** The request's own signal: the client went away before a round was answered. */
  signal: AbortSignal;
}

interface Question {
  request: ClientRequest;
  answer: (value: unknown) => void;
  fail: (error: unknown) => void;
}

/** One upstream request and the questions it waits on. */
class Exchange {
  /** The requestState of its current round: a new one each round, so that an earlier round's names nothing. */
  id = randomUUID();
  /** Decided questions the client has not answered yet, by the key it answers them under. */
  readonly asked = new Map<string, Question>();
  /** Capabilities asked for that the client did not declare. */
  readonly missing = new Set<string>();
  /** Questions being decided now. */
  deciding = 0;
  /** Set once the upstream request ends. */
  outcome?: { value: unknown } | { error: unknown };
  /** A retry is being answered: another retry of the same state is refused meanwhile. */
  busy = false;
  expires?: NodeJS.Timeout;
  /** Lets go of the exchange's relay address (held while it waits for a retry). */
  unlisten?: () => void;
  readonly giveUp = new AbortController();
  private keys = 0;
  private wake: () => void = () => undefined;

  constructor(
    readonly agentId: string,
    readonly act: string,
    readonly capabilities: Record<string, unknown>,
  ) {}

  /** Resolves at the next change: a question arrives or is decided, or the upstream request ends. */
  changed(): Promise<void> {
    return new Promise((resolve) => {
      this.wake = resolve;
    });
  }
  touch(): void {
    this.wake();
  }

  readonly ask: Asker = async (request, _signal, decide, key) => {
    const capability = CAPABILITY[request.method];
    if (!isObject(this.capabilities[capability])) {
      // never sent: the request fails with -32021 when nothing else is left to ask
      this.missing.add(capability);
      this.touch();
      return new Promise((_, reject) => this.giveUp.signal.addEventListener('abort', () => reject(this.giveUp.signal.reason)));
    }
    this.deciding += 1;
    this.touch();
    let decided = false;
    const settle = () => {
      if (decided) return;
      decided = true;
      this.deciding -= 1;
      this.touch();
    };
    try {
      return await decide(
        () =>
          new Promise((answer, fail) => {
            // the upstream's own name for it when it gave one and it is free, else one of Warden's
            const named = key !== undefined && !this.asked.has(key) ? key : `${request.method.replace('/', '_')}_${++this.keys}`;
            this.asked.set(named, { request, answer, fail });
            settle();
          }),
      );
    } finally {
      // refused, or failed before it was asked
      settle();
    }
  };
}

export class InputRounds {
  private readonly held = new Map<string, Exchange>();
  /** requestStates answered or given up lately (see spend). */
  private readonly spent = new Set<string>();

  /** `relay`: how a retry reaches the process holding its exchange (none: this process only). */
  constructor(private readonly relay?: RoundsRelay) {}

  /**
   * Serves one request: a retry (`requestState`) resumes its exchange with the client's answers;
   * anything else runs `run` with the asker its upstream's questions go to. Either way the
   * answer is the request's result once its upstream answers, or `input_required` with what
   * the upstream asks meanwhile.
   */
  async serve(request: RoundRequest, run: (ask: Asker, signal: AbortSignal) => Promise<unknown>): Promise<unknown> {
    if (request.state !== undefined) return this.resume(request, request.state, request.answers);
    const exchange = new Exchange(request.agentId, actOf(request), request.capabilities);
    const cancel = () => exchange.giveUp.abort(request.signal.reason);
    request.signal.addEventListener('abort', cancel, { once: true });
    run(exchange.ask, exchange.giveUp.signal).then(
      (value) => this.ended(exchange, { value }),
      (error) => this.ended(exchange, { error }),
    );
    try {
      return await this.round(exchange);
    } finally {
      request.signal.removeEventListener('abort', cancel);
    }
  }

  private resume(request: RoundRequest, state: unknown, responses: unknown): Promise<unknown> {
    if (typeof state !== 'string' || !STATE.test(state)) throw invalidState();
    const exchange = this.held.get(state);
    if (!exchange && this.spent.has(state)) throw invalidState();
    if (!exchange && this.relay)
      return this.resumeElsewhere(
        this.relay,
        state,
        { agentId: request.agentId, act: actOf(request), answers: responses, sentAt: Date.now() },
        request.signal,
      );
    return this.resumeHere(exchange, request.agentId, actOf(request), responses);
  }

  /** A retry of an exchange another process holds: sent there, its answer awaited. */
  private resumeElsewhere(relay: RoundsRelay, state: string, retry: Omit<RemoteRetry, 'reply'>, signal: AbortSignal): Promise<unknown> {
    const reply = `round-answer:${randomUUID()}`;
    return new Promise((resolve, reject) => {
      let timer: NodeJS.Timeout;
      const settle = (settled: () => void) => {
        clearTimeout(timer);
        signal.removeEventListener('abort', cancelled);
        release();
        settled();
      };
      const cancelled = () => settle(() => reject(signal.reason));
      // taken within TAKEN_WAIT_MS, then answered within what a held exchange waits at most
      const waitFor = (ms: number) => {
        clearTimeout(timer);
        timer = setTimeout(() => settle(() => reject(invalidState())), ms);
      };
      waitFor(TAKEN_WAIT_MS);
      signal.addEventListener('abort', cancelled, { once: true });
      const release = relay.receive(reply, (message) => {
        const answer = message as RemoteAnswer;
        if ('taken' in answer) return waitFor(HELD_WAIT_MS);
        if ('error' in answer) settle(() => reject(rpcError(answer.error.code, answer.error.message, answer.error.data)));
        else settle(() => resolve(answer.value));
      });
      relay.send(`round:${state}`, { ...retry, reply } satisfies RemoteRetry).catch((error) => settle(() => reject(error)));
    });
  }

  /** A retry sent here from another process: answered as a local one, the answer sent back. */
  private async retried(state: string, message: unknown): Promise<void> {
    const relay = this.relay as RoundsRelay;
    const retry = message as RemoteRetry;
    if (!isObject(message) || typeof retry.reply !== 'string') return;
    const answer = (value: RemoteAnswer) => relay.send(retry.reply, value).catch(() => undefined);
    // its sender gives up after TAKEN_WAIT_MS: one that may have is refused, its answers unused
    if (!(Date.now() - Number(retry.sentAt) < TAKEN_WAIT_MS / 2))
      return void (await answer({ error: { code: -32602, message: INVALID_STATE } }));
    await answer({ taken: true });
    try {
      await answer({ value: await this.resumeHere(this.held.get(state), retry.agentId, retry.act, retry.answers) });
    } catch (error) {
      const {
        code,
        message: text,
        data,
      } = error instanceof McpError ? error : { code: -32603, message: 'Internal error', data: undefined };
      await answer({ error: { code, message: bareMcpMessage(text), ...(data === undefined ? {} : { data }) } });
    }
  }

  private async resumeHere(exchange: Exchange | undefined, agentId: string, act: string, responses: unknown): Promise<unknown> {
    if (!exchange || exchange.agentId !== agentId || exchange.act !== act) throw invalidState();
    if (responses !== undefined && !isObject(responses)) throw rpcError(-32602, 'inputResponses must be an object of results by key');
    const answers = responses ?? {};
    for (const key of exchange.asked.keys())
      if (Object.hasOwn(answers, key) && !isObject(answers[key]))
        throw rpcError(-32602, `inputResponses.${key} must be the result of the request asked`);
    if (exchange.busy) throw rpcError(-32602, 'This requestState is being answered by another request');
    exchange.busy = true;
    try {
      // answers to keys never asked are ignored; keys left unanswered are asked again
      for (const [key, question] of exchange.asked)
        if (Object.hasOwn(answers, key)) {
          exchange.asked.delete(key);
          question.answer(answers[key]);
        }
      return await this.round(exchange);
    } finally {
      exchange.busy = false;
    }
  }

  /** Waits for the upstream's answer, or for a round of questions to hand the client. */
  private async round(exchange: Exchange): Promise<unknown> {
    this.release(exchange);
    for (;;) {
      const { outcome } = exchange;
      if (outcome) {
        if ('error' in outcome) throw outcome.error;
        return outcome.value;
      }
      const change = exchange.changed();
      if (exchange.deciding === 0 && (exchange.asked.size > 0 || exchange.missing.size > 0)) {
        const quiet = await Promise.race([change.then(() => false), sleep(ROUND_QUIET_MS).then(() => true)]);
        if (!quiet) continue;
        if (exchange.asked.size > 0) return this.hold(exchange);
        const missing = [...exchange.missing];
        exchange.giveUp.abort(new Error('The client lacks a capability the upstream needs'));
        throw rpcError(MISSING_CAPABILITY, `This request needs the client capabilities ${missing.join(', ')}, which it did not declare`, {
          requiredCapabilities: Object.fromEntries(missing.map((name) => [name, {}])),
        });
      }
      await change;
    }
  }

  /** Keeps the exchange for the client's retry and answers `input_required` with its questions. */
  private hold(exchange: Exchange): Record<string, unknown> {
    exchange.id = randomUUID();
    const id = exchange.id;
    this.held.set(id, exchange);
    exchange.unlisten = this.relay?.receive(`round:${id}`, (message) => void this.retried(id, message));
    exchange.expires = setTimeout(() => this.drop(exchange, 'The client did not answer in time'), HELD_WAIT_MS).unref();
    const mine = [...this.held.values()].filter((held) => held.agentId === exchange.agentId);
    if (mine.length > MAX_HELD_PER_AGENT) this.drop(mine[0] as Exchange, 'Too many requests of this agent wait for answers');
    return {
      resultType: 'input_required',
      // the upstream's `_meta` (its progress token) is its own session's, not the client's
      inputRequests: Object.fromEntries([...exchange.asked].map(([key, { request }]) => [key, withoutMeta(request)])),
      requestState: exchange.id,
    };
  }

  private ended(exchange: Exchange, outcome: NonNullable<Exchange['outcome']>): void {
    exchange.outcome = outcome;
    this.release(exchange);
    // questions the upstream no longer waits for
    for (const { fail } of exchange.asked.values()) fail(rpcError(-32600, 'The request this question belongs to has ended'));
    exchange.asked.clear();
    exchange.touch();
  }

  /** Not held any more: the client is being answered (again), or the request has ended. */
  private release(exchange: Exchange): void {
    if (this.held.delete(exchange.id)) this.spend(exchange.id, exchange.unlisten);
    exchange.unlisten = undefined;
    clearTimeout(exchange.expires);
  }

  /**
   * A requestState answered or given up: for SPENT_KEEP_MS a retry naming it is refused at once,
   * here or from another process, rather than after TAKEN_WAIT_MS of asking who holds it.
   */
  private spend(id: string, unlisten?: () => void): void {
    this.spent.add(id);
    if (this.spent.size > MAX_SPENT) this.spent.delete(this.spent.values().next().value as string);
    unlisten?.();
    const refusing = this.relay?.receive(`round:${id}`, (message) => {
      const reply = (message as Partial<RemoteRetry>).reply;
      if (typeof reply === 'string')
        void this.relay?.send(reply, { error: { code: -32602, message: INVALID_STATE } }).catch(() => undefined);
    });
    setTimeout(() => {
      this.spent.delete(id);
      refusing?.();
    }, SPENT_KEEP_MS).unref();
  }

  private drop(exchange: Exchange, why: string): void {
    this.release(exchange);
    const reason = rpcError(-32001, why);
    for (const { fail } of exchange.asked.values()) fail(reason);
    exchange.giveUp.abort(reason);
  }
}

function withoutMeta(request: ClientRequest): ClientRequest {
  if (!request.params) return request;
  const { _meta, ...params } = request.params as Record<string, unknown>;
  return { ...request, params } as ClientRequest;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** The request a requestState is bound to: its method and params (not its `_meta`). */
function actOf({ method, params }: RoundRequest): string {
  const { _meta, ...rest } = params;
  return hash('sha256', stableJson({ method, params: rest }), 'hex');
}
