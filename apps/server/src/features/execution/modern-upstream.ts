/**
 * An upstream that speaks MCP 2026-07-28, behind the v1 Client's interface: the v2 SDK's client
 * speaks the revision (`server/discover`, the per-request `_meta` envelope, `input_required`
 * rounds, no session), while the pool and every caller of it (the REST runtime, the gateway's
 * methods, relay.ts) keep one type for both eras (record 0030).
 *
 * What the upstream asks in an `input_required` result is answered by the handlers relay.ts sets,
 * as a stateful upstream's questions are, each under the key the upstream named; its
 * `requestState` never leaves this process (the v2 client echoes it on the retry). What it
 * announces (list changes, updates of the resources a 2025 client subscribed to) comes on one
 * `subscriptions/listen` stream per session, opened where the session was, so that it reaches
 * the handlers as what a stateful session's GET stream carries: outside any request.
 */
import { AsyncResource } from 'node:async_hooks';
import {
  type McpSubscription,
  type ClientCapabilities as ModernCapabilities,
  Client as ModernClient,
  StreamableHTTPClientTransport as ModernTransport,
  ProtocolError,
  SdkError,
  SdkErrorCode,
} from '@modelcontextprotocol/client';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { getMethodLiteral } from '@modelcontextprotocol/sdk/server/zod-json-schema-compat.js';
import type { RequestOptions } from '@modelcontextprotocol/sdk/shared/protocol.js';
import { type ClientCapabilities, ErrorCode, McpError } from '@modelcontextprotocol/sdk/types.js';
import { takesTasks } from '../../shared/mcp-extensions.ts';
import { bareMcpMessage } from '../../shared/text.ts';
import { type TaskWireOptions, taskRequest } from './modern-tasks-wire.ts';

/** The revisions Warden speaks to a modern upstream. */
const MODERN_REVISIONS = ['2026-07-28'];

/** What the upstream's `server/discover` answered: reused by later sessions on the same server, with no probe. */
export type Discovery = NonNullable<ReturnType<ModernClient['getDiscoverResult']>>;

/** The request options a v1 caller passes, as the v2 client takes them. */
const optionsOf = (options?: RequestOptions) => ({
  ...(options?.timeout !== undefined ? { timeout: options.timeout } : {}),
  ...(options?.signal ? { signal: options.signal } : {}),
  ...(options?.onprogress ? { onprogress: options.onprogress, resetTimeoutOnProgress: options.resetTimeoutOnProgress === true } : {}),
});

/** A v2 failure as the v1 one callers know: a JSON-RPC error is an McpError with the upstream's code. */
function asV1Error(error: unknown): unknown {
  if (error instanceof ProtocolError) return new McpError(error.code, bareMcpMessage(error.message), error.data);
  if (error instanceof SdkError && error.code === SdkErrorCode.RequestTimeout)
    return new McpError(ErrorCode.RequestTimeout, error.message, error.data);
  return error;
}

async function v1<T>(work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (error) {
    throw asV1Error(error);
  }
}

/**
 * The probe's refusals that leave the server a stateful one: no modern evidence (a modern-only
 * client says so in these words, SDK 2.4.0), or a probe answered 5xx or with no JSON-RPC at all,
 * which servers of the stateful revisions do for a method they do not know before `initialize`.
 * A timeout, a network failure or a 401/403 stays the server's answer.
 */
function stateful(error: unknown): { certain: boolean } | undefined {
  if (!(error instanceof SdkError) || error.code !== SdkErrorCode.EraNegotiationFailed) return undefined;
  if (/to fall back to$/.test(error.message)) return { certain: true };
  // a proxy's 502 during a deploy reads the same: worth an initialize, not a verdict kept
  if (/answered the probe with HTTP 5\d\d|answered with an unusable reply/.test(error.message)) return { certain: false };
  return undefined;
}

/** A server that gave no modern evidence: `certain` when it answered as a stateful server does (the verdict may be kept). */
export interface Stateful {
  stateful: true;
  certain: boolean;
}

export class ModernUpstream extends Client {
  /** Resources a 2025 client subscribed to on this session (`resources/subscribe`). */
  private readonly subscribed = new Set<string>();
  /** The session's listen stream, if the server has anything to announce. */
  private listening: Promise<McpSubscription | undefined> = Promise.resolve(undefined);
  /** Changes of the listen stream, one at a time. */
  private relistened: Promise<void> = Promise.resolve();
  /** Runs `fn` in the async context the session was opened in (outside any request of a client's). */
  private readonly outside = AsyncResource.bind(<T>(fn: () => T): T => fn());

