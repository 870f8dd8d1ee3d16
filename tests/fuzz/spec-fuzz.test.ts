/**
 * Property-based requests generated from the spec: for every operation of
 * spec/dist/openapi.json, FUZZ_RUNS (default 100, CI 1,000) requests drawn by fast-check from the
 * operation's own schemas — valid ones (bodies, query parameters, path ids of existing and
 * unknown resources) and invalid ones (wrong types, nulls, missing required fields, extra
 * fields, huge strings, odd unicode, deep nesting, edge numbers, random bytes, wrong content
 * types, malformed percent-encoding, bad credentials) — against one real server.
 *
 * Pass: no answer with status ≥ 500, every answer's body valid against the schema the
 * operation declares for its status (checked here with ajv, on top of the server's own
 * response validation that turns an off-spec answer into a 500), the server still answers
 * /health at the end, and the audit chain still verifies with every event sealed (no
 * accepted input may jam the sealer).
 *
 * Nothing leaves the machine: every URL generated is http://127.0.0.1:<closed port>/…, and
 * the server runs without an egress allowlist, so runtime operations are refused (403
 * execution_target_denied) before any byte is sent upstream.
 *
 * The budget is tiered: FUZZ_RUNS is the count per operation, 100 by default (the inner loop),
 * and .ci/run sets FUZZ_RUNS=1000 for CI (the full budget, about ten times as long); the run's
 * time cap scales with it (RUN_BUDGET_MS below). FUZZ_SEED overrides the seed (printed). The
 * suite runs a fixed seed so CI is reproducible; `FUZZ_SEED=random` explores a new one (print
 * it, and keep any seed that found something as a fixed case).
 */
import { createServer } from 'node:net';
import type { AgentCreateWritable, PolicyCreate } from '@warden/contract';
import { Ajv2020 } from 'ajv/dist/2020.js';
import * as formatsModule from 'ajv-formats';
import fc from 'fast-check';
import { CompiledQuery } from 'kysely';
import { beforeAll, describe, expect, it } from 'vitest';
import { canonicalEvent, type EventFields, eventLeafHash } from '../../apps/server/src/features/audit/tree.ts';
import { type ApiResponse, useTestServer } from '../support/server.ts';
import {
  type GenOptions,
  type Hints,
  MUTATIONS,
  type MutationInput,
  mutate,
  mutationInput,
  ODD_STRINGS,
  oddString,
  PoolRef,
  serialise,
  validValue,
} from './support/arbitraries.ts';
import { listOperations, loadSpec, type Operation, type Schema } from './support/openapi.ts';

/** Requests per operation: small for the inner loop, FUZZ_RUNS=1000 in CI (.ci/run). */
const RUNS = Number(process.env.FUZZ_RUNS ?? 100);
const SEED = process.env.FUZZ_SEED === 'random' ? Math.floor(Math.random() * 2 ** 31) : Number(process.env.FUZZ_SEED ?? 20261122);
const CONCURRENCY = 8;
const BATCHES = 10;
/** Upper bound on the whole run, so a hang fails the test instead of stalling CI: 1.2 s a run (20 min for 1,000), at least 5 min. */
const RUN_BUDGET_MS = Math.max(5 * 60_000, RUNS * 1_200);

const spec = loadSpec();
const operations = listOperations(spec);

// ————— resources that generated requests can name (grown from the answers) —————

type Entry = Record<string, string>;
const pools: Record<string, Entry[]> = { agent: [], policy: [], approval: [], mcp: [], agentKey: [] };
const POOL_CAP = 300;

function remember(pool: string, entry: Entry) {
  const list = pools[pool] as Entry[];
  if (list.length < POOL_CAP) list.push(entry);
  else list[Math.floor(Math.random() * POOL_CAP)] = entry;
}

function resolveRef(ref: PoolRef): string {
  const list = pools[ref.pool] as Entry[];
  if (list.length === 0) return `no-${ref.pool}`;
  return (list[ref.pick % list.length] as Entry)[ref.form] ?? `no-${ref.pool}`;
}

