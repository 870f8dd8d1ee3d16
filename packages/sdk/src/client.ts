/**
 * `createWarden`: the resource-grouped client over the generated operations. Every method
 * returns the unwrapped `data` of the answer (lists: the page `{data, has_more, next_cursor}`)
 * and throws a `WardenError` for anything else.
 */
import { type ProveOptions, prove, type VerifiedInclusion } from './audit-prove.js';
import { WardenError } from './errors.js';
import { type Client, createClient, createConfig } from './generated/client/index.js';
import * as op from './generated/sdk.gen.js';
import type * as T from './generated/types.gen.js';
import { paginate } from './pagination.js';
import { createTransport, DEFAULT_RETRY, type RetryOptions, type TransportSettings } from './retry.js';

export const DEFAULT_BASE_URL = 'http://127.0.0.1:8080/api/v1';
/** Above the server's own upstream limits (30 s for proxied HTTP and MCP), so its 502 arrives first. */
export const DEFAULT_TIMEOUT_MS = 60_000;
export const AGENT_KEY_HEADER = 'X-Warden-Agent-Key';

export interface WardenOptions {
  /** Workspace API key (`wk_…`). Sent as `Authorization: Bearer …` on every operation but `health()`. */
  apiKey: string;
  /**
   * The calling agent's own key (its `api_key` at registration), sent as `X-Warden-Agent-Key`
   * on runtime operations (`policy.evaluate`, `runtime.*`). Override it per call with `{ agentKey }`.
   */
  agentKey?: string;
  /** Up to and including `/api/v1`. Default `http://127.0.0.1:8080/api/v1`. */
  baseUrl?: string;
  /** Per attempt, until the whole answer is read; 0 disables. Default 60 000. */
  timeoutMs?: number;
  /** Retries after the first attempt (429, 503, network errors; see README). Default 2. */
  maxRetries?: number;
  /** Backoff tuning; `maxRetries` above wins over `retry.maxRetries`. */
  retry?: RetryOptions;
  /** A fetch implementation (default `globalThis.fetch`), e.g. for proxies or tests. */
  fetch?: typeof fetch;
  /** Headers added to every request. */
  headers?: Record<string, string>;
}

/** Options of one call; each overrides the client's setting for that call only. */
export interface RequestOptions {
  signal?: AbortSignal;
  headers?: Record<string, string>;
  timeoutMs?: number;
  maxRetries?: number;
  /** `X-Warden-Agent-Key` for this call (runtime operations). */
  agentKey?: string;
}

type Query<TData extends { query?: unknown }> = NonNullable<TData['query']>;
type IterateQuery<TData extends { query?: unknown }> = Omit<Query<TData>, 'cursor'> & { cursor?: string };

type Result<TData> = ({ data: TData; error: undefined } | { data: undefined; error: unknown }) & { response: Response };

/** The generated operation's `{data, error, response}` → its data, or a thrown `WardenError`. */
async function unwrap<TData>(pending: Promise<Result<TData>>): Promise<TData> {
  const result = await pending;
  if (result.error === undefined) return result.data as TData;
  if (result.error instanceof WardenError) throw result.error;
  // No response: the caller aborted (the AbortError is passed on) or something unexpected.
  if (!result.response) throw result.error;
  throw WardenError.fromResponse(result.response, result.error);
}

