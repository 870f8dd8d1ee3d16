/**
 * The act a decision is about: what the caller declares (action, resource, tool, context)
 * and, under a proxy, what will actually run (the HTTP method, URL and headers with a digest
 * of the body, or the MCP server, tool and arguments). Policies decide on both, the audit log
 * records both, and an approval is bound to the digest of the whole act, so it authorises
 * that act and nothing else.
 */
import { hash } from 'node:crypto';
import type { EvaluationInput, HttpExecution } from '@warden/contract';
import { stableJson } from '../../shared/canonical-json.ts';
import { ApiError } from '../../shared/errors.ts';
import { redactHeaders, redactSecrets, redactUrl } from '../../shared/redact.ts';
import { checkBody, checkQuery, checkRawUrl, sentHeaders, sentPath } from './http-form.ts';

// Redaction lives in shared/ (traces use it too); re-exported for the features that import it from here.
export { REDACTED, redactSecrets, redactUrl } from '../../shared/redact.ts';

/** What an HTTP execution will send, normalised as the policy sees it. */
export interface HttpFacts {
  mode: 'http_proxy';
  method: string;
  /** scheme://host[:port]/path?query, the form the request is sent in (no fragment). */
  url: string;
  scheme: string;
  host: string;
  port: number;
  path: string;
  query: string;
  /** The headers as sent: lower-case names, values trimmed (see http-form.ts). */
  headers: Record<string, string>;
  body: unknown;
  body_sha256: string | null;
  /** The workspace credential Warden adds (`execution.credential`): its name, never its secret; null when none. */
  credential: string | null;
}

/** An MCP request as Warden sends it upstream: its method and params. */
export interface McpRequest {
  method: string;
  params?: Record<string, unknown>;
}

/**
 * What an MCP operation will send upstream: the method, what it names (tool, prompt or
 * resource URI) and every parameter that says what the upstream does. Not part of the act:
 * `_meta` (the client's progress token and related task name things of its hop with Warden; the
 * gateway does not forward them), `task` (how a tool call's result is delivered, not what runs)
 * and `cursor` (a page of one listing).
 */
export interface McpFacts {
  mode: 'mcp_proxy';
  server: string;
  /** tools/call, resources/read, prompts/get, tools/list, …, initialize for a session. */
  method: string;
  /** tools/call: the tool; otherwise null. */
  tool: string | null;
  /** prompts/get: the prompt; otherwise null. */
  prompt: string | null;
  /** resources/read and the like: the URI, normalised (resource-uri.ts) as it is sent; otherwise null. */
  uri: string | null;
  /** tools/call and prompts/get: the arguments as sent (`{}` when none); otherwise null. */
  arguments: Record<string, unknown> | null;
  arguments_sha256: string | null;
  /** The arguments' size as sent, in bytes of canonical JSON; null when there are none. */
  arguments_bytes: number | null;
  /** Every other parameter sent: `{}` when none. */
  params: Record<string, unknown>;
  /** SHA-256 of the canonical JSON of `params`; null when there are none. */
  params_sha256: string | null;
}

export type ExecutionFacts = HttpFacts | McpFacts;

const sha256 = (text: string) => hash('sha256', text, 'hex');

/** The HTTP request as decided on, bound into an approval and sent: one form (http-form.ts says what is refused). */
export function httpFacts(execution: HttpExecution): HttpFacts {
  checkRawUrl(execution.url);
  let parsed: URL;
  try {
    parsed = new URL(execution.url);
  } catch {
    throw new ApiError('invalid_execution_url', 'execution.url is not an absolute http(s) URL');
  }
  if (parsed.username || parsed.password) {
    throw new ApiError('invalid_execution_url', 'execution.url: credentials in the URL are not accepted; send them in headers');
  }
  const scheme = parsed.protocol.slice(0, -1);
  const host = parsed.hostname.replace(/\.$/, '');
  const port = parsed.port === '' ? (scheme === 'https' ? 443 : 80) : Number(parsed.port);
  const path = sentPath(parsed.pathname);
  const query = parsed.search;
  checkQuery(query);
  const authority = parsed.port === '' ? host : `${host}:${parsed.port}`;
  const hasBody = execution.body !== undefined && execution.body !== null;
  if (hasBody) checkBody(execution.body);
  const headers = sentHeaders(execution.headers, hasBody);
  return {
    mode: 'http_proxy',
    method: execution.method,
    url: `${scheme}://${authority}${path}${query}`,
    scheme,
    host,
    port,
    path,
    query,
    headers,
    body: hasBody ? execution.body : null,
    // the digest of the very bytes the proxy sends (JSON.stringify of the body)
    body_sha256: hasBody ? sha256(JSON.stringify(execution.body)) : null,
    credential: execution.credential ?? null,
  };
}