let closedPort = 9;
/** The one URL shape generated: a closed port on loopback (the egress guard refuses it anyway). */
const safeUrl = fc
  .tuple(
    fc.constantFrom('http', 'https', 'HTTP'),
    fc.stringMatching(/^[a-z0-9/_-]{0,30}$/),
    fc.option(fc.stringMatching(/^[a-z]=[0-9]{1,3}$/), { nil: undefined }),
  )
  .map(([scheme, path, query]) => new PoolRef('url', `${scheme}://127.0.0.1:PORT/${path}${query ? `?${query}` : ''}`, 0));

/** Deep copy with pool references resolved, and a last guard that no URL names another host. */
let rewrittenUrls = 0;
function resolve(value: unknown): unknown {
  if (value instanceof PoolRef) return value.pool === 'url' ? value.form.replace('PORT', String(closedPort)) : resolveRef(value);
  if (typeof value === 'string' && /^\s*https?:\/\//i.test(value)) {
    try {
      if (new URL(value.trim()).hostname === '127.0.0.1') return value;
    } catch {
      // not a URL the server would accept either
    }
    rewrittenUrls++;
    return `http://127.0.0.1:${closedPort}/rewritten`;
  }
  if (value === null || typeof value !== 'object') return value;
  if (Array.isArray(value)) return value.map(resolve);
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value))
    Object.defineProperty(out, k, { value: resolve(v), enumerable: true, writable: true, configurable: true });
  return out;
}

const ref = (pool: string, form: string) => fc.nat().map((n) => new PoolRef(pool, form, n));
const CEL = [
  'context.amount > 100',
  'input.action == "refund.create"',
  'true',
  'false',
  'agent != null && agent.risk_level == "high"',
  'has(context.role) && context.role == "admin"',
  'size(input.action) > 3',
  'context.amount / 0 > 1',
  'input.resource.startsWith("orders/")',
  'context.missing.deeper == 1',
  '1 +',
  'int(context.amount) >= 0',
];
const hints: Hints = {
  agent: (_s, fallback) => fc.oneof({ weight: 3, arbitrary: ref('agent', 'slug') }, { weight: 1, arbitrary: fallback }),
  server: (_s, fallback) => fc.oneof(ref('mcp', 'slug'), fc.constant('no-such-server'), fallback),
  approval_id: (_s, fallback) => fc.oneof(ref('approval', 'id'), fallback),
  policy: (_s, fallback) => fc.oneof(ref('policy', 'name'), fallback),
  action: (_s, fallback) =>
    fc.oneof(
      { weight: 2, arbitrary: fc.constantFrom('refund.create', 'db.delete', 'http.get', 'mcp.call', 'orders.read') },
      { weight: 1, arbitrary: fallback },
    ),
  environment: (_s, fallback) => fc.oneof(fc.constantFrom('development', 'staging', 'production'), fallback),
  condition: (_s, fallback) => fc.oneof({ weight: 3, arbitrary: fc.constantFrom(...CEL) }, { weight: 1, arbitrary: fallback }),
  url: () => safeUrl,
  transport_url: () => safeUrl,
};
const gen: GenOptions = { hints, safeUrl: safeUrl as unknown as fc.Arbitrary<string> };

// ————— requests —————

interface FuzzRequest {
  kind: string;
  note: string;
  pathId?: unknown;
  query: [string, unknown][];
  rawQuery?: string;
  auth: 'key' | 'none' | 'unknown' | 'malformed';
  agentKey?: unknown;
  requestId?: string;
  /** A JSON value to serialise, or raw bytes/text to send as they are. */
  body?: { value: unknown } | { raw: string | Uint8Array };
  contentType?: string;
}