export function createWarden(options: WardenOptions) {
  if (typeof options?.apiKey !== 'string' || options.apiKey === '') {
    throw new TypeError('createWarden: `apiKey` (a workspace API key, wk_…) is required');
  }
  const { apiKey, agentKey } = options;
  const settings: TransportSettings = {
    ...DEFAULT_RETRY,
    ...options.retry,
    ...(options.maxRetries === undefined ? {} : { maxRetries: options.maxRetries }),
    timeoutMs: options.timeoutMs ?? DEFAULT_TIMEOUT_MS,
    fetch: options.fetch ?? ((input, init) => globalThis.fetch(input, init)),
  };
  const transport = createTransport(settings);

  const client: Client = createClient(
    createConfig({
      baseUrl: (options.baseUrl ?? DEFAULT_BASE_URL).replace(/\/+$/, ''),
      headers: options.headers,
      fetch: transport,
      auth: (auth) => (auth.name === AGENT_KEY_HEADER ? agentKey : apiKey),
    }),
  );

  /** What every generated call gets: our client, and per-call overrides. */
  const call = (opts: RequestOptions = {}) => {
    const headers: Record<string, string> = { ...opts.headers };
    if (opts.agentKey !== undefined) headers[AGENT_KEY_HEADER] = opts.agentKey;
    const custom = opts.timeoutMs !== undefined || opts.maxRetries !== undefined;
    return {
      client,
      signal: opts.signal,
      headers,
      ...(custom
        ? {
            fetch: createTransport({
              ...settings,
              ...(opts.timeoutMs === undefined ? {} : { timeoutMs: opts.timeoutMs }),
              ...(opts.maxRetries === undefined ? {} : { maxRetries: opts.maxRetries }),
            }),
          }
        : {}),
    };
  };

  const agents = {
    /** One page of agents, newest first. */
    list: async (query?: Query<T.ListAgentsData>, opts?: RequestOptions): Promise<T.AgentPage> =>
      unwrap(op.listAgents({ ...call(opts), query })),
    /** Every agent matching `query`, page after page: `for await (const agent of warden.agents.iterate())`. */
    iterate: (query: IterateQuery<T.ListAgentsData> = {}, opts?: RequestOptions): AsyncGenerator<T.Agent, void, undefined> => {
      const { cursor: start, ...rest } = query;
      return paginate((cursor) => agents.list({ ...rest, ...(cursor ? { cursor } : {}) }, opts), start);
    },
    /** Registers an agent. `api_key`, if given, becomes its agent key (stored hashed, never returned). */
    create: async (body: T.CreateAgentData['body'], opts?: RequestOptions): Promise<T.Agent> =>
      (await unwrap(op.createAgent({ ...call(opts), body }))).data,
    /** By id or slug. */
    get: async (id: string, opts?: RequestOptions): Promise<T.Agent> => (await unwrap(op.getAgent({ ...call(opts), path: { id } }))).data,
    update: async (id: string, body: T.UpdateAgentData['body'], opts?: RequestOptions): Promise<T.Agent> =>
      (await unwrap(op.updateAgent({ ...call(opts), path: { id }, body }))).data,
    delete: async (id: string, opts?: RequestOptions): Promise<T.Deleted['data']> =>
      (await unwrap(op.deleteAgent({ ...call(opts), path: { id } }))).data,
  };

  const policies = {
    list: async (query?: Query<T.ListPoliciesData>, opts?: RequestOptions): Promise<T.PolicyPage> =>
      unwrap(op.listPolicies({ ...call(opts), query })),
    iterate: (query: IterateQuery<T.ListPoliciesData> = {}, opts?: RequestOptions): AsyncGenerator<T.Policy, void, undefined> => {
      const { cursor: start, ...rest } = query;
      return paginate((cursor) => policies.list({ ...rest, ...(cursor ? { cursor } : {}) }, opts), start);
    },
    create: async (body: T.CreatePolicyData['body'], opts?: RequestOptions): Promise<T.Policy> =>
      (await unwrap(op.createPolicy({ ...call(opts), body }))).data,
    /** By id or name. */
    get: async (id: string, opts?: RequestOptions): Promise<T.Policy> => (await unwrap(op.getPolicy({ ...call(opts), path: { id } }))).data,
    update: async (id: string, body: T.UpdatePolicyData['body'], opts?: RequestOptions): Promise<T.Policy> =>
      (await unwrap(op.updatePolicy({ ...call(opts), path: { id }, body }))).data,
    /**
     * What-if replay: the workspace's recent recorded decisions decided again by a draft policy
     * set (nothing is saved); answers the counts and the changed decisions grouped by rule.
     */
    simulate: async (body: T.SimulatePoliciesData['body'], opts?: RequestOptions): Promise<T.PolicySimulation> =>
      (await unwrap(op.simulatePolicies({ ...call(opts), body }))).data,
    /** By id or name; the next decision already ignores it. */
    delete: async (id: string, opts?: RequestOptions): Promise<T.Deleted['data']> =>
      (await unwrap(op.deletePolicy({ ...call(opts), path: { id } }))).data,
    /**
     * Policies as code: makes the workspace's policies those of a bundle, as one change (one
     * audit event naming its digest); `dry_run` answers what would change. Idempotent.
     */
    applyBundle: async (body: T.ApplyPolicyBundleData['body'], opts?: RequestOptions): Promise<T.PolicyBundleResult> =>
      (await unwrap(op.applyPolicyBundle({ ...call(opts), body }))).data,
  };

  const approvals = {
    list: async (query?: Query<T.ListApprovalsData>, opts?: RequestOptions): Promise<T.ApprovalPage> =>
      unwrap(op.listApprovals({ ...call(opts), query })),
    iterate: (query: IterateQuery<T.ListApprovalsData> = {}, opts?: RequestOptions): AsyncGenerator<T.Approval, void, undefined> => {
      const { cursor: start, ...rest } = query;
      return paginate((cursor) => approvals.list({ ...rest, ...(cursor ? { cursor } : {}) }, opts), start);
    },
    create: async (body: T.CreateApprovalData['body'], opts?: RequestOptions): Promise<T.Approval> =>
      (await unwrap(op.createApproval({ ...call(opts), body }))).data,
    get: async (id: string, opts?: RequestOptions): Promise<T.Approval> =>
      (await unwrap(op.getApproval({ ...call(opts), path: { id } }))).data,
    /** Approves or rejects a pending approval (needs `approvals:decide`); deciding twice is 409 `approval_already_decided`. */
    decide: async (id: string, body: T.DecideApprovalData['body'], opts?: RequestOptions): Promise<T.Approval> =>
      (await unwrap(op.decideApproval({ ...call(opts), path: { id }, body }))).data,
  };

  const audit = {
    /** Records an event the caller observed itself (`POST /audit`). */
    record: async (body: T.CreateAuditEventData['body'], opts?: RequestOptions): Promise<T.AuditEventCreated['data']> =>
      (await unwrap(op.createAuditEvent({ ...call(opts), body }))).data,
    /** One page of full audit events (`GET /audit-logs`). */
    logs: async (query?: Query<T.ListAuditLogsData>, opts?: RequestOptions): Promise<T.AuditEventPage> =>
      unwrap(op.listAuditLogs({ ...call(opts), query })),
    iterateLogs: (query: IterateQuery<T.ListAuditLogsData> = {}, opts?: RequestOptions): AsyncGenerator<T.AuditEvent, void, undefined> => {
      const { cursor: start, ...rest } = query;
      return paginate((cursor) => audit.logs({ ...rest, ...(cursor ? { cursor } : {}) }, opts), start);
    },
    /** One page of event summaries (`GET /events`). */
    events: async (query?: Query<T.ListEventsData>, opts?: RequestOptions): Promise<T.AuditEventSummaryPage> =>
      unwrap(op.listEvents({ ...call(opts), query })),
    iterateEvents: (
      query: IterateQuery<T.ListEventsData> = {},
      opts?: RequestOptions,
    ): AsyncGenerator<T.AuditEventSummary, void, undefined> => {
      const { cursor: start, ...rest } = query;
      return paginate((cursor) => audit.events({ ...rest, ...(cursor ? { cursor } : {}) }, opts), start);
    },
    /** Checks the workspace's hash chain; `{ full: true }` re-checks every event, not only those since the last check. */
    verify: async (opts: RequestOptions & Query<T.VerifyAuditChainData> = {}): Promise<T.AuditVerification['data']> => {
      const { full, ...rest } = opts;
      return (await unwrap(op.verifyAuditChain({ ...call(rest), ...(full === undefined ? {} : { query: { full } }) }))).data;
    },
    /** How far the workspace's full verification (`verify({ full: true })`) has come: queued, running (`checked` of `total`) or idle. */
    verificationStatus: async (opts?: RequestOptions): Promise<T.AuditVerificationStatus['data']> =>
      (await unwrap(op.getAuditVerificationStatus({ ...call(opts) }))).data,
    /** The log's public key (`verifier_key`): pin it once, and verify checkpoints and proofs with it. */
    signingKey: async (opts?: RequestOptions): Promise<T.AuditSigningKeyResponse['data']> =>
      (await unwrap(op.getAuditSigningKey({ ...call(opts) }))).data,
    /** The latest signed checkpoint, or the one of exactly `tree_size` events (404 when there is none yet). */
    checkpoint: async (query?: Query<T.GetAuditCheckpointData>, opts?: RequestOptions): Promise<T.AuditCheckpoint> =>
      (await unwrap(op.getAuditCheckpoint({ ...call(opts), query }))).data,
    /** The inclusion proof of a sealed event, raw (verify it with `verifyInclusion`, or use `prove`). */
    inclusionProof: async (query: Query<T.GetAuditInclusionProofData>, opts?: RequestOptions): Promise<T.AuditInclusionProof> =>
      (await unwrap(op.getAuditInclusionProof({ ...call(opts), query }))).data,
    /** The consistency proof between two tree sizes, raw (verify it with `verifyConsistency`). */
    consistencyProof: async (query: Query<T.GetAuditConsistencyProofData>, opts?: RequestOptions): Promise<T.AuditConsistencyProof> =>
      (await unwrap(op.getAuditConsistencyProof({ ...call(opts), query }))).data,
    /**
     * Proves that an event is in the log, in one call: the latest checkpoint verified with the
     * pinned `publicKey`, the inclusion proof at that checkpoint's size, verified to its root.
     * Waits (up to `waitMs`) for an event not yet sealed or checkpointed; throws
     * `AuditProofError` when anything does not verify (`unknown_key` for another key).
     */
    prove: (eventId: string, options: ProveOptions, opts?: RequestOptions): Promise<VerifiedInclusion> =>
      prove(
        { checkpoint: () => audit.checkpoint(undefined, opts), inclusionProof: (query) => audit.inclusionProof(query, opts) },
        eventId,
        options,
      ),
  };

  const workspaceSettings = {
    /** The workspace's settings (its default decision per environment). */
    get: async (opts?: RequestOptions): Promise<T.Settings> => (await unwrap(op.getSettings({ ...call(opts) }))).data,
    /** Changes the fields given; the next decision uses them. */
    update: async (body: T.UpdateSettingsData['body'], opts?: RequestOptions): Promise<T.Settings> =>
      (await unwrap(op.updateSettings({ ...call(opts), body }))).data,
  };

  const mcpServers = {
    list: async (query?: Query<T.ListMcpServersData>, opts?: RequestOptions): Promise<T.McpServerPage> =>
      unwrap(op.listMcpServers({ ...call(opts), query })),
    iterate: (query: IterateQuery<T.ListMcpServersData> = {}, opts?: RequestOptions): AsyncGenerator<T.McpServer, void, undefined> => {
      const { cursor: start, ...rest } = query;
      return paginate((cursor) => mcpServers.list({ ...rest, ...(cursor ? { cursor } : {}) }, opts), start);
    },
    create: async (body: T.CreateMcpServerData['body'], opts?: RequestOptions): Promise<T.McpServer> =>
      (await unwrap(op.createMcpServer({ ...call(opts), body }))).data,
    get: async (id: string, opts?: RequestOptions): Promise<T.McpServer> =>
      (await unwrap(op.getMcpServer({ ...call(opts), path: { id } }))).data,
    update: async (id: string, body: T.UpdateMcpServerData['body'], opts?: RequestOptions): Promise<T.McpServer> =>
      (await unwrap(op.updateMcpServer({ ...call(opts), path: { id }, body }))).data,
    delete: async (id: string, opts?: RequestOptions): Promise<T.Deleted['data']> =>
      (await unwrap(op.deleteMcpServer({ ...call(opts), path: { id } }))).data,
    /** Starts an OAuth connection, the workspace's or `{ agent }`'s own: send the admin's browser to `authorization_url`. */
    connectOAuth: async (
      id: string,
      body?: T.ConnectMcpServerOAuthData['body'],
      opts?: RequestOptions,
    ): Promise<T.McpServerOAuthAuthorization> => (await unwrap(op.connectMcpServerOAuth({ ...call(opts), path: { id }, body }))).data,
    /** Ends an OAuth connection, the workspace's or `{ agent }`'s (its refresh token revoked where the authorization server can). */
    disconnectOAuth: async (id: string, query?: Query<T.DisconnectMcpServerOAuthData>, opts?: RequestOptions): Promise<T.McpServer> =>
      (await unwrap(op.disconnectMcpServerOAuth({ ...call(opts), path: { id }, query }))).data,
  };

  /** Upstream secrets Warden adds for agents (`execution.credential`): write-only, answered with a hint. */
  const credentials = {
    list: async (query?: Query<T.ListCredentialsData>, opts?: RequestOptions): Promise<T.CredentialPage> =>
      unwrap(op.listCredentials({ ...call(opts), query })),
    iterate: (query: IterateQuery<T.ListCredentialsData> = {}, opts?: RequestOptions): AsyncGenerator<T.Credential, void, undefined> => {
      const { cursor: start, ...rest } = query;
      return paginate((cursor) => credentials.list({ ...rest, ...(cursor ? { cursor } : {}) }, opts), start);
    },
    create: async (body: T.CreateCredentialData['body'], opts?: RequestOptions): Promise<T.Credential> =>
      (await unwrap(op.createCredential({ ...call(opts), body }))).data,
    get: async (idOrName: string, opts?: RequestOptions): Promise<T.Credential> =>
      (await unwrap(op.getCredential({ ...call(opts), path: { id: idOrName } }))).data,
    update: async (idOrName: string, body: T.UpdateCredentialData['body'], opts?: RequestOptions): Promise<T.Credential> =>
      (await unwrap(op.updateCredential({ ...call(opts), path: { id: idOrName }, body }))).data,
    delete: async (idOrName: string, opts?: RequestOptions): Promise<T.Deleted['data']> =>
      (await unwrap(op.deleteCredential({ ...call(opts), path: { id: idOrName } }))).data,
  };

  /** What MCP clients were granted by OAuth (the built-in authorization server): listed, and revoked at once. */
  const oauthGrants = {
    list: async (query?: Query<T.ListOAuthGrantsData>, opts?: RequestOptions): Promise<T.OAuthGrantPage> =>
      unwrap(op.listOAuthGrants({ ...call(opts), query })),
    iterate: (query: IterateQuery<T.ListOAuthGrantsData> = {}, opts?: RequestOptions): AsyncGenerator<T.OAuthGrant, void, undefined> => {
      const { cursor: start, ...rest } = query;
      return paginate((cursor) => oauthGrants.list({ ...rest, ...(cursor ? { cursor } : {}) }, opts), start);
    },
    revoke: async (id: string, opts?: RequestOptions): Promise<T.OAuthGrantResponse['data']> =>
      (await unwrap(op.revokeOAuthGrant({ ...call(opts), path: { id } }))).data,
  };

  return {
    agents,
    policies,
    oauthGrants,
    approvals,
    audit,
    mcpServers,
    credentials,
    settings: workspaceSettings,
    compliance: {
      /** The workspace's compliance score, computed when asked for. */
      status: async (opts?: RequestOptions): Promise<T.ComplianceStatus['data']> =>
        (await unwrap(op.getComplianceStatus({ ...call(opts) }))).data,
    },
    policy: {
      /**
       * Asks whether an agent may act. Not allowed is an answer, not an error: check
       * `allowed` (and `approval_id` for `require_approval`).
       */
      evaluate: async (body: T.EvaluatePolicyData['body'], opts?: RequestOptions): Promise<T.EvaluationResult> =>
        (await unwrap(op.evaluatePolicy({ ...call(opts), body }))).data,
    },
    runtime: {
      /** Decides, and when allowed performs the action through Warden (HTTP or MCP). */
      execute: async (body: T.ExecuteRuntimeData['body'], opts?: RequestOptions): Promise<T.ExecutionResponse['data']> =>
        (await unwrap(op.executeRuntime({ ...call(opts), body }))).data,
      mcp: {
        discover: async (body: T.DiscoverMcpToolsData['body'], opts?: RequestOptions): Promise<T.McpDiscoverResponse['data']> =>
          (await unwrap(op.discoverMcpTools({ ...call(opts), body }))).data,
        call: async (body: T.CallMcpToolData['body'], opts?: RequestOptions): Promise<T.McpCallResponse['data']> =>
          (await unwrap(op.callMcpTool({ ...call(opts), body }))).data,
        session: async (body: T.OpenMcpSessionData['body'], opts?: RequestOptions): Promise<T.McpSessionResponse['data']> =>
          (await unwrap(op.openMcpSession({ ...call(opts), body }))).data,
      },
    },
    /** Liveness; needs no key. A degraded server (503) throws a `WardenError` whose `body` is the health report. */
    health: async (opts?: RequestOptions): Promise<T.Health['data']> => (await unwrap(op.getHealth({ ...call(opts) }))).data,
    /**
     * The underlying generated client, authenticated and retrying like the methods above, for
     * the raw `{data, error, response}` style: `operations.listAgents({ client: warden.client })`.
     */
    client,
  };
}

