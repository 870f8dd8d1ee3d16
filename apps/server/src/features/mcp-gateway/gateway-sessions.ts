/**
 * The gateway's client sessions at the edge: `initialize` opens one (its id answered in
 * `Mcp-Session-Id`), a request naming one is served in it (404 unless it is the caller's, on
 * this endpoint), GET is its stream of what its upstream sessions send outside any request, and
 * DELETE ends it. What a session is, and how it reaches other processes, is McpClientSessions'.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { RequestContext } from '../../shared/context.ts';
import { ApiError } from '../../shared/errors.ts';
import { isObject } from '../../shared/objects.ts';
import type { ClientSession, McpClientSessions } from '../execution/mcp-client-sessions.ts';
import type { McpTarget } from '../execution/mcp-dialer.ts';
import { asClientSees, type GatewayCaller } from './gateway-answers.ts';
import type { PolledStreams } from './polled-streams.ts';
import { inRequest, listen, type Relay, upstreamPolled } from './relay.ts';

/** One JSON-RPC message as an event of an SSE answer (as the SDK's transport writes it). */
export const sseEvent = (message: string) => `event: message\ndata: ${message}\n\n`;
/** What a GET stream may have waiting to be written (a client that stopped reading) before it is ended. */
const MAX_BUFFERED_BYTES = 1 << 20;
/** GET streams one client session holds open in a process at most (a new one ends the oldest). */
const MAX_STREAMS_PER_SESSION = 4;
/** The methods the gateway takes (a 405 names them). */
export const ALLOW = { Allow: 'GET, POST, DELETE' };

export class GatewaySessions {
  /** The GET streams open in this process, by client session (a message goes to the newest). */
  private readonly streams = new Map<string, ServerResponse[]>();
  /** Lets go of a session's address once its last stream here closes. */
  private readonly releases = new Map<string, () => void>();
  /** Every stream of a session open here, its own and the polled calls' it resumes (see keepAlive). */
  private readonly alive = new Map<string, Set<ServerResponse>>();

  constructor(
    private readonly sessions: McpClientSessions,
    /** Calls whose client was told to poll: a GET with a `Last-Event-ID` of theirs resumes one. */
    private readonly polled: PolledStreams,
    /** The enabled server `slug` names (404 mcp_server_not_found otherwise). */
    private readonly registered: (ctx: RequestContext, slug: string) => Promise<McpTarget>,
    /** How often an open GET stream gets a comment (so that proxies in between keep it open) and its caller is checked again. */
    private readonly checkMs: number,
    /** How a question an upstream asks outside any request reaches the client session's GET stream, decided for `caller`. */
    private readonly askOutside: (caller: GatewayCaller, target: McpTarget, sessionId: string) => NonNullable<Relay['ask']>,
  ) {
    // a session ended (here or in another process): its GET streams here end too
    sessions.onEnded((id) => {
      for (const res of this.alive.get(id) ?? []) res.end();
    });
  }

  /** Ends the GET streams open here (shutdown: their clients reconnect to another process). */
  endStreams(): void {
    for (const streams of this.alive.values()) for (const res of streams) res.end();
  }

  /**
   * The GET stream of a client session: what its upstream sessions send outside any request
   * (resource updates, list changes, log messages) is relayed there, from any process. Without a
   * session there is nothing to stream (405). `stillAllowed` is asked at every keep-alive: a
   * stream whose key was revoked, whose agent was deactivated or whose session ended is ended.
   */
  async stream(
    caller: GatewayCaller,
    slug: string | undefined,
    req: IncomingMessage,
    res: ServerResponse,
    stillAllowed: () => Promise<boolean>,
  ): Promise<void> {
    if (slug !== undefined) await this.registered(caller.ctx, slug);
    const session = await this.sessionOf(caller, slug, req);
    if (!session)
      throw new ApiError('method_not_allowed', 'Without an Mcp-Session-Id there is no stream: initialize a session first', {
        headers: ALLOW,
      });
    // a call's stream its client was told to poll (polled-streams.ts), kept alive and checked as the session's own
    const lastEventId = req.headers['last-event-id'];
    if (typeof lastEventId === 'string' && lastEventId.startsWith('poll_')) {
      if (!(await this.polled.resumeOn(lastEventId, session.id, caller.agent.id, res)))
        throw new ApiError(
          'not_found',
          "The stream this Last-Event-ID names is gone (its answer was read long ago, or it is no stream of this session's): send the request again",
        );
      return this.keepAlive(session.id, res, stillAllowed);
    }
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
    res.flushHeaders();
    const open = this.streams.get(session.id) ?? [];
    // the first stream here makes this process the one the session's messages are sent to (another that held it lets go)
    if (open.length === 0)
      this.releases.set(
        session.id,
        this.sessions.receive(
          `stream:${session.id}`,
          (message) => {
            const newest = this.streams.get(session.id)?.at(-1);
            newest?.write(sseEvent(JSON.stringify({ jsonrpc: '2.0', ...(message as object) })));
            if (newest && newest.writableLength > MAX_BUFFERED_BYTES) newest.end();
          },
          () => {
            this.releases.delete(session.id);
            for (const other of this.streams.get(session.id) ?? []) other.end();
          },
        ),
      );
    // a client reconnecting in a loop holds a few sockets, not one per attempt
    if (open.length >= MAX_STREAMS_PER_SESSION) open.shift()?.end();
    open.push(res);
    this.streams.set(session.id, open);
    this.keepAlive(session.id, res, stillAllowed);
    res.once('close', () => {
      const left = (this.streams.get(session.id) ?? []).filter((other) => other !== res);
      if (left.length > 0) return void this.streams.set(session.id, left);
      this.streams.delete(session.id);
      this.releases.get(session.id)?.();
      this.releases.delete(session.id);
    });
  }