/** Params that are not part of an MCP act (see McpFacts). */
const UNBOUND_PARAMS = new Set(['_meta', 'task', 'cursor']);
/** Methods whose `name` param is a tool's, a prompt's. */
const NAMES: Record<string, 'tool' | 'prompt'> = { 'tools/call': 'tool', 'prompts/get': 'prompt' };

export function mcpFacts(server: string, request: McpRequest): McpFacts {
  const { method } = request;
  const facts: McpFacts = {
    mode: 'mcp_proxy',
    server,
    method,
    tool: null,
    prompt: null,
    uri: null,
    arguments: null,
    arguments_sha256: null,
    arguments_bytes: null,
    params: {},
    params_sha256: null,
  };
  const named = NAMES[method];
  for (const [key, value] of Object.entries(request.params ?? {})) {
    if (UNBOUND_PARAMS.has(key) || value === undefined) continue;
    if (key === 'name' && named && typeof value === 'string') facts[named] = value;
    else if (key === 'uri' && typeof value === 'string') facts.uri = value;
    else if (key === 'arguments' && named && (value === null || typeof value === 'object') && !Array.isArray(value))
      facts.arguments = (value ?? {}) as Record<string, unknown>;
    else facts.params[key] = value;
  }
  if (named) {
    facts.arguments ??= {};
    const sent = stableJson(facts.arguments);
    facts.arguments_sha256 = sha256(sent);
    facts.arguments_bytes = Buffer.byteLength(sent);
  }
  if (Object.keys(facts.params).length > 0) facts.params_sha256 = sha256(stableJson(facts.params));
  return facts;
}

/**
 * The action each MCP method is decided as, whatever its caller declares (the gateway's and the
 * runtime's fixed actions: a policy matches them in `match.action`). The audit log records the
 * declared action and the method, so a replay of an audited act decides it on both as well.
 */
export const MCP_METHOD_ACTIONS: Readonly<Record<string, string>> = {
  initialize: 'mcp.session',
  'tools/call': 'mcp.call',
  'tools/list': 'mcp.discover',
  'prompts/list': 'mcp.discover',
  'resources/list': 'mcp.discover',
  'resources/templates/list': 'mcp.discover',
  'resources/read': 'mcp.resources.read',
  'prompts/get': 'mcp.prompts.get',
  'logging/setLevel': 'mcp.logging',
  'completion/complete': 'mcp.completion',
  'resources/subscribe': 'mcp.resources.subscribe',
  'resources/unsubscribe': 'mcp.resources.subscribe',
  'sampling/createMessage': 'mcp.sampling',
  'elicitation/create': 'mcp.elicitation',
  'roots/list': 'mcp.roots',
};

/** What an MCP tool call's `resource` is when its caller declares none: the tool's address, `mcp://github/tools/create_issue`. */
export const mcpToolAddress = (server: string, tool: string) => `mcp://${server}/tools/${encodeURIComponent(tool)}`;

/**
 * The act as the caller declares it, completed by what runs: an MCP tool call's `tool` is the
 * executed tool (a different declared one is refused) and its `resource` defaults to the tool's
 * address, and an HTTP execution's `resource` defaults to its URL (redacted: it is recorded; the
 * policy's executed view has the real one). So a recorded act always says what it touched.
 */
