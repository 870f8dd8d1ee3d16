/**
 * `warden policies test <dir>`: the test cases of a policy directory (policy-bundle.ts) decided
 * by the server's own evaluator — the same compiled set (engine.ts), the same views of an act
 * (acts/act.ts `declaredInput`, `actViews`), the same refusal when a condition fails — with no
 * server and no database. A test file:
 *
 *   defaults: { production: block }        # optional: the decision when no rule matches (the directory's defaults.yaml, else allow)
 *   agents:                                 # optional: agents the cases name by slug
 *     billing-bot: { environment: production, risk_level: high }
 *   cases:
 *     - name: a big refund needs a human
 *       agent: billing-bot                   # a slug of `agents`, or the attributes: { slug, environment, … }
 *       input: { action: refund.create, resource: order/1, context: { amount_eur: 250 } }
 *       execution: { mcp: { server: github, tool: create_issue, arguments: {} } }  # optional; or { http: { method, url } }
 *       expect: { effect: require_approval, rule: big-refunds, policy: Refund limits }
 *
 * A case without `execution` is a bare evaluation (`POST /policy/evaluate`): a rule that allows
 * only through the proxy blocks it, as the server does. `execution: { audited: … }` is an
 * execution as the audit log records it (`context.execution`), decided as the what-if replay
 * decides it (`warden policies fixtures` writes these). `expect.rule` and `expect.policy` are
 * checked when given (`null`: no rule, no policy).
 */
import type { PolicyRule } from '@warden/contract';
import { actViews, declaredInput, type ExecutionFacts, httpFacts, MCP_METHOD_ACTIONS, mcpFacts } from '../acts/act.ts';
import { type AgentFacts, ConditionError, compilePolicySet, type DefaultDecisions, decideStrictest } from './engine.ts';
import { BundleError, type PolicyBundle } from './policy-bundle.ts';

const EFFECTS = ['allow', 'block', 'require_approval'] as const;
type Effect = (typeof EFFECTS)[number];

export interface PolicyCase {
  file: string;
  name: string;
  agent: AgentFacts;
  input: { action: string; resource?: string; environment?: string; tool?: string; context?: Record<string, unknown> };
  execution: ExecutionFacts | null;
  /** The action an MCP act is decided as whatever the case declares (its method's: a tool call's `mcp.call`). */
  fixedAction: string | undefined;
  expect: { effect: Effect; rule?: string | null; policy?: string | null };
  defaults: DefaultDecisions;
}

export interface CaseResult {
  case: PolicyCase;
  /** What the evaluator decided. */
  got: { effect: Effect; rule: string | null; policy: string | null; message: string | null };
  /** Why the case failed; null when it passed. */
  failure: string | null;
}

const isObject = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value);
const strings = (value: unknown) => (Array.isArray(value) && value.every((v) => typeof v === 'string') ? (value as string[]) : []);

function agentOf(where: string, value: unknown, input: PolicyCase['input'], agents: Record<string, unknown>): AgentFacts {
  if (typeof value === 'string' && !isObject(agents[value]))
    throw new BundleError(`${where}: agent '${value}' is not in the file's agents`);
  const a = typeof value === 'string' ? { slug: value, ...(agents[value] as Record<string, unknown>) } : isObject(value) ? value : {};
  const slug = typeof a.slug === 'string' ? a.slug : 'agent';
  return {
    id: typeof a.id === 'string' ? a.id : `test:${slug}`,
    slug,
    name: typeof a.name === 'string' ? a.name : slug,
    status: typeof a.status === 'string' ? a.status : 'active',
    environment: typeof a.environment === 'string' ? a.environment : (input.environment ?? 'production'),
    risk_level: typeof a.risk_level === 'string' ? a.risk_level : null,
    provider: typeof a.provider === 'string' ? a.provider : undefined,
    tags: strings(a.tags),
    allowed_tools: strings(a.allowed_tools),
    allowed_resources: strings(a.allowed_resources),
  };
}

function executionOf(where: string, value: unknown): ExecutionFacts | null {
  if (value === undefined || value === null) return null;
  if (isObject(value) && isObject(value.audited)) {
    const mode = value.audited.mode;
    if (mode !== 'mcp_proxy' && mode !== 'http_proxy') throw new BundleError(`${where}: execution.audited.mode is mcp_proxy or http_proxy`);
    return value.audited as unknown as ExecutionFacts; // the audited form stands for what ran, as in the replay (simulate.ts)
  }
  if (isObject(value) && isObject(value.mcp) && typeof value.mcp.server === 'string' && typeof value.mcp.tool === 'string') {
    const args = isObject(value.mcp.arguments) ? value.mcp.arguments : {};
    return mcpFacts(value.mcp.server, { method: 'tools/call', params: { name: value.mcp.tool, arguments: args } });
  }
  if (isObject(value) && isObject(value.http) && typeof value.http.method === 'string' && typeof value.http.url === 'string') {
    try {
      return httpFacts({ mode: 'http_proxy', method: value.http.method as 'GET', url: value.http.url });
    } catch (error) {
      throw new BundleError(`${where}: execution.http: ${(error as Error).message}`);
    }
  }
  throw new BundleError(`${where}: execution is { mcp: { server, tool, arguments } } or { http: { method, url } }`);
}

