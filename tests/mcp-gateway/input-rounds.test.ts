/**
 * An upstream's questions to a 2026-07-28 client, in input rounds (input-rounds.ts): each is
 * decided for the calling agent before the client sees it (`mcp.elicitation`), the client's
 * retry carries the answer, and the requestState it was given answers only that agent's retry
 * of the same call, once.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ConformanceUpstream, startConformanceUpstream } from '../support/conformance-upstream.ts';
import { keyFor, useTestServer } from '../support/server.ts';
import { postMcp, useSecondProcess } from './support.ts';

const spec = JSON.parse(readFileSync(new URL('../../spec/dist/openapi.json', import.meta.url), 'utf8'));
const ALL: string = spec.components.schemas.Permission.enum.join(',');
const MODERN = '2026-07-28';
const ASKS = 'test_input_required_result_elicitation';
/** Shared with the second process, as every process of one deployment shares it. */
const MASTER_KEY = randomBytes(32).toString('base64');
const server = useTestServer({ egressAllowlist: ['127.0.0.1/32'], masterKey: MASTER_KEY });
let upstream: ConformanceUpstream;
let key: string;
const agents = { asked: '', other: '', barred: '' };

beforeAll(async () => {
  upstream = await startConformanceUpstream();
  key = await keyFor(server, ALL, 'input-rounds');
  const api = (path: string, body: unknown) => server.api('POST', path as '/agents', { key, body, unchecked: true });
  expect((await api('/mcp-servers', { name: 'Up', slug: 'up', transport_url: upstream.url })).status).toBe(201);
  for (const name of Object.keys(agents) as (keyof typeof agents)[]) {
    agents[name] = `ak_rounds_${name}_${Math.random().toString(36).slice(2)}`;
    expect((await api('/agents', { name, slug: name, provider: 'local', api_key: agents[name] })).status).toBe(201);
  }
  const policy = {
    name: 'No questions for barred agents',
    rules: [{ match: { action: ['mcp.elicitation'], agent: ['barred'] }, effect: 'block' }],
  };
  expect((await api('/policies', policy)).status).toBe(201);
});
afterAll(async () => {
  await upstream?.close();
});

const envelope = {
  'io.modelcontextprotocol/protocolVersion': MODERN,
  'io.modelcontextprotocol/clientCapabilities': { elicitation: {} },
  'io.modelcontextprotocol/clientInfo': { name: 'rounds-test', version: '1.0.0' },
};
const headers = { 'mcp-protocol-version': MODERN, 'mcp-method': 'tools/call', 'mcp-name': ASKS };

/** A JSON-RPC answer as these tests read it. */
interface Answer {
  status: number;
  result?: {
    resultType?: string;
    inputRequests?: Record<string, { method: string; params: Record<string, unknown> }>;
    requestState?: string;
    content?: unknown;
    isError?: boolean;
  };
  error?: { code: number; message: string };
}

async function call(
  agentKey: string,
  extra: Record<string, unknown> = {},
  args: Record<string, unknown> = {},
  base = server.url,
): Promise<Answer> {
  const body = { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: ASKS, arguments: args, _meta: envelope, ...extra } };
  const res = await postMcp(`${base}/mcp/up`, agentKey, body, headers);
  const text = await res.text();
  return {
    status: res.status,
    ...(JSON.parse(text.startsWith('{') ? text : (text.split('data: ').pop() as string)) as Omit<Answer, 'status'>),
  };
}

const audited = async (action: string) =>
  (await server.api('GET', '/audit-logs', { key, query: { action, limit: 50 }, unchecked: true })).body.data as {
    result: string;
    agent: string;
  }[];

it("hands the client the upstream's question, decided for its agent, and its retry gets the answer", async () => {
  const first = await call(agents.asked);
  expect(first.result?.resultType).toBe('input_required');
  const [asked, question] = Object.entries(first.result?.inputRequests as Record<string, { method: string; params: object }>)[0] as [
    string,
    { method: string; params: Record<string, unknown> },
  ];
  expect(question.method).toBe('elicitation/create');
  // the upstream's own _meta (its progress token on Warden's session) is not the client's
  expect(question.params._meta).toBeUndefined();
  expect((await audited('mcp.elicitation')).some((row) => row.agent === 'asked' && row.result === 'allowed')).toBe(true);

  const state = first.result?.requestState as string;
  const answer = { [asked]: { action: 'accept', content: { name: 'Ada' } } };
  // another agent cannot use it, nor can the same agent for another call, nor an altered one
  expect((await call(agents.other, { requestState: state, inputResponses: answer })).error?.code).toBe(-32602);
  expect((await call(agents.asked, { requestState: state, inputResponses: answer }, { extra: 1 })).error?.code).toBe(-32602);
  expect((await call(agents.asked, { requestState: `${state}x`, inputResponses: answer })).error?.code).toBe(-32602);

  const done = await call(agents.asked, { requestState: state, inputResponses: answer });
  expect(done.result).toMatchObject({ resultType: 'complete', content: [{ type: 'text', text: 'Hello, Ada!' }] });
  // answered: the state names nothing any more
  expect((await call(agents.asked, { requestState: state, inputResponses: answer })).error?.code).toBe(-32602);
});

it('never hands the client a question policy refuses: the upstream is told, the call ends with its answer', async () => {
  const refused = await call(agents.barred);
  expect(refused.result?.resultType).toBe('complete');
  expect(refused.result?.isError).toBe(true);
  expect(JSON.stringify(refused.result?.content)).toContain('No questions for barred agents');
  expect((await audited('mcp.elicitation')).some((row) => row.agent === 'barred' && row.result === 'blocked')).toBe(true);
});

describe.skipIf(!process.env.DATABASE_URL)('rounds across two Warden processes (needs DATABASE_URL)', () => {
  const other = useSecondProcess(server, MASTER_KEY);

  it('takes a retry that reaches another process to the one holding the exchange, for its agent only', async () => {
    const first = await call(agents.asked);
    const [asked] = Object.keys(first.result?.inputRequests ?? {});
    const state = first.result?.requestState as string;
    const answer = { [asked as string]: { action: 'accept', content: { name: 'Grace' } } };
    const elsewhere = other().url;
    expect((await call(agents.other, { requestState: state, inputResponses: answer }, {}, elsewhere)).error?.code).toBe(-32602);
    const done = await call(agents.asked, { requestState: state, inputResponses: answer }, {}, elsewhere);
    expect(done.result).toMatchObject({ resultType: 'complete', content: [{ type: 'text', text: 'Hello, Grace!' }] });
    expect((await call(agents.asked, { requestState: state, inputResponses: answer }, {}, elsewhere)).error?.code).toBe(-32602);
  });
});