const PATH_POOLS: Record<string, [string, string][]> = {
  '/agents/{id}': [
    ['agent', 'id'],
    ['agent', 'slug'],
  ],
  '/policies/{id}': [
    ['policy', 'id'],
    ['policy', 'name'],
  ],
  '/approvals/{id}': [['approval', 'id']],
  '/mcp-servers/{id}': [
    ['mcp', 'id'],
    ['mcp', 'slug'],
  ],
};
const RAW_PATH_IDS = [
  '%',
  '%zz',
  '%E0%A4%A',
  '%00',
  '%2F',
  '..%2F..%2Fhealth',
  '%C0%AE%C0%AE',
  ';',
  '%20',
  'a%2Fb',
  '%ff',
  '%u0041',
  '%25',
  '*',
  '%3Cscript%3E',
  'null',
  'undefined',
  '-1',
  '0',
];
const WRONG_QUERY_VALUES = ['abc', '-1', '0', '101', '1.5', '1e999', '', ' 1', 'true', '[]', '{}', 'null', '0x10', '９', 'x'.repeat(6000)];
const RAW_QUERIES = [
  'limit=%zz',
  'limit=%E0%A4%A',
  'cursor=%',
  'agent=%00',
  '&&&',
  '=',
  'limit',
  'a[b]=1',
  '__proto__=1',
  'constructor[prototype][x]=1',
  'limit=1&limit=2',
  'status=%ff%fe',
];
const CONTENT_TYPES = [
  'text/plain',
  'application/x-www-form-urlencoded',
  'application/json; charset=latin1',
  'application/json; charset=utf-16',
  'multipart/form-data; boundary=x',
  'application/xml',
  'application/merge-patch+json',
  '',
  'application/json; charset="utf-8"; q=0.1',
  'APPLICATION/JSON',
];

function queryArb(op: Operation): fc.Arbitrary<[string, unknown][]> {
  const params = op.parameters.filter((p) => p.in === 'query');
  if (params.length === 0) return fc.constant([]);
  return fc
    .tuple(...params.map((p) => fc.option(validValue(p.schema, gen, p.name), { nil: undefined, freq: 2 })))
    .map((values) =>
      values.flatMap((value, i) => (value === undefined ? [] : [[(params[i] as { name: string }).name, value] as [string, unknown]])),
    );
}

function pathIdArb(op: Operation): fc.Arbitrary<unknown> | undefined {
  if (!op.path.includes('{id}')) return undefined;
  const refs = (PATH_POOLS[op.path] ?? []).map(([pool, form]) => ref(pool, form));
  // a path with no pool of existing resources (OAuth grants, credentials) gets unknown ids only
  return fc.oneof(
    ...(refs.length > 0 ? [{ weight: 6, arbitrary: fc.oneof(...refs) }] : []),
    { weight: 1, arbitrary: fc.uuid() },
    { weight: 1, arbitrary: fc.stringMatching(/^[a-z0-9][a-z0-9-]{0,20}$/) },
  );
}

const badPathId = fc.oneof(
  fc.integer({ min: 201, max: 3000 }).map((n) => 'a'.repeat(n)),
  oddString.filter((s) => s.length > 0).map((s) => encodeURIComponent(s.replace(/[\ud800-\udfff]/g, '?'))),
  fc.constantFrom(...RAW_PATH_IDS),
);

const authArb: fc.Arbitrary<FuzzRequest['auth']> = fc.oneof(
  { weight: 94, arbitrary: fc.constant('key' as const) },
  { weight: 2, arbitrary: fc.constant('none' as const) },
  { weight: 2, arbitrary: fc.constant('unknown' as const) },
  { weight: 2, arbitrary: fc.constant('malformed' as const) },
);

const agentKeyArb = fc.oneof(
  { weight: 6, arbitrary: fc.constant(undefined) },
  { weight: 2, arbitrary: ref('agentKey', 'key') },
  { weight: 1, arbitrary: fc.string({ minLength: 1, maxLength: 40, unit: 'grapheme-ascii' }) },
);

