/**
 * The contract suite: one case per operation of spec/dist/openapi.json, run against any target
 * (a Prism mock of the spec, a local server, a running server at a URL). It is what both
 * `npm run contract -- --target …` (tools/contract.ts) and tests/contract/contract-suite.test.ts
 * run; it imports nothing of vitest.
 *
 * What it checks is what the spec promises: every answer's status is one the operation
 * declares and its body validates against the declared schema (ajv, JSON Schema 2020-12); each
 * call also says which status it expects (a missing field is 400, an unknown id 404, …) and
 * a few facts that hold on any conforming server (approving answers an approved approval, a
 * blocking rule blocks). On the mock, Prism's `sl-violations` header must name no response
 * problem either, and error cases ask Prism for their status (`Prefer: code=…`).
 *
 * The list of operations is read from the spec at run time: an operation without a case is
 * reported (`no case`) and fails the run, so a new operation cannot be forgotten. Cases are
 * grouped in scenarios that share what they create (an agent, a policy, an MCP server), each
 * run whatever happened to the one before; the last one deletes what the run created.
 *
 * Against a running server the suite needs a key with every permission (`warden keys create
 * --permissions '*'`). It creates an agent, a policy and an MCP server named `contract-<run>`
 * (deleted at the end; the policy matches that agent only), writes approvals and audit events
 * (which stay: the audit log is append-only), and sets the workspace settings to the values
 * they already had.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { createSpecValidator, type SpecValidator } from './spec-validator.ts';

type Json = any;

export interface ContractTarget {
  /** How the report names it: `mock`, `local`, or the URL. */
  name: string;
  /** `mock`: Prism answering the spec's examples; `server`: a Warden server. */
  kind: 'mock' | 'server';
  /** Where operation paths are appended: `http://127.0.0.1:4010` (Prism), `http://host:8080/api/v1`. */
  baseUrl: string;
  /** A workspace API key with every permission (any bearer token for the mock). */
  key: string;
  /**
   * Loopback upstreams that the server's egress guard lets through (a local server only): with
   * them, executions and MCP calls are also run allowed, through to the upstream.
   */
  upstreams?: { http: string; mcp: string };
}

export interface CallRecord {
  method: string;
  /** The path as sent, query included. */
  path: string;
  /** What the call checks, e.g. `without a key`. */
  note: string;
  expected: number[];
  status: number;
  problems: string[];
  /** The 401 sweep's calls: they check an operation, but do not count as its case. */
  sweep: boolean;
}

export type Outcome = 'passed' | 'failed' | 'no case';

export interface OperationReport {
  operationId: string;
  method: string;
  path: string;
  outcome: Outcome;
  calls: CallRecord[];
  /** Problems not tied to one call: a scenario that stopped before reaching the operation, a failed fact. */
  problems: string[];
}

export interface SuiteReport {
  target: string;
  kind: ContractTarget['kind'];
  specVersion: string;
  operations: OperationReport[];
  /** Problems outside every operation (a scenario's own failure, a cleanup that failed). */
  problems: string[];
  passed: boolean;
  durationMs: number;
}

interface CallOptions {
  path?: Record<string, string>;
  query?: Record<string, string | number | undefined>;
  body?: unknown;
  /** The status (or statuses) this call must get. */
  expect: number | number[];
  /** For an error status: the `error.code` it must carry. */
  code?: string;
  /** `null`: no Authorization header; a string: that key instead of the target's. */
  key?: string | null;
  headers?: Record<string, string>;
  /** On the mock: the named example to ask Prism for (`Prefer: example=…`). */
  example?: string;
  note?: string;
}

interface Answer {
  status: number;
  body: Json;
  headers: Headers;
}

/** A call whose status was not the expected one: the scenario cannot go on. */
class StepFailed extends Error {}

const METHODS = ['get', 'put', 'post', 'delete', 'patch'];

/** The operations of a spec, in the spec's order. */
export function specOperations(spec: Json): { operationId: string; method: string; path: string; secured: boolean }[] {
  const out: { operationId: string; method: string; path: string; secured: boolean }[] = [];
  for (const [path, item] of Object.entries(spec.paths as Record<string, Json>)) {
    for (const method of METHODS) {
      const node = item[method];
      if (!node?.operationId) continue;
      const security = node.security ?? spec.security ?? [];
      out.push({ operationId: node.operationId, method: method.toUpperCase(), path, secured: security.length > 0 });
    }
  }
  return out;
}

/** What the scenarios share while they run. */
class Run {
  readonly records = new Map<string, CallRecord[]>();
  readonly facts = new Map<string, string[]>();
  readonly problems: string[] = [];
  /** Names unique to this run, so a run never meets another's data on a shared server. */
  readonly id = randomBytes(4).toString('hex');
  readonly state: {
    agent?: Json;
    policy?: Json;
    mcpServer?: Json;
    approvalId?: string;
  } = {};
  constructor(
    readonly target: ContractTarget,
    readonly validator: SpecValidator,
  ) {}

  get mock(): boolean {
    return this.target.kind === 'mock';
  }

  /** The agent's slug: `contract-<run>`. */
  get slug(): string {
    return `contract-${this.id}`;
  }

  private record(operationId: string, call: CallRecord): void {
    const list = this.records.get(operationId) ?? [];
    list.push(call);
    this.records.set(operationId, list);
  }

  /** A fact about an operation's answer that did not hold. */
  fail(operationId: string, problem: string): void {
    const list = this.facts.get(operationId) ?? [];
    list.push(problem);
    this.facts.set(operationId, list);
  }

