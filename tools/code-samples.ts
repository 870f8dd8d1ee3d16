/**
 * Code samples for the API reference: every v1 operation gets a curl command and the same call
 * through the TypeScript SDK (`x-codeSamples`, which Redoc shows beside the operation). Added
 * to spec/dist/openapi.json by `npm run generate`.
 *
 * Request bodies are the examples of their schemas, so a sample is as right as the example the
 * spec validates (tests/contract/code-samples.test.ts checks each against its schema). Calls
 * that the SDK's client offers are written with it (`warden.agents.create(…)`); the rest
 * (aliases, audit proofs, settings) with the generated operation of the same name, which the
 * SDK exports as `operations`.
 */

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
type JsonObject = { [key: string]: Json };

interface Sample {
  /** The SDK call; BODY stands for the request body. None: the generated operation. */
  sdk?: string;
  /** Path parameter values. */
  path?: Record<string, string>;
  /** Query parameters, in both samples. */
  query?: Record<string, string | number | boolean>;
}

const AGENT = { id: 'billing-bot' };
const POLICY = { id: 'Production safety' };
const APPROVAL = { id: '8bd26fb8-de66-4173-9441-9fe73cfad062' };
const SERVER = { id: 'github' };
const EVENT_ID = '01a210d1-d0a0-7c3e-9f4b-5a6b7c8d9e0f';

/**
 * The operations' own samples. An operation without one gets the default: its generated
 * operation through the SDK, with each path parameter's example from the spec (defaultSample).
 */
export const SAMPLES: Record<string, Sample> = {
  getHealth: { sdk: 'warden.health()' },
  listAgents: { sdk: 'warden.agents.list({ limit: 20 })', query: { limit: 20 } },
  createAgent: { sdk: 'warden.agents.create(BODY)' },
  getAgent: { sdk: "warden.agents.get('billing-bot')", path: AGENT },
  updateAgent: { sdk: "warden.agents.update('billing-bot', BODY)", path: AGENT },
  deleteAgent: { sdk: "warden.agents.delete('billing-bot')", path: AGENT },
  listPolicies: { sdk: 'warden.policies.list({ enabled: true })', query: { enabled: true } },
  createPolicy: { sdk: 'warden.policies.create(BODY)' },
  simulatePolicies: { sdk: 'warden.policies.simulate(BODY)' },
  getPolicy: { sdk: "warden.policies.get('Production safety')", path: POLICY },
  updatePolicy: { sdk: "warden.policies.update('Production safety', BODY)", path: POLICY },
  deletePolicy: { sdk: "warden.policies.delete('Production safety')", path: POLICY },
  listApprovals: { sdk: "warden.approvals.list({ status: 'pending' })", query: { status: 'pending' } },
  createApproval: { sdk: 'warden.approvals.create(BODY)' },
  listApprovalRequests: { query: { status: 'pending' } },
  getApproval: { sdk: `warden.approvals.get('${APPROVAL.id}')`, path: APPROVAL },
  decideApproval: { sdk: `warden.approvals.decide('${APPROVAL.id}', BODY)`, path: APPROVAL },
  createAuditEvent: { sdk: 'warden.audit.record(BODY)' },
  listAuditLogs: { sdk: "warden.audit.logs({ result: 'blocked', limit: 50 })", query: { result: 'blocked', limit: 50 } },
  listEvents: { sdk: "warden.audit.events({ agent: 'billing-bot' })", query: { agent: 'billing-bot' } },
  verifyAuditChain: { sdk: 'warden.audit.verify()' },
  getAuditInclusionProof: { query: { event_id: EVENT_ID } },
  getAuditConsistencyProof: { query: { from_size: 1 } },
  getComplianceStatus: { sdk: 'warden.compliance.status()' },
  evaluatePolicy: { sdk: 'warden.policy.evaluate(BODY)' },
  executeRuntime: { sdk: 'warden.runtime.execute(BODY)' },
  discoverMcpTools: { sdk: 'warden.runtime.mcp.discover(BODY)' },
  callMcpTool: { sdk: 'warden.runtime.mcp.call(BODY)' },
  openMcpSession: { sdk: 'warden.runtime.mcp.session(BODY)' },
  listMcpServers: { sdk: 'warden.mcpServers.list()' },
  createMcpServer: { sdk: 'warden.mcpServers.create(BODY)' },
  getMcpServer: { sdk: "warden.mcpServers.get('github')", path: SERVER },
  updateMcpServer: { sdk: "warden.mcpServers.update('github', BODY)", path: SERVER },
  deleteMcpServer: { sdk: "warden.mcpServers.delete('github')", path: SERVER },
  connectMcpServerOAuth: { sdk: "warden.mcpServers.connectOAuth('github')", path: SERVER },
  disconnectMcpServerOAuth: { sdk: "warden.mcpServers.disconnectOAuth('github')", path: SERVER },
};

const HTTP_METHODS = ['get', 'put', 'post', 'delete', 'patch'];
const isObject = (value: Json | undefined): value is JsonObject => typeof value === 'object' && value !== null && !Array.isArray(value);

/** A component the bundled spec refers to (`#/components/<kind>/<name>`), or the value itself. */
function dereference(doc: JsonObject, value: Json | undefined): JsonObject {
  const ref = isObject(value) ? value.$ref : undefined;
  if (typeof ref !== 'string') return value as JsonObject;
  const [, , kind, name] = ref.split('/');
  return ((doc.components as JsonObject)[kind as string] as JsonObject)[name as string] as JsonObject;
}