function requestArb(op: Operation): fc.Arbitrary<FuzzRequest> {
  const hasBody = op.body !== undefined;
  const queryParams = op.parameters.filter((p) => p.in === 'query');
  const pathId = pathIdArb(op);
  const usesAgentKey = [
    '/policy/evaluate',
    '/runtime/execute',
    '/runtime/mcp/discover',
    '/runtime/mcp/call',
    '/runtime/mcp/session',
  ].includes(op.path);
  const bodyArb = hasBody ? validValue(op.body as Schema, gen) : fc.constant(undefined);
  const base = fc.record({
    pathId: pathId ?? fc.constant(undefined),
    query: queryArb(op),
    auth: authArb,
    agentKey: usesAgentKey ? agentKeyArb : fc.constant(undefined),
    value: bodyArb,
  });
  const make = (
    b: { pathId: unknown; query: [string, unknown][]; auth: FuzzRequest['auth']; agentKey: unknown; value: unknown },
    kind: string,
    note = '',
  ): FuzzRequest => ({
    kind,
    note,
    pathId: b.pathId,
    query: b.query,
    auth: b.auth,
    agentKey: b.agentKey,
    ...(hasBody ? { body: { value: b.value } } : {}),
  });

  const variants: { weight: number; arbitrary: fc.Arbitrary<FuzzRequest> }[] = [
    { weight: 10, arbitrary: base.map((b) => make(b, 'valid')) },
  ];
  if (hasBody) {
    variants.push({
      weight: 8,
      arbitrary: fc.tuple(base, mutationInput(MUTATIONS)).map(([b, m]: [Parameters<typeof make>[0], MutationInput]) => {
        const mutated = mutate(b.value, op.body, m);
        return { ...make(b, `invalid:${m.kind}`, mutated.note), body: { value: mutated.value } };
      }),
    });
    variants.push({
      weight: 1,
      arbitrary: fc
        .tuple(base, fc.constantFrom<unknown>([], 'text', 42, null, true, [{}], 0.5))
        .map(([b, value]) => ({ ...make(b, 'invalid:body_type', JSON.stringify(value)), body: { value } })),
    });
    variants.push({
      weight: 1,
      arbitrary: fc
        .tuple(base, fc.uint8Array({ maxLength: 2048 }))
        .map(([b, bytes]) => ({ ...make(b, 'invalid:random_bytes', `${bytes.length} bytes`), body: { raw: bytes } })),
    });
    variants.push({
      weight: 1,
      arbitrary: fc
        .tuple(
          base,
          fc.constantFrom(
            '',
            '{',
            '{"a":',
            '{"input":{"action":"x"}',
            'nul',
            '[1,]',
            '{"a":1}{"b":2}',
            '\ufeff{}',
            '{"a":1e99999}',
            '"\\ud800"',
          ),
        )
        .map(([b, raw]) => ({ ...make(b, 'invalid:malformed_json', JSON.stringify(raw)), body: { raw } })),
    });
    variants.push({
      weight: 1,
      arbitrary: fc
        .tuple(base, fc.constantFrom(...CONTENT_TYPES))
        .map(([b, contentType]) => ({ ...make(b, 'invalid:content_type', contentType), contentType })),
    });
  }
  variants.push({
    weight: queryParams.length ? 3 : 1,
    arbitrary: fc
      .tuple(
        base,
        fc.oneof(
          fc.tuple(
            fc.constantFrom(...(queryParams.length ? queryParams.map((p) => p.name) : ['limit'])),
            fc.oneof(fc.constantFrom(...WRONG_QUERY_VALUES), oddString),
          ),
          fc.tuple(
            fc.oneof(
              fc.constantFrom('colour', 'LIMIT', 'workspace_id', 'api_key', '__proto__'),
              fc.string({ minLength: 1, maxLength: 10 }),
            ),
            fc.string({ maxLength: 10 }),
          ),
        ),
        fc.option(fc.constantFrom(...RAW_QUERIES), { nil: undefined }),
      )
      .map(([b, [name, value], raw]) => ({
        ...make(b, 'invalid:query', `${name}=${JSON.stringify(value).slice(0, 40)}${raw ? ` & ${raw}` : ''}`),
        query: [...b.query, [name, value] as [string, unknown]],
        ...(raw ? { rawQuery: raw } : {}),
      })),
  });
  if (pathId) {
    variants.push({
      weight: 2,
      arbitrary: fc.tuple(base, badPathId).map(([b, id]) => ({ ...make(b, 'invalid:path', id.slice(0, 40)), pathId: { raw: id } })),
    });
  }
  variants.push({
    weight: 1,
    arbitrary: fc
      .tuple(
        base,
        fc.constantFrom<FuzzRequest['auth']>('none', 'unknown', 'malformed'),
        fc.constantFrom(...ODD_STRINGS.filter((s) => /^[\x20-\x7e]*$/.test(s))),
      )
      .map(([b, auth, requestId]) => ({ ...make(b, 'invalid:auth', auth), auth, requestId })),
  });
  return fc.oneof(...variants);
}