/** The cases of the bundle's test files, each checked for shape; throws BundleError naming the case. */
export function policyCases(bundle: PolicyBundle): PolicyCase[] {
  return bundle.tests.flatMap(({ file, content }) => {
    if (!isObject(content) || !Array.isArray(content.cases)) throw new BundleError(`${file}: a test file has a list of cases`);
    const defaults = { ...bundle.defaults, ...(isObject(content.defaults) ? (content.defaults as DefaultDecisions) : {}) };
    const agents = isObject(content.agents) ? content.agents : {};
    return content.cases.map((raw, index): PolicyCase => {
      const where = `${file}: cases[${index}]`;
      if (!isObject(raw) || typeof raw.name !== 'string') throw new BundleError(`${where}: a case has a name`);
      const named = `${file}: '${raw.name}'`;
      if (!isObject(raw.input) || typeof raw.input.action !== 'string') throw new BundleError(`${named}: input.action is needed`);
      if (!isObject(raw.expect) || !EFFECTS.includes(raw.expect.effect as Effect))
        throw new BundleError(`${named}: expect.effect is one of ${EFFECTS.join(', ')}`);
      const input = raw.input as PolicyCase['input'];
      const execution = executionOf(named, raw.execution);
      return {
        file,
        name: raw.name,
        agent: agentOf(named, raw.agent, input, agents),
        input,
        execution,
        // an MCP act is decided as its method's action too (the `mcp:` form states a tool call)
        fixedAction: execution?.mode === 'mcp_proxy' ? (MCP_METHOD_ACTIONS[execution.method] ?? 'mcp.call') : undefined,
        expect: raw.expect as PolicyCase['expect'],
        defaults,
      };
    });
  });
}

/** Decides every case on the bundle's enabled policies, as the server would. */
export function runPolicyCases(bundle: PolicyBundle, cases: PolicyCase[]): CaseResult[] {
  const sources = bundle.policies
    .filter(({ policy }) => policy.enabled !== false)
    .map(({ policy }) => ({
      name: policy.name,
      mode: policy.mode ?? 'enforce',
      priority: policy.priority ?? 100,
      rules: (policy.rules ?? []) as PolicyRule[],
    }));
  const sets = new Map<string, ReturnType<typeof compilePolicySet>>();
  return cases.map((c) => {
    const key = JSON.stringify(c.defaults);
    const set = sets.get(key) ?? compilePolicySet(sources, c.defaults);
    sets.set(key, set);
    // what the server refuses before deciding (decisions.ts environmentOf), a case cannot expect otherwise
    const refused =
      c.input.environment !== undefined && c.input.environment !== c.agent.environment
        ? `the server refuses this input (400 environment_mismatch): agent '${c.agent.slug}' is registered for ${c.agent.environment}`
        : c.input.environment === undefined && set.usesEnvironment
          ? 'the server refuses this input (400 environment_context_required): policies match on environment, so state input.environment'
          : null;
    if (refused) return { case: c, got: { effect: 'block', rule: null, policy: null, message: refused }, failure: refused };
    const environment = c.input.environment ?? c.agent.environment;
    const declared = { ...declaredInput(c.input, c.execution), environment, execution: c.execution };
    let got: CaseResult['got'];
    try {
      const decision = decideStrictest(set, actViews(declared, c.fixedAction), c.agent);
      got = { effect: decision.effect, rule: decision.ruleId, policy: decision.policy, message: decision.message };
      // as decisions.ts refuses it: a rule that allows only through the proxy blocks a bare evaluation
      if (decision.allowed && decision.requireProxy && c.execution === null)
        got = { ...got, effect: 'block', message: 'This action may only run through Warden\u2019s execution proxy' };
    } catch (error) {
      if (!(error instanceof ConditionError)) throw error;
      // as the server refuses it: blocked, naming the policy whose condition failed
      got = { effect: 'block', rule: error.ruleId, policy: error.policy, message: `condition failed: ${error.message}` };
    }
    return { case: c, got, failure: failureOf(c.expect, got) };
  });
}

const shown = (effect: string, rule: string | null) => `${effect} (${rule === null ? 'no rule' : `rule ${rule}`})`;

function failureOf(expected: PolicyCase['expect'], got: CaseResult['got']): string | null {
  const ruleDiffers = expected.rule !== undefined && expected.rule !== got.rule;
  const policyDiffers = expected.policy !== undefined && expected.policy !== got.policy;
  if (expected.effect === got.effect && !ruleDiffers && !policyDiffers) return null;
  const wanted = shown(expected.effect, expected.rule === undefined ? got.rule : expected.rule);
  const policy = policyDiffers ? `, policy '${expected.policy}' expected, got '${got.policy}'` : '';
  return `expected ${wanted}, got ${shown(got.effect, got.rule)}${policy}`;
}

const xml = (text: string) => text.replace(/[<>&"']/g, (c) => `&#${c.charCodeAt(0)};`);

/** The results as JUnit XML: a test suite per test file, a test case per case, a failure with its message. */
export function junitXml(results: CaseResult[]): string {
  const files = [...new Set(results.map((r) => r.case.file))];
  const suites = files.map((file) => {
    const mine = results.filter((r) => r.case.file === file);
    const cases = mine.map(({ case: c, failure }) => {
      const open = `    <testcase classname="${xml(file)}" name="${xml(c.name)}"`;
      return failure === null ? `${open}/>` : `${open}>\n      <failure message="${xml(failure)}"/>\n    </testcase>`;
    });
    const failed = mine.filter((r) => r.failure !== null).length;
    return `  <testsuite name="${xml(file)}" tests="${mine.length}" failures="${failed}">\n${cases.join('\n')}\n  </testsuite>`;
  });
  const failures = results.filter((r) => r.failure !== null).length;
  return `<?xml version="1.0" encoding="UTF-8"?>\n<testsuites name="warden policies test" tests="${results.length}" failures="${failures}">\n${suites.join('\n')}\n</testsuites>\n`;
}