export type Warden = ReturnType<typeof createWarden>;

/**
 * The method of the client that calls each v1 operation (aliases: the method of the operation
 * they alias). Keyed by the generated operation names, so an operation added to the spec
 * without a method is a compile error here.
 */
export const OPERATION_METHODS: Record<keyof typeof op, string> = {
  getHealth: 'health',
  listAgents: 'agents.list',
  createAgent: 'agents.create',
  getAgent: 'agents.get',
  updateAgent: 'agents.update',
  deleteAgent: 'agents.delete',
  listPolicies: 'policies.list',
  createPolicy: 'policies.create',
  getPolicy: 'policies.get',
  updatePolicy: 'policies.update',
  deletePolicy: 'policies.delete',
  simulatePolicies: 'policies.simulate',
  applyPolicyBundle: 'policies.applyBundle',
  getSettings: 'settings.get',
  updateSettings: 'settings.update',
  evaluatePolicy: 'policy.evaluate',
  executeRuntime: 'runtime.execute',
  discoverMcpTools: 'runtime.mcp.discover',
  callMcpTool: 'runtime.mcp.call',
  openMcpSession: 'runtime.mcp.session',
  listApprovals: 'approvals.list',
  listApprovalRequests: 'approvals.list',
  createApproval: 'approvals.create',
  createApprovalRequest: 'approvals.create',
  getApproval: 'approvals.get',
  decideApproval: 'approvals.decide',
  createAuditEvent: 'audit.record',
  createAuditEventAlias: 'audit.record',
  listAuditLogs: 'audit.logs',
  listEvents: 'audit.events',
  verifyAuditChain: 'audit.verify',
  getAuditSigningKey: 'audit.signingKey',
  getAuditCheckpoint: 'audit.checkpoint',
  getAuditInclusionProof: 'audit.inclusionProof',
  getAuditConsistencyProof: 'audit.consistencyProof',
  listMcpServers: 'mcpServers.list',
  createMcpServer: 'mcpServers.create',
  getMcpServer: 'mcpServers.get',
  updateMcpServer: 'mcpServers.update',
  deleteMcpServer: 'mcpServers.delete',
  connectMcpServerOAuth: 'mcpServers.connectOAuth',
  disconnectMcpServerOAuth: 'mcpServers.disconnectOAuth',
  getComplianceStatus: 'compliance.status',
  getAuditVerificationStatus: 'audit.verificationStatus',
  listCredentials: 'credentials.list',
  createCredential: 'credentials.create',
  getCredential: 'credentials.get',
  updateCredential: 'credentials.update',
  deleteCredential: 'credentials.delete',
  listOAuthGrants: 'oauthGrants.list',
  revokeOAuthGrant: 'oauthGrants.revoke',
};