  /** Records `problem` on `operationId` unless `ok`. */
  expectThat(operationId: string, ok: boolean, problem: string): void {
    if (!ok) this.fail(operationId, problem);
  }

  /** Sends one request of `operationId`, checks it against the spec and its expectation; throws StepFailed on another status. */
  async call(operationId: string, options: CallOptions, sweep = false): Promise<Answer> {
    const operation = this.validator.byId(operationId);
    if (!operation) throw new StepFailed(`${operationId} is not an operation of the spec`);
    const expected = Array.isArray(options.expect) ? options.expect : [options.expect];
    let path = operation.path.replace(/\{([^}]+)\}/g, (_, name: string) => {
      const value = options.path?.[name];
      if (value === undefined) throw new StepFailed(`${operationId}: no value for the path parameter {${name}}`);
      return encodeURIComponent(value);
    });
    const query = new URLSearchParams();
    for (const [name, value] of Object.entries(options.query ?? {})) if (value !== undefined) query.set(name, String(value));
    if ([...query].length > 0) path += `?${query}`;

    const headers: Record<string, string> = { ...options.headers };
    const key = options.key === undefined ? this.target.key : options.key;
    if (key !== null) headers.authorization = `Bearer ${key}`;
    if (options.body !== undefined) headers['content-type'] = 'application/json';
    if (this.mock) {
      // Prism answers the first success unless asked for another status or a named example.
      const prefer = [];
      const first = expected[0] as number;
      if (first >= 300) prefer.push(`code=${first}`);
      if (options.example) prefer.push(`example=${options.example}`);
      if (prefer.length > 0) headers.prefer = prefer.join(', ');
    }
    const call: CallRecord = {
      method: operation.method,
      path,
      note: options.note ?? '',
      expected,
      status: 0,
      problems: [],
      sweep,
    };
    this.record(operationId, call);
    let response: Response;
    try {
      response = await fetch(`${this.target.baseUrl}${path}`, {
        method: operation.method,
        headers,
        body: options.body === undefined ? undefined : JSON.stringify(options.body),
        signal: AbortSignal.timeout(30_000),
      });
    } catch (error) {
      call.problems.push(`no answer: ${(error as Error).message}`);
      throw new StepFailed(`${operationId}: no answer`);
    }
    call.status = response.status;
    const text = await response.text();
    let body: Json = text;
    try {
      body = text === '' ? '' : JSON.parse(text);
    } catch {
      // not JSON: the validator says so when the spec declares JSON
    }
    for (const finding of this.validator.checkAnswer(operation, response.status, response.headers.get('content-type'), body)) {
      call.problems.push(finding.problem);
    }
    for (const violation of JSON.parse(response.headers.get('sl-violations') ?? '[]') as { location: string[]; message: string }[]) {
      if (violation.location[0] === 'response') call.problems.push(`prism: ${violation.location.join('.')} ${violation.message}`);
    }
    if (!expected.includes(response.status)) {
      const said = body?.error ? ` ${body.error.code}: ${body.error.message}` : '';
      call.problems.push(`answered ${response.status}${said}, expected ${expected.join(' or ')}`);
      throw new StepFailed(`${operationId} answered ${response.status}`);
    }
    if (options.code !== undefined && body?.error?.code !== options.code) {
      call.problems.push(`error code ${JSON.stringify(body?.error?.code)}, expected ${options.code}`);
    }
    return { status: response.status, body, headers: response.headers };
  }

  /**
   * Calls until `done(answer)` (at most `timeoutMs`, every 200 ms): for what the server does in
   * the background (sealing, checkpoints). Answers on the way must conform to the spec too;
   * only the last one counts as the call.
   */
  async until(operationId: string, options: CallOptions, done: (answer: Answer) => boolean, timeoutMs = 15_000): Promise<Answer> {
    const deadline = Date.now() + timeoutMs;
    const wanted = Array.isArray(options.expect) ? options.expect : [options.expect];
    for (;;) {
      const last = Date.now() >= deadline;
      // Before the deadline, "not yet" (404, or 400 for a size the tree has not reached) is no failure.
      const answer = await this.call(operationId, { ...options, expect: last ? wanted : [...wanted, 400, 404] });
      if ((wanted.includes(answer.status) && done(answer)) || last) return answer;
      const calls = this.records.get(operationId) ?? [];
      // A conforming answer on the way is not kept as a call of its own.
      if ((calls.at(-1) as CallRecord).problems.length === 0) calls.pop();
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  }
}

interface Scenario {
  name: string;
  /** The operations it is the case of. */
  covers: string[];
  run(run: Run): Promise<void>;
}

const RANDOM_UUID = '7d0f6b8e-3c1a-4e2b-9f5d-0a1b2c3d4e5f';

