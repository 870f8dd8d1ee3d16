/**
 * What the MCP gateway answers, and the shapes its parts share: who calls, a tool call and its
 * request's extras, a refusal as the client reads it, and the JSON-RPC errors (Warden's own, or
 * the upstream's relayed as it sent them).
 */
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { type CallToolResult, ErrorCode, McpError, type ServerNotification } from '@modelcontextprotocol/sdk/types.js';
import type { RequestContext } from '../../shared/context.ts';
import { ApiError } from '../../shared/errors.ts';
import { isObject } from '../../shared/objects.ts';
import { bareMcpMessage } from '../../shared/text.ts';
import { normaliseResourceUri, ResourceUriError } from '../acts/resource-uri.ts';
import type { AgentRow } from '../agents/agents.repository.ts';
import type { DecisionOutcome } from '../decisions/decisions.ts';
import type { ClientOwner, McpTarget } from '../execution/mcp-dialer.ts';
import { type Asker, MISSING_CAPABILITY } from './input-rounds.ts';
import { rpcError } from './rpc-error.ts';

/** Separates a server's slug from a tool, prompt or resource name on the aggregate endpoint (slugs have no `_`). */
export const NAMESPACE_SEPARATOR = '__';
export const DEFAULT_APPROVAL_WAIT_MS = 30_000;
/** JSON-RPC error code of an operation policy refused (resources/read, prompts/get). */
export const POLICY_REFUSED = -32003;
/** Warden's namespace for `_meta` and error `data` keys. */
const WARDEN_META_PREFIX = 'dev.agentwarden/';
/** `_meta` key of a result that names the approval it waits for. */
export const APPROVAL_META = `${WARDEN_META_PREFIX}approval`;
/** JSON-RPC code of a task this agent does not have (what the SDK's servers answer too). */
export const INVALID_PARAMS = -32602;

/** Who calls the gateway: the request's identity, the agent acting, and the client session it belongs to (if the client keeps one). */
export interface GatewayCaller {
  ctx: RequestContext;
  agent: AgentRow;
  /** Whose upstream sessions the request uses: its client session's, declaring what that client declared (absent: the agent's, declaring nothing). */
  client?: ClientOwner;
  /** Whether the same agent, by the same credentials, may still act (asked again while a stream lasts). */
  stillAllowed?: () => Promise<boolean>;
}

export interface GatewayOptions {
  /** How long a call that needs an approval is held open for it (WARDEN_MCP_APPROVAL_WAIT_MS). */
  approvalWaitMs: number;
  /** How often a session's GET stream is checked again and kept alive (WARDEN_MCP_STREAM_CHECK_MS). */
  streamCheckMs: number;
}

/**
 * What an upstream notifies, as the client of `endpoint` sees it: on the aggregate (no single
 * server), the URI of a resource update carries the server's prefix, as the resource's listing did.
 */
export function asClientSees(target: McpTarget, single: boolean, notification: ServerNotification): ServerNotification {
  if (single || notification.method !== 'notifications/resources/updated') return notification;
  return { ...notification, params: { ...notification.params, uri: `${target.slug}${NAMESPACE_SEPARATOR}${notification.params.uri}` } };
}

/** A resource URI in the one form it is decided on and sent in; a URI that has none is invalid params. */
export function resourceUri(uri: string): string {
  try {
    return normaliseResourceUri(uri);
  } catch (error) {
    if (error instanceof ResourceUriError) throw rpcError(INVALID_PARAMS, error.message);
    throw error;
  }
}

/** A tools/call through the gateway: who calls, the server and tool it names there, and where it came from. */
export interface ToolCall {
  caller: GatewayCaller;
  target: McpTarget;
  tool: string;
  args: Record<string, unknown>;
  extra: Extra;
  /** Where the caller reaches Warden (for the approval links it is shown). */
  origin: string;
  /** Called on the aggregate endpoint (names and URIs the client sees carry the server's prefix). */
  aggregate: boolean;
}

/** What a call policy did not let run says, and the `_meta` naming the approval it waits for. */
export interface Refused {
  message: string;
  meta?: Record<string, unknown>;
  /** The same answer in a 2026-07-28 client's own terms: `input_required` with a URL elicitation to where it is decided. */
  inputRequired?: Record<string, unknown>;
}