// ————— the checks —————

// ajv-formats is CommonJS with `exports.default`; under NodeNext the default import is the module.
const addFormats = ((formatsModule as { default?: unknown }).default ?? formatsModule) as (ajv: Ajv2020) => Ajv2020;
const ajv = new Ajv2020({ strict: false, allErrors: false, validateFormats: true });
addFormats(ajv);
ajv.addFormat('int32', { type: 'number', validate: (n: number) => Number.isInteger(n) && n >= -(2 ** 31) && n < 2 ** 31 });
ajv.addFormat('int64', { type: 'number', validate: (n: number) => Number.isInteger(n) });
const validators = new Map<string, ReturnType<typeof ajv.compile>>();

function responseProblem(op: Operation, status: number, text: string, contentType: string | null): string | null {
  const declared = String(status) in op.responses ? op.responses[String(status)] : op.responses.default;
  if (declared === undefined) return `status ${status} is not declared`;
  if (declared === null) return null;
  if (!contentType?.startsWith('application/json')) return `content-type ${contentType} for a JSON response`;
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    return 'body is not JSON';
  }
  const key = `${op.operationId} ${String(status) in op.responses ? status : 'default'}`;
  let validate = validators.get(key);
  if (!validate) {
    validate = ajv.compile(declared);
    validators.set(key, validate);
  }
  if (validate(body)) return null;
  return `off-spec body: ${ajv.errorsText(validate.errors).slice(0, 300)}`;
}

interface Stats {
  total: number;
  valid: number;
  invalid: number;
  statuses: Record<number, number>;
  kinds: Record<string, number>;
}
interface Failure {
  op: string;
  kind: string;
  note: string;
  request: string;
  status: number | string;
  problem: string;
  body: string;
}

const stats = new Map<string, Stats>(operations.map((op) => [op.operationId, { total: 0, valid: 0, invalid: 0, statuses: {}, kinds: {} }]));
const failures: Failure[] = [];
// No egress allowlist: loopback targets are refused before any byte is sent.
const server = useTestServer({ rateLimitPerMinute: 100_000_000, egressAllowlist: [] });
let runMs = 0;
let tried = 0;

function buildUrl(op: Operation, req: FuzzRequest): string {
  let path = op.path;
  if (path.includes('{id}')) {
    const id = req.pathId as unknown;
    const segment =
      id && typeof id === 'object' && 'raw' in (id as object) ? (id as { raw: string }).raw : encodeURIComponent(String(resolve(id)));
    // A dot segment (a policy named `.`, say) is removed by every client's URL parser, `%2e` too, so
    // the request would reach another operation and be judged by the wrong schema: no client can
    // address such an id by name, and the request asks for an id that does not exist instead.
    path = path.replace('{id}', /^(\.|%2e){1,2}$/i.test(segment) ? 'dot-segment' : segment);
  }
  const params = new URLSearchParams();
  for (const [name, value] of req.query) params.append(name, String(resolve(value)));
  const query = [params.toString(), req.rawQuery ?? ''].filter(Boolean).join('&');
  return `${server.url}${path}${query ? `?${query}` : ''}`;
}

function headersFor(req: FuzzRequest): Record<string, string> {
  const headers: Record<string, string> = {};
  if (req.auth === 'key') headers.authorization = `Bearer ${server.key}`;
  if (req.auth === 'unknown') headers.authorization = `Bearer wk_${Math.random().toString(36).slice(2)}${'x'.repeat(30)}`;
  if (req.auth === 'malformed')
    headers.authorization = req.requestId ? `Basic ${Buffer.from('a:b').toString('base64')}` : `Bearer ${'k'.repeat(600)}`;
  if (req.agentKey !== undefined) headers['x-warden-agent-key'] = String(resolve(req.agentKey)).replace(/[^\x20-\x7e]/g, '?');
  if (req.requestId !== undefined) headers['x-request-id'] = req.requestId;
  return headers;
}