/** The scenarios, in the order they run. Add a case for a new operation here (and name it in `covers`). */
export const SCENARIOS: Scenario[] = [
  {
    name: 'health',
    covers: ['getHealth'],
    async run(run) {
      const health = await run.call('getHealth', { expect: 200 });
      run.expectThat('getHealth', ['ok', 'degraded'].includes(health.body.data?.status), 'status is neither ok nor degraded');
      await run.call('getHealth', { expect: 200, key: null, note: 'without a key' });
    },
  },
  {
    name: 'agents',
    covers: ['listAgents', 'createAgent', 'getAgent', 'updateAgent'],
    async run(run) {
      const page = await run.call('listAgents', { expect: 200, query: { limit: 5 } });
      run.expectThat('listAgents', Array.isArray(page.body.data) && page.body.data.length <= 5, 'more than `limit` items');
      run.expectThat('listAgents', !page.body.has_more || page.body.next_cursor !== null, 'has_more without a next_cursor');
      await run.call('listAgents', { expect: 400, code: 'invalid_request', query: { limit: 101 }, note: 'limit above 100' });
      const created = await run.call('createAgent', {
        expect: 201,
        body: { name: `Contract ${run.id}`, slug: run.slug, provider: 'anthropic', environment: 'production', risk_level: 'high' },
      });
      run.state.agent = created.body.data;
      if (!run.mock) run.expectThat('createAgent', created.body.data.slug === run.slug, 'the slug sent is not the one answered');
      await run.call('createAgent', {
        expect: 400,
        code: 'invalid_request',
        body: { name: 'No provider' },
        note: 'without provider',
      });
      if (!run.mock) {
        await run.call('createAgent', {
          expect: 409,
          code: 'conflict',
          body: { name: `Contract ${run.id} again`, slug: run.slug, provider: 'local' },
          note: 'a slug taken',
        });
      }
      const id = run.mock ? created.body.data.id : run.state.agent.id;
      await run.call('getAgent', { expect: 200, path: { id } });
      await run.call('getAgent', { expect: 200, path: { id: run.mock ? 'billing-bot' : run.slug }, note: 'by slug' });
      await run.call('getAgent', { expect: 404, code: 'not_found', path: { id: RANDOM_UUID }, note: 'an unknown id' });
      const updated = await run.call('updateAgent', { expect: 200, path: { id }, body: { description: 'Made by the contract suite' } });
      if (!run.mock)
        run.expectThat('updateAgent', updated.body.data.description === 'Made by the contract suite', 'the change is not answered');
      await run.call('updateAgent', {
        expect: 404,
        code: 'not_found',
        path: { id: RANDOM_UUID },
        body: { description: 'x' },
        note: 'an unknown id',
      });
    },
  },
  {
    name: 'policies',
    covers: ['listPolicies', 'createPolicy', 'getPolicy', 'updatePolicy'],
    async run(run) {
      await run.call('listPolicies', { expect: 200 });
      const agent = [run.slug];
      const created = await run.call('createPolicy', {
        expect: 201,
        body: {
          name: `contract-${run.id}`,
          description: 'The contract suite: matches its own agent only',
          rules: [
            {
              id: 'block-test',
              match: { agent, action: ['contract.blocked'] },
              effect: 'block',
              severity: 'high',
              message: 'blocked by the contract suite',
            },
            { id: 'approve-test', match: { agent, action: ['contract.approval'] }, effect: 'require_approval', severity: 'medium' },
            { id: 'block-mcp-fail', match: { agent, tool: ['fail'] }, effect: 'block' },
            // Without upstreams to reach, MCP is blocked: its answers then come from the decision alone.
            { id: 'mcp', match: { agent, action: ['mcp.*'] }, effect: run.target.upstreams || run.mock ? 'allow' : 'block' },
            { id: 'allow-test', match: { agent, action: ['contract.allowed'] }, effect: 'allow' },
          ],
        },
      });
      run.state.policy = created.body.data;
      await run.call('createPolicy', {
        expect: 400,
        body: { name: `contract-${run.id}-bad`, rules: [{ match: { action: ['x'] }, effect: 'maybe' }] },
        note: 'an unknown effect',
      });
      await run.call('getPolicy', { expect: 200, path: { id: created.body.data.id } });
      await run.call('getPolicy', { expect: 404, code: 'not_found', path: { id: RANDOM_UUID }, note: 'an unknown id' });
      const updated = await run.call('updatePolicy', { expect: 200, path: { id: created.body.data.id }, body: { priority: 90 } });
      if (!run.mock) {
        run.expectThat('updatePolicy', updated.body.data.version === created.body.data.version + 1, 'the version did not grow by one');
        run.state.policy = updated.body.data;
      }
    },
  },
  {
    name: 'settings',
    covers: ['getSettings', 'updateSettings'],
    async run(run) {
      const settings = await run.call('getSettings', { expect: 200 });
      // The values it already has: a shared workspace's behaviour does not change.
      const updated = await run.call('updateSettings', { expect: 200, body: { default_decision: settings.body.data.default_decision } });
      run.expectThat(
        'updateSettings',
        JSON.stringify(updated.body.data) === JSON.stringify(settings.body.data),
        'setting the current values changed them',
      );
      await run.call('updateSettings', { expect: 400, code: 'invalid_request', body: {}, note: 'an empty change' });
    },
  },
  {
    name: 'decisions',
    covers: ['evaluatePolicy'],
    async run(run) {
      const agent = run.slug;
      const blocked = await run.call('evaluatePolicy', {
        expect: 200,
        example: 'blocked',
        body: { input: { action: 'contract.blocked', agent, resource: 'contract/1' } },
        note: 'a blocking rule',
      });
      run.expectThat(
        'evaluatePolicy',
        blocked.body.data.allowed === false && blocked.body.data.action === 'block',
        'a blocking rule did not block',
      );
      const approval = await run.call('evaluatePolicy', {
        expect: 200,
        example: 'approval_required',
        body: { input: { action: 'contract.approval', agent, context: { amount_eur: 250 } } },
        note: 'a require_approval rule',
      });
      run.expectThat(
        'evaluatePolicy',
        approval.body.data.action === 'require_approval' && typeof approval.body.data.approval_id === 'string',
        'a require_approval rule did not ask for an approval',
      );
      run.state.approvalId = approval.body.data.approval_id;
      const allowed = await run.call('evaluatePolicy', {
        expect: 200,
        example: 'allowed',
        body: { input: { action: 'contract.allowed', agent } },
        note: 'an allowing rule',
      });
      run.expectThat('evaluatePolicy', allowed.body.data.allowed === true, 'an allowing rule did not allow');
      await run.call('evaluatePolicy', { expect: 400, body: { input: {} }, note: 'without an action' });
    },
  },
  {
    name: 'policy simulation',
    covers: ['simulatePolicies'],
    async run(run) {
      // The draft blocks what the suite's policy allowed a moment ago: on a server, the replay
      // of the workspace's recent decisions (the suite's among them) finds changes.
      const simulated = await run.call('simulatePolicies', {
        expect: 200,
        body: {
          limit: 100,
          policies: [
            {
              name: `contract-${run.id}-draft`,
              rules: [{ id: 'draft-block', match: { agent: [run.slug], action: ['contract.*'] }, effect: 'block' }],
            },
          ],
        },
      });
      const data = simulated.body.data;
      run.expectThat(
        'simulatePolicies',
        data.from.allowed + data.from.blocked + data.from.approval_required === data.replayed &&
          data.to.allowed + data.to.blocked + data.to.approval_required === data.replayed,
        'the counts by result do not add up to the decisions replayed',
      );
      run.expectThat(
        'simulatePolicies',
        data.drift.from.allowed + data.drift.from.blocked + data.drift.from.approval_required === data.replayed &&
          data.drift.to.allowed === data.from.allowed &&
          data.drift.to.blocked === data.from.blocked,
        'drift does not run from the recorded results to the current policies’ (the draft’s `from`)',
      );
      if (!run.mock) run.expectThat('simulatePolicies', data.changed >= 1, 'blocking an allowed act changed no recorded decision');
      await run.call('simulatePolicies', {
        expect: 400,
        body: { policies: [{ name: 'bad', rules: [{ match: { action: ['x'] }, effect: 'maybe' }] }] },
        note: 'a draft rule with an unknown effect',
      });
    },
  },
  {
    name: 'policies as code',
    covers: ['applyPolicyBundle'],
    async run(run) {
      // a bundle of one policy of the suite's own, applied without prune: nothing else is touched
      const bundle = {
        policies: [
          {
            name: `contract-${run.id}-bundle`,
            rules: [{ id: 'bundle-allow', match: { agent: [run.slug], action: ['contract.bundle'] }, effect: 'allow' }],
          },
        ],
      };
      const dry = await run.call('applyPolicyBundle', { expect: 200, body: { ...bundle, dry_run: true } });
      if (!run.mock) run.expectThat('applyPolicyBundle', dry.body.data.audit_event_id === null, 'a dry run recorded an audit event');
      const applied = await run.call('applyPolicyBundle', { expect: 200, body: { ...bundle, source: { path: 'contract' } } });
      if (!run.mock) {
        run.expectThat('applyPolicyBundle', applied.body.data.created.length === 1, 'the bundle’s new policy was not created');
        const again = await run.call('applyPolicyBundle', { expect: 200, body: bundle, note: 'the same bundle again' });
        run.expectThat('applyPolicyBundle', again.body.data.audit_event_id === null, 'applying the same bundle again recorded a change');
      }
      // the run leaves nothing behind
      await run.call('deletePolicy', {
        expect: [200, 204],
        path: { id: bundle.policies[0]?.name as string },
        note: 'the bundle’s policy, removed',
      });
      await run.call('applyPolicyBundle', {
        expect: 400,
        body: { policies: [{ name: 'twice' }, { name: 'twice' }] },
        note: 'two policies of one name',
      });
    },
  },
  {
    name: 'approvals',
    covers: ['listApprovals', 'createApproval', 'listApprovalRequests', 'createApprovalRequest', 'getApproval', 'decideApproval'],
    async run(run) {
      await run.call('listApprovals', { expect: 200, query: { status: 'pending' } });
      const created = await run.call('createApproval', {
        expect: 201,
        body: { title: `Contract approval ${run.id}`, priority: 'low', agent: run.slug, context: { note: 'contract suite' } },
      });
      run.expectThat('createApproval', created.body.data.status === 'pending', 'a new approval is not pending');
      await run.call('createApproval', { expect: 400, code: 'invalid_request', body: { priority: 'low' }, note: 'without a title' });
      await run.call('listApprovalRequests', { expect: 200 });
      const request = await run.call('createApprovalRequest', {
        expect: 201,
        body: { title: `Contract request ${run.id}`, agent: run.slug },
      });
      await run.call('getApproval', { expect: 200, path: { id: created.body.data.id } });
      await run.call('getApproval', { expect: 404, code: 'not_found', path: { id: RANDOM_UUID }, note: 'an unknown id' });
      const asked = run.mock ? created.body.data.id : (run.state.approvalId ?? created.body.data.id);
      const approved = await run.call('decideApproval', {
        expect: 200,
        example: 'approved',
        path: { id: asked },
        body: { status: 'approved' },
      });
      run.expectThat('decideApproval', approved.body.data.status === 'approved', `approving answered status ${approved.body.data.status}`);
      run.expectThat('decideApproval', approved.body.data.decided_at !== null, 'an approved approval without decided_at');
      await run.call('decideApproval', {
        expect: 409,
        code: run.mock ? undefined : 'approval_already_decided',
        path: { id: asked },
        body: { status: 'rejected', decision_note: 'too late' },
        note: 'deciding twice',
      });
      await run.call('decideApproval', {
        expect: 400,
        code: run.mock ? undefined : 'decision_note_required',
        path: { id: request.body.data.id },
        body: { status: 'rejected' },
        note: 'rejecting without a note',
      });
      const rejected = await run.call('decideApproval', {
        expect: 200,
        example: 'rejected',
        path: { id: request.body.data.id },
        body: { status: 'rejected', decision_note: 'Rejected by the contract suite' },
        note: 'rejecting',
      });
      run.expectThat('decideApproval', rejected.body.data.status === 'rejected', `rejecting answered status ${rejected.body.data.status}`);
    },
  },
  {
    name: 'MCP server registry',
    covers: ['listMcpServers', 'createMcpServer', 'getMcpServer', 'updateMcpServer', 'connectMcpServerOAuth', 'disconnectMcpServerOAuth'],
    async run(run) {
      await run.call('listMcpServers', { expect: 200 });
      const created = await run.call('createMcpServer', {
        expect: 201,
        body: {
          name: `Contract MCP ${run.id}`,
          slug: `contract-mcp-${run.id}`,
          transport_url: run.target.upstreams?.mcp ?? 'https://mcp.example.com/mcp',
        },
      });
      run.state.mcpServer = created.body.data;
      await run.call('createMcpServer', {
        expect: 400,
        body: { name: 'Not http', transport_url: 'ftp://mcp.example.com/' },
        note: 'a transport_url that is not http(s)',
      });
      await run.call('getMcpServer', { expect: 200, path: { id: created.body.data.id } });
      await run.call('getMcpServer', { expect: 404, code: 'not_found', path: { id: RANDOM_UUID }, note: 'an unknown id' });
      await run.call('updateMcpServer', { expect: 200, path: { id: created.body.data.id }, body: { description: 'contract suite' } });
      const plain = { id: created.body.data.id };
      await run.call('connectMcpServerOAuth', { expect: 409, code: 'conflict', path: plain, note: 'a server without OAuth' });
      await run.call('disconnectMcpServerOAuth', { expect: 409, code: 'conflict', path: plain, note: 'a server without OAuth' });
      const oauth = await run.call('createMcpServer', {
        expect: 201,
        body: {
          name: `Contract OAuth MCP ${run.id}`,
          slug: `contract-oauth-${run.id}`,
          transport_url: 'https://mcp.example.com/mcp',
          upstream_auth: { type: 'oauth', scopes: ['read'] },
        },
      });
      // not connected yet: there is no connection to end
      await run.call('disconnectMcpServerOAuth', {
        expect: 404,
        code: 'not_found',
        path: { id: oauth.body.data.id },
        note: 'not connected',
      });
      await run.call('deleteMcpServer', { expect: 200, path: { id: oauth.body.data.id } });
    },
  },
  {
    name: 'Upstream credentials',
    covers: ['listCredentials', 'createCredential', 'getCredential', 'updateCredential', 'deleteCredential'],
    async run(run) {
      await run.call('listCredentials', { expect: 200 });
      const name = `contract-credential-${run.id}`;
      const created = await run.call('createCredential', {
        expect: 201,
        body: { name, hosts: ['upstream.example.com'], auth: { type: 'bearer', secret: `contract-secret-${run.id}` } },
      });
      run.expectThat('createCredential', !JSON.stringify(created.body).includes('contract-secret-'), 'the secret was answered');
      await run.call('createCredential', {
        expect: 400,
        body: { name: `${name}-x`, hosts: ['upstream.example.com'], auth: { type: 'bearer', secret: '' } },
        note: 'an empty secret',
      });
      await run.call('getCredential', { expect: 200, path: { id: created.body.data.id } });
      await run.call('getCredential', { expect: 404, code: 'not_found', path: { id: RANDOM_UUID }, note: 'an unknown id' });
      await run.call('updateCredential', { expect: 200, path: { id: created.body.data.id }, body: { description: 'contract suite' } });
      await run.call('deleteCredential', { expect: 200, path: { id: created.body.data.id } });
      await run.call('deleteCredential', { expect: 404, code: 'not_found', path: { id: created.body.data.id }, note: 'deleting twice' });
    },
  },
  {
    name: 'HTTP proxy',
    covers: ['executeRuntime'],
    async run(run) {
      const agent = run.slug;
      const blocked = await run.call('executeRuntime', {
        expect: 200,
        example: 'blocked',
        body: {
          input: { action: 'contract.blocked', agent },
          execution: { mode: 'http_proxy', method: 'GET', url: 'https://upstream.example.com/contract' },
        },
        note: 'blocked: nothing is sent',
      });
      run.expectThat(
        'executeRuntime',
        blocked.body.data.allowed === false && blocked.body.data.execution === null,
        'a blocked execution ran',
      );
      await run.call('executeRuntime', {
        expect: 400,
        code: run.mock ? undefined : 'invalid_execution_mode',
        body: { input: { action: 'contract.allowed', agent }, execution: { mode: 'ftp', url: 'ftp://x' } },
        note: 'an unknown mode',
      });
      if (run.target.upstreams) {
        const ran = await run.call('executeRuntime', {
          expect: 200,
          body: {
            input: { action: 'contract.allowed', agent },
            execution: { mode: 'http_proxy', method: 'GET', url: `${run.target.upstreams.http}/orders` },
          },
          note: 'allowed: through the proxy',
        });
        run.expectThat('executeRuntime', ran.body.data.execution?.status === 200, 'an allowed execution did not reach the upstream');
      }
    },
  },
  {
    name: 'MCP proxy',
    covers: ['discoverMcpTools', 'openMcpSession', 'callMcpTool'],
    async run(run) {
      const agent = run.slug;
      const server = run.state.mcpServer?.slug ?? 'github';
      // With an upstream the suite's policy allows MCP (but the tool `fail`) and the calls reach
      // it; without one (a server at a URL, whose egress guard is not the suite's to set) it
      // blocks MCP, so the answers come from the decision, before any upstream is reached.
      const reach = run.target.upstreams !== undefined || run.mock;
      const tools = await run.call('discoverMcpTools', {
        expect: 200,
        example: reach ? undefined : 'blocked',
        body: { server, input: { agent } },
        note: reach ? 'allowed: the upstream lists its tools' : 'blocked by policy',
      });
      run.expectThat('discoverMcpTools', tools.body.data.allowed === reach, `allowed is ${tools.body.data.allowed}`);
      if (reach) run.expectThat('discoverMcpTools', tools.body.data.tools.length > 0, 'no tools listed');
      await run.call('discoverMcpTools', {
        expect: 404,
        code: run.mock ? undefined : 'mcp_server_not_found',
        body: { server: `nowhere-${run.id}`, input: { agent } },
        note: 'an unknown server',
      });
      const session = await run.call('openMcpSession', {
        expect: 200,
        example: reach ? undefined : 'blocked',
        body: { server, input: { agent } },
        note: reach ? 'allowed' : 'blocked by policy',
      });
      run.expectThat(
        'openMcpSession',
        session.body.data.allowed === reach && (session.body.data.session_id !== null) === reach,
        `allowed ${session.body.data.allowed} with session_id ${session.body.data.session_id}`,
      );
      if (reach) {
        const called = await run.call('callMcpTool', {
          expect: 200,
          body: { server, tool: 'echo', arguments: { text: 'contract' }, input: { agent }, session_id: session.body.data.session_id },
          note: 'allowed, in the session',
        });
        run.expectThat('callMcpTool', called.body.data.allowed === true, 'an allowed call was not allowed');
      }
      const refused = await run.call('callMcpTool', {
        expect: 200,
        example: 'blocked',
        body: { server, tool: 'fail', input: { agent } },
        note: 'blocked by policy: nothing is sent',
      });
      run.expectThat('callMcpTool', refused.body.data.allowed === false, 'a blocked tool call was allowed');
      await run.call('openMcpSession', {
        expect: 404,
        code: run.mock ? undefined : 'mcp_server_not_found',
        body: { server: `nowhere-${run.id}`, input: { agent } },
        note: 'an unknown server',
      });
    },
  },
  {
    name: 'audit',
    covers: [
      'createAuditEvent',
      'createAuditEventAlias',
      'listAuditLogs',
      'listEvents',
      'verifyAuditChain',
      'getAuditVerificationStatus',
      'getAuditSigningKey',
      'getAuditCheckpoint',
      'getAuditInclusionProof',
      'getAuditConsistencyProof',
    ],
    async run(run) {
      const recorded = await run.call('createAuditEvent', {
        expect: 201,
        body: { agent: run.slug, action: 'contract.recorded', result: 'blocked', severity: 'low', context: { run: run.id } },
      });
      await run.call('createAuditEvent', {
        expect: 400,
        code: run.mock ? undefined : 'policy_evaluation_required',
        body: { action: 'contract.recorded', result: 'allowed' },
        note: 'an allow not decided by Warden',
      });
      await run.call('createAuditEventAlias', { expect: 201, body: { action: 'contract.recorded', result: 'approval_required' } });
      const logs = await run.call('listAuditLogs', { expect: 200, query: { limit: 10 } });
      run.expectThat('listAuditLogs', Array.isArray(logs.body.data) && logs.body.data.length <= 10, 'more than `limit` items');
      await run.call('listEvents', { expect: 200, query: { limit: 10 } });
      await run.call('getAuditSigningKey', { expect: 200 });
      // Sealing and checkpoints happen in the background, within a few seconds of an event.
      const checkpoint = await run.until('getAuditCheckpoint', { expect: 200 }, () => true);
      await run.call('getAuditCheckpoint', {
        expect: run.mock ? 404 : [200, 404],
        query: { tree_size: 9_007_199_254_740_991 },
        note: 'a size never checkpointed',
      });
      const proof = await run.until(
        'getAuditInclusionProof',
        { expect: 200, query: { event_id: recorded.body.data.id } },
        (answer) => answer.status === 200,
      );
      run.expectThat(
        'getAuditInclusionProof',
        run.mock || proof.body.data.event_id === recorded.body.data.id,
        'the proof is of another event',
      );
      await run.call('getAuditInclusionProof', {
        expect: 404,
        code: 'not_found',
        query: { event_id: RANDOM_UUID },
        note: 'an unknown event',
      });
      await run.call('getAuditConsistencyProof', { expect: 200, query: { from_size: 1 } });
      const size = Number(checkpoint.body.data?.tree_size ?? 1);
      await run.call('getAuditConsistencyProof', {
        expect: 400,
        code: 'invalid_request',
        query: { from_size: size + 1, to_size: size },
        note: 'from_size above to_size',
      });
      const verified = await run.call('verifyAuditChain', { expect: 200 });
      run.expectThat('verifyAuditChain', verified.body.data.valid === true, 'the audit log does not verify');
      const status = await run.call('getAuditVerificationStatus', { expect: 200 });
      run.expectThat(
        'getAuditVerificationStatus',
        run.mock || ['idle', 'queued', 'running'].includes(status.body.data.state),
        'a state outside idle, queued, running',
      );
    },
  },
  {
    name: 'compliance',
    covers: ['getComplianceStatus'],
    async run(run) {
      const status = await run.call('getComplianceStatus', { expect: 200 });
      const controls: Json[] = status.body.data.controls;
      run.expectThat(
        'getComplianceStatus',
        controls.length > 0 && controls.every((c) => typeof c.id === 'string' && c.id !== 'string'),
        'controls are missing or placeholders',
      );
    },
  },
  {
    name: 'oauth-grants',
    covers: ['listOAuthGrants', 'revokeOAuthGrant'],
    async run(run) {
      // grants are made by consent in the dashboard (tests/oauth): here, the listing and a refusal
      const page = await run.call('listOAuthGrants', { expect: 200, query: { limit: 5 } });
      run.expectThat('listOAuthGrants', Array.isArray(page.body.data) && page.body.data.length <= 5, 'more than `limit` items');
      await run.call('listOAuthGrants', { expect: 400, code: 'invalid_request', query: { limit: 101 }, note: 'limit above 100' });
      await run.call('revokeOAuthGrant', {
        expect: 404,
        code: 'not_found',
        path: { id: RANDOM_UUID },
        note: 'a grant that does not exist',
      });
    },
  },
  {
    name: 'clean-up',
    // Whatever the run created and an API can remove: its approvals left pending, MCP server,
    // policy and agent. Audit events stay (the log is append-only), as do its MCP sessions
    // until they expire; settings were set to the values they had.
    covers: ['deleteMcpServer', 'deletePolicy', 'deleteAgent'],
    async run(run) {
      // What the run created goes, whatever happened before (what was not created is skipped).
      const errors: string[] = [];
      const attempt = async (work: () => Promise<unknown>) => {
        try {
          await work();
        } catch (error) {
          errors.push((error as Error).message);
        }
      };
      // Approvals the run asked for and left pending (its agent's): rejected, so none waits for a person.
      if (!run.mock && run.state.agent) await attempt(() => withdrawPendingApprovals(run));
      const server = run.state.mcpServer?.id ?? (run.mock ? RANDOM_UUID : undefined);
      if (server) {
        await attempt(async () => {
          const deleted = await run.call('deleteMcpServer', { expect: 200, path: { id: server } });
          run.expectThat('deleteMcpServer', deleted.body.data.deleted === true, 'deleted is not true');
          await run.call('deleteMcpServer', { expect: 404, code: 'not_found', path: { id: server }, note: 'deleting twice' });
        });
      }
      const policy = run.state.policy?.id ?? (run.mock ? RANDOM_UUID : undefined);
      if (policy) {
        await attempt(async () => {
          await run.call('deletePolicy', { expect: [200, 204], path: { id: policy } });
          await run.call('deletePolicy', { expect: 404, code: 'not_found', path: { id: policy }, note: 'deleting twice' });
        });
      }
      const agent = run.state.agent?.id ?? (run.mock ? RANDOM_UUID : undefined);
      if (agent) {
        await attempt(async () => {
          const deleted = await run.call('deleteAgent', { expect: 200, path: { id: agent } });
          run.expectThat('deleteAgent', deleted.body.data.deleted === true, 'deleted is not true');
          await run.call('deleteAgent', { expect: 404, code: 'not_found', path: { id: agent }, note: 'deleting twice' });
        });
      }
      if (errors.length > 0) throw new StepFailed(errors.join('; '));
    },
  },
];