  private constructor(
    private readonly modern: ModernClient,
    private readonly declared: ClientCapabilities,
    private readonly timeout: number,
    /** Where and how the session sends (the tasks extension's requests go the same way). */
    private readonly wire: { url: URL; fetch: typeof globalThis.fetch },
  ) {
    super({ name: 'warden', version: '1.0.0' }, { capabilities: declared });
  }

  /**
   * Connects to `url` as a 2026-07-28 client: from an earlier `discovery` with no round trip,
   * else by probing `server/discover`. Undefined when the server gave no modern evidence (it
   * speaks the stateful revisions: the caller opens a v1 session instead); a network failure,
   * a timeout or a refusal is thrown.
   */
  static async connect(
    url: URL,
    fetch: typeof globalThis.fetch,
    capabilities: ClientCapabilities,
    timeout: number,
    discovery?: Discovery,
  ): Promise<ModernUpstream | Stateful> {
    const modern = new ModernClient(
      { name: 'warden', version: '1.0.0' },
      {
        capabilities: capabilities as ModernCapabilities,
        versionNegotiation: { mode: 'auto', probe: { timeoutMs: timeout } },
        supportedProtocolVersions: MODERN_REVISIONS,
      },
    );
    modern.onerror = () => undefined;
    const transport = new ModernTransport(url, { fetch });
    try {
      await modern.connect(transport, { timeout, ...(discovery ? { prior: { kind: 'modern', discover: discovery } } : {}) });
    } catch (error) {
      await modern.close().catch(() => undefined);
      const verdict = stateful(error);
      if (verdict) return { stateful: true, ...verdict };
      throw asV1Error(error);
    }
    const upstream = new ModernUpstream(modern, capabilities, timeout, { url, fetch });
    modern.onclose = () => upstream.onclose?.();
    // as a stateful session opens its GET stream: a server that will not listen is still called
    upstream.relisten().catch(() => undefined);
    return upstream;
  }

  /** What the upstream's `server/discover` answered. */
  get discovery(): Discovery | undefined {
    return this.modern.getDiscoverResult();
  }

  override getServerCapabilities() {
    return this.modern.getServerCapabilities() as ReturnType<Client['getServerCapabilities']>;
  }
  override getServerVersion() {
    return this.modern.getServerVersion() as ReturnType<Client['getServerVersion']>;
  }
  override getInstructions() {
    return this.modern.getInstructions();
  }

  override callTool(params: Parameters<Client['callTool']>[0], _schema?: unknown, options?: RequestOptions) {
    return v1(() => this.modern.callTool(params, optionsOf(options))) as ReturnType<Client['callTool']>;
  }
  override listTools(params?: Parameters<Client['listTools']>[0], options?: RequestOptions) {
    return v1(() => this.modern.listTools(params, { ...optionsOf(options), cacheMode: 'bypass' })) as ReturnType<Client['listTools']>;
  }
  override listResources(params?: Parameters<Client['listResources']>[0], options?: RequestOptions) {
    return v1(() => this.modern.listResources(params, { ...optionsOf(options), cacheMode: 'bypass' })) as ReturnType<
      Client['listResources']
    >;
  }
  override listResourceTemplates(params?: Parameters<Client['listResourceTemplates']>[0], options?: RequestOptions) {
    return v1(() => this.modern.listResourceTemplates(params, { ...optionsOf(options), cacheMode: 'bypass' })) as ReturnType<
      Client['listResourceTemplates']
    >;
  }
  override listPrompts(params?: Parameters<Client['listPrompts']>[0], options?: RequestOptions) {
    return v1(() => this.modern.listPrompts(params, { ...optionsOf(options), cacheMode: 'bypass' })) as ReturnType<Client['listPrompts']>;
  }
  override readResource(params: Parameters<Client['readResource']>[0], options?: RequestOptions) {
    return v1(() => this.modern.readResource(params, { ...optionsOf(options), cacheMode: 'bypass' })) as ReturnType<Client['readResource']>;
  }
  override getPrompt(params: Parameters<Client['getPrompt']>[0], options?: RequestOptions) {
    return v1(() => this.modern.getPrompt(params, optionsOf(options))) as ReturnType<Client['getPrompt']>;
  }
  override complete(params: Parameters<Client['complete']>[0], options?: RequestOptions) {
    return v1(() => this.modern.complete(params, optionsOf(options))) as ReturnType<Client['complete']>;
  }
  /** The revision has no `logging/setLevel` (a level travels in each request's `_meta`): nothing to send. */
  override async setLoggingLevel() {
    return {};
  }
  /** The revision has no `ping`: `server/discover` says as much of the server's health. */
  override async ping(options?: RequestOptions) {
    await v1(() => this.modern.discover(optionsOf(options)));
    return {};
  }
  /** Whether the server offers the tasks extension (its `server/discover` says so). */
  get offersTasks(): boolean {
    return takesTasks(this.modern.getServerCapabilities());
  }