export type Extra = {
  signal: AbortSignal;
  _meta?: { progressToken?: string | number };
  sendNotification: (notification: ServerNotification) => Promise<void>;
  /** Asks the client what the upstream asks during this request, once decided (absent: nothing can carry it to the client). */
  ask?: Asker;
  /**
   * The client takes a pending approval as `input_required` (a URL elicitation to the approval
   * page, revision 2026-07-28) and retries, instead of a connection held open while it waits.
   */
  handBack?: boolean;
  /** The upstream polls (relay.ts): the client's stream is closed after a priming event, and it resumes (polled-streams.ts). */
  polled?: () => void;
  /** The client declared the tasks extension on this request (revision 2026-07-28): it takes a task for an answer. */
  tasks?: boolean;
};

export const text = (message: string, meta?: Record<string, unknown>): CallToolResult => ({
  content: [{ type: 'text', text: message }],
  isError: true,
  ...(meta ? { _meta: meta } : {}),
});

/** What a refused decision says, for a person reading the client's transcript. */
export function refusal(decided: DecisionOutcome): string {
  const { policy, message } = decided.result;
  return policy ? `Blocked by Warden policy '${policy}': ${message}` : `Blocked by Warden: ${message}`;
}

/** A JSON-RPC error the upstream sent (not one the SDK client made up: a timeout, a closed connection). */
export const upstreamAnswered = (error: unknown): error is McpError =>
  error instanceof McpError && error.code !== ErrorCode.RequestTimeout && error.code !== ErrorCode.ConnectionClosed;

/**
 * To tools/call, an upstream failure (a JSON-RPC error it answered included, named in the
 * message) or a refused target is the tool's error (the client shows it); anything else is a
 * protocol error, as is the upstream's MissingRequiredClientCapability (about the client, not the tool).
 */
export const asToolError = (error: unknown): CallToolResult | null =>
  error instanceof ApiError &&
  (error.status === 502 || error.code === 'execution_target_denied') &&
  !(upstreamAnswered(error.cause) && error.cause.code === MISSING_CAPABILITY)
    ? text(error.message)
    : null;

/** A JSON-RPC error for the client: the upstream's own error as it sent it, Warden's as its code and message. */
export const asProtocolError = (error: unknown): unknown => {
  if (!(error instanceof ApiError)) return error;
  if (upstreamAnswered(error.cause)) return upstreamError(error.cause);
  return rpcError(error.status >= 500 ? -32603 : -32600, error.message, { code: error.code });
};

/**
 * The upstream's JSON-RPC error with the message it sent (the SDK client prefixes `MCP error
 * <code>: `; sent on, it would be prefixed again). What would read as Warden's own is not
 * relayed as sent: code -32003 (a policy's refusal) becomes -32603, and `data` keys of
 * Warden's namespace are dropped.
 */
function upstreamError(received: McpError): McpError {
  const prefix = `MCP error ${received.code}: `;
  const message = bareMcpMessage(received.message);
  const data = isObject(received.data)
    ? Object.fromEntries(Object.entries(received.data).filter(([key]) => !key.startsWith(WARDEN_META_PREFIX)))
    : received.data;
  const relayed = new McpError(received.code === POLICY_REFUSED ? -32603 : received.code, '', data);
  relayed.message = received.code === POLICY_REFUSED ? `The upstream answered ${prefix}${message}` : message;
  return relayed;
}

/** Runs a tool call decided, held for its approval, and recorded (McpGateway.heldCall). */
export type HeldCall = <T>(
  call: ToolCall,
  run: (onProgress: (p: { progress: number; total?: number; message?: string }) => void) => {
    work: (client: Client) => Promise<T>;
    describe: (value: T) => Record<string, unknown>;
    dedicated?: boolean;
  },
) => Promise<{ value: T; decided: DecisionOutcome } | { refused: Refused }>;

/** How the gateway names itself to a client: per server, or the aggregate. */
export const serverInfo = (single: McpTarget | null) => ({ name: single ? `warden:${single.slug}` : 'warden', version: '1.0.0' });