/** Pages of the run's pending approvals it reads at most while withdrawing them (100 each). */
const MAX_APPROVAL_PAGES = 10;

/** Rejects every approval of the run's agent still pending (listed by its slug, unique to the run). */
async function withdrawPendingApprovals(run: Run): Promise<void> {
  for (let page = 0; page < MAX_APPROVAL_PAGES; page++) {
    const pending = await run.call('listApprovals', {
      expect: 200,
      query: { status: 'pending', agent: run.slug, limit: 100 },
      note: 'clean-up: the run’s pending approvals',
    });
    const ids: string[] = pending.body.data.map((approval: Json) => approval.id);
    if (ids.length === 0) return;
    for (const id of ids) {
      await run.call('decideApproval', {
        expect: 200,
        path: { id },
        body: { status: 'rejected', decision_note: `Withdrawn by the contract suite (run ${run.id}): its agent is deleted` },
        note: 'clean-up: withdrawing an approval left pending',
      });
    }
  }
  throw new StepFailed(`more than ${MAX_APPROVAL_PAGES * 100} approvals of ${run.slug} still pending`);
}

/** A request that passes every check but authentication: the body and parameters the 401 sweep sends. */
function sweepRequest(validator: SpecValidator, operationId: string): Pick<CallOptions, 'path' | 'query' | 'body'> {
  const operation = validator.byId(operationId);
  const path: Record<string, string> = {};
  for (const [, name] of (operation?.path ?? '').matchAll(/\{([^}]+)\}/g)) path[name as string] = RANDOM_UUID;
  const hasBody = operation?.node.requestBody !== undefined;
  return { path, body: hasBody ? {} : undefined };
}