function learn(op: Operation, status: number, body: any, sent: unknown) {
  if (status >= 300 || !body || typeof body !== 'object') return;
  const data = body.data;
  switch (op.operationId) {
    case 'createAgent': {
      remember('agent', { id: data.id, slug: data.slug });
      const key = (sent as { api_key?: unknown })?.api_key;
      if (typeof key === 'string') remember('agentKey', { key });
      break;
    }
    case 'createPolicy':
      remember('policy', { id: data.id, name: data.name });
      break;
    case 'createApproval':
    case 'createApprovalRequest':
      remember('approval', { id: data.id });
      break;
    case 'createMcpServer':
      remember('mcp', { id: data.id, slug: data.slug });
      break;
    case 'evaluatePolicy':
      if (data.approval_id) remember('approval', { id: data.approval_id });
      break;
  }
}

async function send(op: Operation, req: FuzzRequest): Promise<void> {
  const url = buildUrl(op, req);
  const headers = headersFor(req);
  let body: string | Uint8Array | undefined;
  let sent: unknown;
  if (req.body && 'raw' in req.body) body = req.body.raw;
  else if (req.body) {
    sent = resolve(req.body.value);
    body = sent === undefined ? undefined : serialise(sent);
  }
  if (body !== undefined) headers['content-type'] = req.contentType ?? 'application/json';
  const s = stats.get(op.operationId) as Stats;
  s.total++;
  if (req.kind === 'valid') s.valid++;
  else s.invalid++;
  s.kinds[req.kind] = (s.kinds[req.kind] ?? 0) + 1;
  tried++;
  const summary = () =>
    `${op.method} ${url.replace(server.url, '').slice(0, 200)} ${typeof body === 'string' ? body.slice(0, 300) : body ? `<${body.length} bytes>` : ''}`;
  let status: number;
  let text: string;
  let contentType: string | null;
  try {
    const res = await fetch(url, { method: op.method, headers, body: body as BodyInit | undefined, signal: AbortSignal.timeout(60_000) });
    status = res.status;
    contentType = res.headers.get('content-type');
    text = await res.text();
  } catch (error) {
    failures.push({
      op: op.operationId,
      kind: req.kind,
      note: req.note,
      request: summary(),
      status: 'transport error',
      problem: String((error as Error).cause ?? error),
      body: '',
    });
    return;
  }
  s.statuses[status] = (s.statuses[status] ?? 0) + 1;
  // operations that reach an upstream (the runtime's, an OAuth connect's authorization server) may find it unreachable
  const upstream502 = status === 502 && (op.path.startsWith('/runtime/') || op.path.endsWith('/oauth/connect'));
  const problem = status >= 500 && !upstream502 ? `status ${status}` : responseProblem(op, status, text, contentType);
  if (problem)
    failures.push({ op: op.operationId, kind: req.kind, note: req.note, request: summary(), status, problem, body: text.slice(0, 300) });
  else {
    try {
      learn(op, status, JSON.parse(text), sent);
    } catch {
      // nothing to learn
    }
  }
}

/** Runs `jobs` with at most CONCURRENCY in flight. */
async function pool(jobs: (() => Promise<void>)[], deadline: number): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next < jobs.length && Date.now() < deadline) await (jobs[next++] as () => Promise<void>)();
    }),
  );
}