export function declaredInput(input: EvaluationInput, facts: ExecutionFacts | null): EvaluationInput {
  checkContextSize(input.context, 'input.context');
  if (facts?.mode === 'mcp_proxy' && facts.tool !== null) {
    if (input.tool !== undefined && input.tool !== facts.tool) {
      throw new ApiError('invalid_request', `input.tool '${input.tool}' differs from the executed tool '${facts.tool}'`);
    }
    return { ...input, tool: facts.tool, resource: input.resource ?? mcpToolAddress(facts.server, facts.tool) };
  }
  // the URL as the audit log may show it (secret query values redacted)
  if (facts?.mode === 'http_proxy' && input.resource === undefined) return { ...input, resource: redactUrl(facts.url) };
  return input;
}

/**
 * The views of an act that policy decides on: what runs (an HTTP execution's resource is its
 * URL, an MCP tool call's its address, an MCP operation's action is fixed) and, when it
 * differs, what the caller declares: a declaration can add a restriction, never lift one.
 */
export function actViews<Input extends { action: string; resource?: string; execution?: ExecutionFacts | null }>(
  declared: Input,
  fixedAction: string | undefined,
): Input[] {
  const facts = declared.execution;
  // what runs: an HTTP execution's URL, an MCP tool call's address (a declared resource adds a view, never replaces it)
  const resource =
    facts?.mode === 'http_proxy'
      ? facts.url
      : facts?.mode === 'mcp_proxy' && facts.tool !== null
        ? mcpToolAddress(facts.server, facts.tool)
        : undefined;
  const action = fixedAction ?? declared.action;
  const executed =
    (resource !== undefined && declared.resource !== resource) || declared.action !== action
      ? { ...declared, action, ...(resource !== undefined ? { resource } : {}) }
      : declared;
  return executed === declared ? [declared] : [executed, declared];
}

/**
 * What an approval is titled: the act as a person tells two apart — the MCP server and the
 * tool, prompt or resource (`tools/call github create_issue`), the HTTP method and URL with
 * secret query values redacted (`POST api.example.com/transfer`), or the declared action and
 * resource — and who asks.
 */
export function approvalTitle(input: EvaluationInput, facts: ExecutionFacts | null, agent: string): string {
  if (facts?.mode === 'mcp_proxy') {
    const target = facts.tool ?? facts.prompt ?? facts.uri;
    return `${facts.method} ${facts.server}${target ? ` ${target}` : ''} by ${agent}`;
  }
  if (facts?.mode === 'http_proxy') {
    const url = new URL(redactUrl(facts.url));
    return `${facts.method} ${url.host}${url.pathname}${url.search} by ${agent}`;
  }
  return `${input.action}${input.resource ? ` on ${input.resource}` : ''} by ${agent}`;
}

/**
 * A decision's context is facts for conditions, recorded with the decision (and shown with an
 * approval): bounded, so that no caller can make every decision it sends cost the shared event
 * loop and the audit log hundreds of kilobytes.
 */
export const MAX_CONTEXT_BYTES = 65_536;

export function checkContextSize(context: Record<string, unknown> | undefined, what: string): void {
  if (context === undefined) return;
  const bytes = Buffer.byteLength(JSON.stringify(context));
  if (bytes > MAX_CONTEXT_BYTES) {
    throw new ApiError(
      'invalid_request',
      `${what}: at most ${MAX_CONTEXT_BYTES.toLocaleString('en-US')} bytes of JSON; this one has ${bytes.toLocaleString('en-US')}`,
    );
  }
}

/** The credential an HTTP act names, as it is recorded and shown: `credential_name` (a name is not a secret: shared/redact.ts). */
const credentialNamed = (facts: HttpFacts) => (facts.credential === null ? {} : { credential_name: facts.credential });