export interface RunOptions {
  /** Called as each scenario ends (progress for a person watching). */
  onScenario?: (name: string, failed: boolean) => void;
}

/** Runs every scenario against `target` and reports per operation of `spec`. */
export async function runContractSuite(spec: Json, target: ContractTarget, options: RunOptions = {}): Promise<SuiteReport> {
  const started = performance.now();
  const validator = createSpecValidator(spec);
  const run = new Run(target, validator);
  const operations = specOperations(spec);
  const known = new Set(operations.map((o) => o.operationId));
  const scenarioOf = new Map<string, string>();
  for (const scenario of SCENARIOS) for (const id of scenario.covers) scenarioOf.set(id, scenario.name);
  const unreached = new Map<string, string>();

  for (const scenario of SCENARIOS) {
    const covers = scenario.covers.filter((id) => known.has(id));
    let failed = false;
    if (covers.length > 0) {
      try {
        await scenario.run(run);
      } catch (error) {
        failed = true;
        // Operations the scenario had not called when it stopped are reported as not reached.
        for (const id of covers) {
          if (!(run.records.get(id) ?? []).some((c) => !c.sweep))
            unreached.set(id, `not reached: scenario '${scenario.name}' stopped (${(error as Error).message})`);
        }
        if (!(error instanceof StepFailed)) run.problems.push(`scenario '${scenario.name}': ${(error as Error).stack ?? error}`);
      }
    }
    options.onScenario?.(scenario.name, failed);
  }

  // Every operation that needs a key refuses a call without one, with the error body.
  for (const operation of operations) {
    if (!operation.secured) continue;
    try {
      await run.call(
        operation.operationId,
        { ...sweepRequest(validator, operation.operationId), expect: 401, code: 'unauthorized', key: null, note: 'without a key' },
        true,
      );
    } catch {
      // recorded on the call
    }
  }
  if (!run.mock) {
    try {
      await run.call('listAgents', { expect: 401, code: 'unauthorized', key: `wk_contract_${randomUUID()}`, note: 'an unknown key' }, true);
    } catch {
      // recorded on the call
    }
  }
  options.onScenario?.('without a key', false);

  const reports: OperationReport[] = operations.map(({ operationId, method, path }) => {
    const calls = run.records.get(operationId) ?? [];
    const problems = [...(run.facts.get(operationId) ?? [])];
    const why = unreached.get(operationId);
    if (why) problems.unshift(why);
    let outcome: Outcome;
    if (!scenarioOf.has(operationId)) {
      outcome = 'no case';
      problems.unshift('no case: add one to SCENARIOS in tests/contract/support/contract-suite.ts');
    } else if (!calls.some((c) => !c.sweep)) {
      outcome = 'failed';
      if (!why) problems.unshift(`its scenario '${scenarioOf.get(operationId)}' made no call of it`);
    } else {
      outcome = problems.length === 0 && calls.every((c) => c.problems.length === 0) ? 'passed' : 'failed';
    }
    return { operationId, method, path, outcome, calls, problems };
  });
  // Cases of operations the spec no longer has are stale.
  for (const id of scenarioOf.keys()) if (!known.has(id)) run.problems.push(`${id} has a case but is not an operation of the spec`);
  return {
    target: target.name,
    kind: target.kind,
    specVersion: String(spec.info?.version ?? ''),
    operations: reports,
    problems: run.problems,
    passed: run.problems.length === 0 && reports.every((r) => r.outcome === 'passed'),
    durationMs: Math.round(performance.now() - started),
  };
}