async function fixtures() {
  const created = <T>(res: ApiResponse<{ data: T }>, what: string): T => {
    if (res.status >= 300) throw new Error(`fixture ${what}: ${res.status} ${JSON.stringify(res.body)}`);
    return res.body.data;
  };
  const agents: AgentCreateWritable[] = [
    { name: 'Fuzz Bot', provider: 'local', slug: 'fuzz-bot' },
    { name: 'Prod Bot', provider: 'anthropic', slug: 'prod-bot', environment: 'production', risk_level: 'high' },
    { name: 'Keyed Bot', provider: 'openai', slug: 'keyed-bot', api_key: 'fuzz-agent-key-0123456789' },
    { name: 'Tool Bot', provider: 'google', slug: 'tool-bot', allowed_tools: ['echo', 'stripe.*'] },
  ];
  for (const body of agents) {
    const agent = created(await server.api('POST', '/agents', { body }), body.name);
    remember('agent', { id: agent.id, slug: agent.slug });
  }
  remember('agentKey', { key: 'fuzz-agent-key-0123456789' });
  const policies: PolicyCreate[] = [
    { name: 'refunds need approval', rules: [{ match: { action: ['refund.*'] }, effect: 'require_approval', severity: 'high' }] },
    { name: 'big amounts blocked', rules: [{ match: { action: ['payments.*'] }, condition: 'context.amount > 1000', effect: 'block' }] },
    { name: 'proxy only', mode: 'monitor', rules: [{ match: { action: ['http.*'] }, effect: 'allow', require_execution_proxy: true }] },
  ];
  for (const body of policies) {
    const policy = created(await server.api('POST', '/policies', { body }), body.name);
    remember('policy', { id: policy.id, name: policy.name });
  }
  for (const title of ['first approval', 'second approval']) {
    const approval = created(
      await server.api('POST', '/approvals', { body: { title, agent: 'fuzz-bot', action: 'refund.create' } }),
      title,
    );
    remember('approval', { id: approval.id });
  }
  const body = { name: 'Fuzz MCP', slug: 'fuzz-mcp', transport_url: `http://127.0.0.1:${closedPort}/mcp` };
  const mcp = created(await server.api('POST', '/mcp-servers', { body }), body.name);
  remember('mcp', { id: mcp.id, slug: mcp.slug });
}

async function freePortThenClose(): Promise<number> {
  const probe = createServer();
  await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
  const { port } = probe.address() as { port: number };
  await new Promise<void>((resolve) => probe.close(() => resolve()));
  return port;
}

beforeAll(async () => {
  closedPort = await freePortThenClose();
  await fixtures();
  const arbitraries = new Map(operations.map((op) => [op.operationId, requestArb(op)]));
  const started = performance.now();
  const deadline = Date.now() + RUN_BUDGET_MS;
  const perBatch = Math.ceil(RUNS / BATCHES);
  for (let batch = 0; batch < BATCHES; batch++) {
    const jobs: (() => Promise<void>)[] = [];
    for (const [index, op] of operations.entries()) {
      const count = Math.min(perBatch, RUNS - batch * perBatch);
      if (count <= 0) continue;
      const requests = fc.sample(arbitraries.get(op.operationId) as fc.Arbitrary<FuzzRequest>, {
        numRuns: count,
        seed: SEED + batch * 1000 + index,
      });
      for (const req of requests) jobs.push(() => send(op, req));
    }
    // interleave the operations, reproducibly
    const order = fc.sample(fc.shuffledSubarray(jobs, { minLength: jobs.length }), { numRuns: 1, seed: SEED + batch })[0] as typeof jobs;
    await pool(order, deadline);
  }
  runMs = performance.now() - started;
  const seconds = runMs / 1000;
  for (const op of operations) {
    const s = stats.get(op.operationId) as Stats;
    const statuses = Object.entries(s.statuses)
      .map(([code, n]) => `${code}:${n}`)
      .join(' ');
    console.log(
      `[fuzz] ${op.operationId.padEnd(26)} ${String(s.total).padStart(5)} requests (${s.valid} valid, ${s.invalid} invalid)  statuses ${statuses}`,
    );
  }
  const byStatus: Record<string, number> = {};
  for (const s of stats.values()) for (const [code, n] of Object.entries(s.statuses)) byStatus[code] = (byStatus[code] ?? 0) + n;
  console.log(
    `[fuzz] seed ${SEED}: ${tried} requests over ${operations.length} operations in ${seconds.toFixed(1)} s (${(tried / seconds).toFixed(0)} req/s, ${CONCURRENCY} in flight); statuses ${JSON.stringify(byStatus)}; failures ${failures.length}; URLs rewritten to loopback ${rewrittenUrls}`,
  );
  // failures grouped by what was sent and what came back, one example each
  const groups = new Map<string, Failure[]>();
  for (const f of failures) {
    const key = `${f.status} ${f.problem.slice(0, 80)} ← ${f.kind}`;
    groups.set(key, [...(groups.get(key) ?? []), f]);
  }
  for (const [key, list] of [...groups].sort((a, b) => b[1].length - a[1].length)) {
    const f = list[0] as Failure;
    const ops = [...new Set(list.map((x) => x.op))];
    console.log(
      `[fuzz] FAIL ×${list.length} ${key} in ${ops.length} operations (${ops.slice(0, 6).join(', ')}${ops.length > 6 ? ', …' : ''})\n       e.g. ${f.note} :: ${f.request.slice(0, 240)}\n       → ${f.body.slice(0, 240)}`,
    );
  }
}, RUN_BUDGET_MS + 120_000);