/** The parts of an execution an approval is bound to (bodies and arguments by digest). */
const boundExecution = (facts: ExecutionFacts | null) => {
  if (facts === null) return null;
  if (facts.mode === 'http_proxy')
    return {
      mode: facts.mode,
      method: facts.method,
      url: facts.url,
      headers: facts.headers,
      body_sha256: facts.body_sha256,
      // only when named, so that approvals asked for before credentials existed stay valid
      ...credentialNamed(facts),
    };
  // a tool call whose only params are its name and arguments is bound as before, so that approvals asked for stay valid
  if (facts.method === 'tools/call' && facts.params_sha256 === null)
    return { mode: facts.mode, server: facts.server, tool: facts.tool, arguments_sha256: facts.arguments_sha256 };
  return {
    mode: facts.mode,
    server: facts.server,
    method: facts.method,
    tool: facts.tool,
    prompt: facts.prompt,
    uri: facts.uri,
    arguments_sha256: facts.arguments_sha256,
    params_sha256: facts.params_sha256,
  };
};

/**
 * The digest of an act: the agent, the environment, the declared input (context included)
 * and the execution, as canonical JSON. Equal acts have equal digests, whatever the order of
 * their keys.
 */
export function actDigest(agentId: string, environment: string, input: EvaluationInput, facts: ExecutionFacts | null): string {
  return sha256(
    stableJson({
      v: 1,
      agent: agentId,
      environment,
      action: input.action,
      resource: input.resource ?? null,
      tool: input.tool ?? null,
      context: input.context ?? {},
      execution: boundExecution(facts),
    }),
  );
}

/** The most of an MCP act's arguments the audit log keeps (canonical JSON, secrets redacted); larger ones by size and digest (docs/decisions/0026-audited-mcp-arguments.md). */
export const AUDITED_ARGUMENTS_MAX_BYTES = 8 * 1024;

/**
 * What the audit log records of an execution: enough to know what ran, no secret. An outcome's
 * record (`withArguments` false) leaves the arguments to the decision's record it names.
 */
export function auditedExecution(facts: ExecutionFacts, withArguments = true): Record<string, unknown> {
  // the arguments redacted when they take at most 8 KiB as sent, else their size as sent
  const keptArguments =
    facts.mode !== 'mcp_proxy' || !withArguments || facts.arguments === null
      ? {}
      : (facts.arguments_bytes ?? 0) <= AUDITED_ARGUMENTS_MAX_BYTES
        ? { arguments: redactSecrets(facts.arguments) }
        : { arguments_bytes: facts.arguments_bytes };
  if (facts.mode === 'http_proxy') {
    return {
      mode: facts.mode,
      method: facts.method,
      url: redactUrl(facts.url),
      host: facts.host,
      path: facts.path,
      headers: redactHeaders(facts.headers),
      body_sha256: facts.body_sha256,
      ...credentialNamed(facts),
    };
  }
  return {
    mode: facts.mode,
    server: facts.server,
    method: facts.method,
    tool: facts.tool,
    ...named(facts),
    ...keptArguments,
    arguments_sha256: facts.arguments_sha256,
    ...(facts.params_sha256 === null ? {} : { params_sha256: facts.params_sha256 }),
  };
}

/** An MCP act's prompt and URI, where it has them (a URI's secret-looking query values redacted: it is shown and recorded). */
const named = (facts: McpFacts) => ({
  ...(facts.prompt === null ? {} : { prompt: facts.prompt }),
  ...(facts.uri === null ? {} : { uri: redactUri(facts.uri) }),
});

function redactUri(uri: string): string {
  try {
    return redactUrl(uri);
  } catch {
    return uri; // not a URL WHATWG parses: it has no query it could read either
  }
}

/** What an approver is shown of the execution they authorise: all of it, secrets redacted. */
export function shownExecution(facts: ExecutionFacts): Record<string, unknown> {
  if (facts.mode === 'http_proxy') {
    return {
      mode: facts.mode,
      method: facts.method,
      url: redactUrl(facts.url),
      headers: redactHeaders(facts.headers),
      body: redactSecrets(facts.body),
      body_sha256: facts.body_sha256,
      ...credentialNamed(facts),
    };
  }
  return {
    mode: facts.mode,
    server: facts.server,
    method: facts.method,
    tool: facts.tool,
    ...named(facts),
    arguments: redactSecrets(facts.arguments),
    arguments_sha256: facts.arguments_sha256,
    ...(facts.params_sha256 === null ? {} : { params: redactSecrets(facts.params), params_sha256: facts.params_sha256 }),
  };
}