/** The request body's example: the operation's own, else its schema's. */
function bodyExample(doc: JsonObject, operation: JsonObject): Json | undefined {
  const content = (operation.requestBody as JsonObject | undefined)?.content as JsonObject | undefined;
  const media = content?.['application/json'] as JsonObject | undefined;
  if (!media) return undefined;
  if (media.example !== undefined) return media.example;
  const schema = dereference(doc, media.schema);
  if (schema.example === undefined) throw new Error(`${operation.operationId}: its request body has no example to make a code sample of`);
  return schema.example;
}

/** The sample of an operation that has none of its own: the generated operation, path values from the spec's examples. */
function defaultSample(doc: JsonObject, item: JsonObject, operation: JsonObject): Sample {
  const parameters = [...asArray(item.parameters), ...asArray(operation.parameters)].map((parameter) => dereference(doc, parameter));
  const path: Record<string, string> = {};
  for (const parameter of parameters.filter((p) => p.in === 'path')) {
    const example = parameter.example ?? (parameter.schema as JsonObject | undefined)?.example;
    if (typeof example !== 'string')
      throw new Error(`${operation.operationId}: path parameter '${parameter.name}' has no example to make a code sample of`);
    path[parameter.name as string] = example;
  }
  return Object.keys(path).length ? { path } : {};
}
const asArray = (value: Json | undefined): Json[] => (Array.isArray(value) ? value : []);

const shellQuote = (text: string) => `'${text.replaceAll("'", `'\\''`)}'`;
const queryString = (query: Sample['query']) =>
  query ? `?${new URLSearchParams(Object.entries(query).map(([k, v]) => [k, String(v)])).toString()}` : '';
const fillPath = (path: string, values: Sample['path'] = {}) =>
  path.replace(/\{([^}]+)\}/g, (_m, name: string) => {
    const value = values[name];
    if (value === undefined) throw new Error(`${path}: no sample value for {${name}}`);
    return encodeURIComponent(value);
  });

function curl(method: string, url: string, withKey: boolean, withAgentKey: boolean, body: Json | undefined): string {
  const lines = [`curl -sS${method === 'get' ? '' : ` -X ${method.toUpperCase()}`} "$WARDEN_URL${url}"`];
  if (withKey) lines.push('-H "Authorization: Bearer $WARDEN_API_KEY"');
  if (withAgentKey) lines.push('-H "X-Warden-Agent-Key: $WARDEN_AGENT_KEY"');
  if (body !== undefined) lines.push("-H 'Content-Type: application/json'", `-d ${shellQuote(JSON.stringify(body))}`);
  return lines.join(' \\\n  ');
}

function sdk(operationId: string, sample: Sample, withAgentKey: boolean, body: Json | undefined): string {
  const options = withAgentKey
    ? '{\n  apiKey: process.env.WARDEN_API_KEY!,\n  agentKey: process.env.WARDEN_AGENT_KEY,\n}'
    : '{ apiKey: process.env.WARDEN_API_KEY! }';
  const json = body === undefined ? '' : JSON.stringify(body, null, 2);
  if (sample.sdk) {
    return [
      "import { createWarden } from '@agentwarden/sdk';",
      '',
      `const warden = createWarden(${options});`,
      `const result = await ${sample.sdk.replace('BODY', json)};`,
    ].join('\n');
  }
  const args = [
    'client: warden.client',
    sample.path ? `path: ${JSON.stringify(sample.path)}` : '',
    sample.query ? `query: ${JSON.stringify(sample.query)}` : '',
    body === undefined ? '' : `body: ${json}`,
  ].filter(Boolean);
  return [
    "import { createWarden, operations } from '@agentwarden/sdk';",
    '',
    `const warden = createWarden(${options});`,
    `const { data, error } = await operations.${operationId}({ ${args.join(', ')} });`,
  ].join('\n');
}

/** Adds `x-codeSamples` (curl, then the SDK) to every operation of the bundled v1 spec `doc`. */
export function addCodeSamples(doc: JsonObject): void {
  const seen = new Set<string>();
  for (const [path, item] of Object.entries(doc.paths as JsonObject)) {
    if (!isObject(item)) continue;
    for (const method of HTTP_METHODS) {
      const operation = item[method];
      if (!isObject(operation) || typeof operation.operationId !== 'string') continue;
      const operationId = operation.operationId;
      const sample = SAMPLES[operationId] ?? defaultSample(doc, item, operation);
      seen.add(operationId);
      const security = (operation.security ?? doc.security ?? []) as JsonObject[];
      const withKey = security.some((requirement) => 'bearerAuth' in requirement);
      const withAgentKey = security.some((requirement) => 'agentKey' in requirement);
      const body = bodyExample(doc, operation);
      const url = `${fillPath(path, sample.path)}${queryString(sample.query)}`;
      operation['x-codeSamples'] = [
        { lang: 'Shell', label: 'curl', source: curl(method, url, withKey, withAgentKey, body) },
        { lang: 'TypeScript', label: 'SDK', source: sdk(operationId, sample, withAgentKey, body) },
      ];
    }
  }
  const unused = Object.keys(SAMPLES).filter((id) => !seen.has(id));
  if (unused.length) throw new Error(`code samples for operations the spec does not have: ${unused.join(', ')}`);
}