  /**
   * A request of the tasks extension (a `tools/call` that may answer a task, `tasks/get`,
   * `tasks/update`, `tasks/cancel`), declaring the extension: the result as the upstream sent it.
   */
  tasksRequest(method: string, params: Record<string, unknown>, options: Partial<TaskWireOptions> = {}): Promise<Record<string, unknown>> {
    const name = String(method === 'tools/call' ? params.name : params.taskId);
    return taskRequest(
      this.wire.fetch,
      this.wire.url,
      this.declared as Record<string, unknown>,
      { method, name, params },
      {
        timeout: options.timeout ?? this.timeout,
        ...(options.signal ? { signal: options.signal } : {}),
      },
    );
  }

  /** A request by method name: the result as the upstream sent it, unvalidated. */
  override request<T>(
    request: { method: string; params?: Record<string, unknown> },
    _schema: unknown,
    options?: RequestOptions,
  ): Promise<T> {
    // the v2 client takes the request whole (a spec method needs no schema)
    const send = this.modern.request.bind(this.modern) as (
      request: { method: string; params?: unknown },
      options: object,
    ) => Promise<unknown>;
    return v1(() => send({ method: request.method, params: request.params }, optionsOf(options))) as Promise<T>;
  }
  /** The revision has no `resources/subscribe`: the session's listen stream is opened again with the URI in it. */
  override async subscribeResource(params: Parameters<Client['subscribeResource']>[0]) {
    const added = !this.subscribed.has(params.uri);
    this.subscribed.add(params.uri);
    try {
      await v1(() => this.relisten());
    } catch (error) {
      // not subscribed after all: the stream that was open goes on as it was
      if (added) this.subscribed.delete(params.uri);
      throw error;
    }
    return {};
  }
  override async unsubscribeResource(params: Parameters<Client['unsubscribeResource']>[0]) {
    this.subscribed.delete(params.uri);
    await v1(() => this.relisten());
    return {};
  }

  /** Opens the listen stream for what the server can announce now, then closes the one it replaces (so nothing is missed between). */
  private relisten(): Promise<void> {
    const change = this.relistened.then(async () => {
      const capabilities = this.modern.getServerCapabilities();
      const filter = {
        ...(capabilities?.tools?.listChanged ? { toolsListChanged: true } : {}),
        ...(capabilities?.prompts?.listChanged ? { promptsListChanged: true } : {}),
        ...(capabilities?.resources?.listChanged ? { resourcesListChanged: true } : {}),
        ...(this.subscribed.size > 0 ? { resourceSubscriptions: [...this.subscribed] } : {}),
      };
      // a new stream that fails leaves the one open as it was
      const next =
        Object.keys(filter).length === 0 ? undefined : await this.outside(() => this.modern.listen(filter, { timeout: this.timeout }));
      const previous = await this.listening;
      this.listening = Promise.resolve(next);
      await previous?.close();
    });
    this.relistened = change.catch(() => undefined);
    return change;
  }

  /** The revision has no notifications from client to server (roots are asked for in each round). */
  override async notification() {}

  /**
   * The upstream's questions, on the v2 client: its `input_required` rounds call them with the
   * key the upstream named as the request id (`extra.requestId`).
   */
  override setRequestHandler(schema: Parameters<Client['setRequestHandler']>[0], handler: (request: never, extra: never) => unknown): void {
    // the v1 constructor sets its own (ping, cancellation) before this one has its v2 client
    if (!this.modern) {
      super.setRequestHandler(schema, handler as never);
      return;
    }
    const method = getMethodLiteral(schema);
    const register = this.modern.setRequestHandler.bind(this.modern) as (
      method: string,
      handler: (request: unknown, ctx: { mcpReq: { id: string | number; signal: AbortSignal } }) => unknown,
    ) => void;
    register(method, (request, ctx) => handler(request as never, { signal: ctx.mcpReq.signal, requestId: ctx.mcpReq.id } as never));
  }
  override setNotificationHandler(
    schema: Parameters<Client['setNotificationHandler']>[0],
    handler: (notification: never) => unknown,
  ): void {
    if (!this.modern) {
      super.setNotificationHandler(schema, handler as never);
      return;
    }
    const register = this.modern.setNotificationHandler.bind(this.modern) as (method: string, handler: (n: unknown) => unknown) => void;
    register(getMethodLiteral(schema), (notification) => handler(notification as never));
  }

  override async close(): Promise<void> {
    await (await this.listening)?.close().catch(() => undefined);
    await this.modern.close();
  }
}