  /**
   * Keeps a stream of the session open (a comment every checkMs, so that proxies between keep it)
   * while its caller may still act and the session lives; ends it otherwise, when the session
   * ends (here or elsewhere), and on shutdown.
   */
  private keepAlive(sessionId: string, res: ServerResponse, stillAllowed: () => Promise<boolean>): void {
    const alive = this.alive.get(sessionId) ?? new Set<ServerResponse>();
    alive.add(res);
    this.alive.set(sessionId, alive);
    const timer = setInterval(async () => {
      const allowed = await stillAllowed().catch(() => false);
      const live = allowed && (await this.sessions.find(sessionId).catch(() => null)) !== null;
      if (live) res.write(': keep-alive\n\n');
      else res.end();
    }, this.checkMs);
    timer.unref();
    res.once('close', () => {
      clearInterval(timer);
      alive.delete(res);
      if (alive.size === 0) this.alive.delete(sessionId);
    });
  }

  /** Ends a client session (DELETE): its upstream sessions are terminated, its id answers 404 from now on. */
  async end(caller: GatewayCaller, slug: string | undefined, req: IncomingMessage, res: ServerResponse): Promise<void> {
    const session = await this.sessionOf(caller, slug, req);
    if (!session)
      throw new ApiError('method_not_allowed', 'Without an Mcp-Session-Id there is no session to end', {
        headers: ALLOW,
      });
    await this.sessions.end(session.id);
    res.writeHead(204).end();
  }

  /**
   * The caller in its client session: a new one for an `initialize` (its id answered in
   * `Mcp-Session-Id`), the one its `Mcp-Session-Id` names (404 unless it is this agent's, on this
   * endpoint), or none for a client that keeps none (its upstream sessions are the agent's).
   */
  async inSession(
    caller: GatewayCaller,
    slug: string | undefined,
    req: IncomingMessage,
    body: unknown,
    res: ServerResponse,
  ): Promise<GatewayCaller> {
    let session: ClientSession | null;
    if (isObject(body) && body.method === 'initialize') {
      const params = isObject(body.params) ? body.params : {};
      session = await this.sessions.open(
        {
          workspaceId: caller.ctx.auth.workspaceId,
          agentId: caller.agent.id,
          endpoint: slug ?? '',
          protocolVersion: typeof params.protocolVersion === 'string' ? params.protocolVersion.slice(0, 32) : '',
        },
        params.capabilities,
      );
      res.setHeader('mcp-session-id', session.id);
    } else session = await this.sessionOf(caller, slug, req);
    return session ? this.inClientSession(caller, session) : caller;
  }

  /** The client session `Mcp-Session-Id` names (null: none named); 404 session_not_found unless it is this agent's, on this endpoint. */
  private async sessionOf(caller: GatewayCaller, slug: string | undefined, req: IncomingMessage): Promise<ClientSession | null> {
    const named = req.headers['mcp-session-id'];
    if (named === undefined) return null;
    const session = typeof named === 'string' ? await this.sessions.find(named) : null;
    if (
      !session ||
      session.workspaceId !== caller.ctx.auth.workspaceId ||
      session.agentId !== caller.agent.id ||
      session.endpoint !== (slug ?? '')
    )
      throw new ApiError('session_not_found', 'No such MCP session here (it ended, or never existed): initialize a new one');
    return session;
  }

  /**
   * The caller in its client session: whose upstream sessions its requests use, and how what
   * those send outside a request (notifications, questions) reaches the session's GET stream.
   */
  private inClientSession(caller: GatewayCaller, session: ClientSession): GatewayCaller {
    const toStream = (message: object) => this.sessions.send(`stream:${session.id}`, message).catch(() => undefined);
    const inSession: GatewayCaller = {
      ...caller,
      client: {
        id: session.id,
        capabilities: session.capabilities,
        prepare: (client, target) =>
          listen(client, session.capabilities, {
            notify: (notification) => toStream(asClientSees(target, session.endpoint !== '', notification)),
            ask: this.askOutside(inSession, target, session.id),
          }),
        around: inRequest,
        polled: upstreamPolled,
      },
    };
    return inSession;
  }
}