/** The report for a person: one line per operation, each problem under it, a summary. */
export function formatReport(report: SuiteReport, { verbose = false } = {}): string {
  const lines = [`contract suite: ${report.operations.length} operations of spec ${report.specVersion} against ${report.target}`];
  const idWidth = Math.max(...report.operations.map((o) => o.operationId.length));
  const routeWidth = Math.max(...report.operations.map((o) => o.method.length + o.path.length + 1));
  for (const op of report.operations) {
    const mark = op.outcome === 'passed' ? 'ok  ' : op.outcome === 'no case' ? 'MISS' : 'FAIL';
    const statuses = op.calls.map((c) => c.status || '-').join(' ');
    lines.push(`${mark} ${op.operationId.padEnd(idWidth)}  ${`${op.method} ${op.path}`.padEnd(routeWidth)}  ${statuses}`);
    for (const problem of op.problems) lines.push(`       ${problem}`);
    for (const call of op.calls) {
      if (call.problems.length === 0 && !verbose) continue;
      const note = call.note ? ` (${call.note})` : '';
      lines.push(`       ${call.method} ${call.path}${note} → ${call.status || 'no answer'}`);
      for (const problem of call.problems) lines.push(`         ${problem}`);
    }
  }
  for (const problem of report.problems) lines.push(`FAIL ${problem}`);
  const count = (outcome: Outcome) => report.operations.filter((o) => o.outcome === outcome).length;
  const calls = report.operations.reduce((n, o) => n + o.calls.length, 0);
  lines.push(
    `${report.passed ? 'PASSED' : 'FAILED'}: ${count('passed')} passed, ${count('failed')} failed, ${count('no case')} without a case` +
      ` (${calls} calls, ${(report.durationMs / 1000).toFixed(1)} s)`,
  );
  return lines.join('\n');
}