describe(`generated requests from spec/dist/openapi.json (${RUNS} per operation)`, () => {
  it.each(operations.map((op) => [op.operationId, op] as const))(
    '%s: every generated request is answered below 500 and within the spec',
    (operationId) => {
      const s = stats.get(operationId) as Stats;
      expect(s.total, 'requests sent (the run budget may have cut the run short)').toBeGreaterThanOrEqual(RUNS);
      expect(s.valid).toBeGreaterThan(0);
      expect(s.invalid).toBeGreaterThan(0);
      const mine = failures
        .filter((f) => f.op === operationId)
        .map((f) => `${f.kind} (${f.note}) → ${f.status} ${f.problem} :: ${f.request.slice(0, 160)} :: ${f.body.slice(0, 160)}`);
      expect(mine.slice(0, 10), `${mine.length} failures`).toEqual([]);
    },
  );

  it('still answers GET /health after the whole run (no crash)', async () => {
    const res = await server.api('GET', '/health');
    expect(res.status).toBe(200);
    expect(res.body.data.status).toBe('ok');
  });

  it('leaves the audit chain intact: GET /audit/verify is valid with 0 unsealed within 30 s (no accepted input jams the sealer)', async () => {
    let last: { valid: boolean; checked: number; unsealed: number } | undefined;
    const deadline = Date.now() + 30_000;
    while (Date.now() < deadline) {
      const res = await server.api('GET', '/audit/verify');
      last = res.body.data;
      if (last?.unsealed === 0) break;
      await new Promise((r) => setTimeout(r, 500));
    }
    console.log(`[fuzz] audit chain after the run: ${JSON.stringify(last)}`);
    const firstInvalid = (last as { first_invalid_sequence?: number | null } | undefined)?.first_invalid_sequence;
    if (firstInvalid) {
      // What the seal says against what the stored event hashes to, for the events around it.
      const { rows } = await server.database.db.executeQuery<Record<string, unknown>>(
        CompiledQuery.raw(
          'SELECT s.sequence, s.hash AS seal_hash, e.* FROM audit_seals s LEFT JOIN audit_events e ON e.workspace_id = s.workspace_id AND e.id = s.event_id ' +
            'WHERE s.sequence BETWEEN $1 AND $2 ORDER BY s.sequence',
          [firstInvalid - 1, firstInvalid + 1],
        ),
      );
      for (const row of rows) {
        const leaf = row.id ? eventLeafHash(row as unknown as EventFields).toString('hex') : null;
        console.log(
          `[fuzz] sequence ${row.sequence}: seal ${row.seal_hash}, event hashes to ${leaf}\n       ${canonicalEvent(row as unknown as EventFields).slice(0, 1200)}`,
        );
      }
    }
    expect(last).toMatchObject({ valid: true, unsealed: 0 });
  }, 60_000);

  it('reached the server with valid requests that succeed (the generator is not all noise)', () => {
    const ok = [...stats.values()].reduce(
      (n, s) => n + Object.entries(s.statuses).reduce((m, [code, c]) => m + (Number(code) < 300 ? c : 0), 0),
      0,
    );
    expect(ok).toBeGreaterThan(tried * 0.1);
  });
});
