/**
 * What an upstream sends passes through the REST runtime as it passes through the gateway
 * (title, annotations, outputSchema, execution, _meta of a tool), and a tool that runs only as
 * an MCP task (execution.taskSupport 'required'), called without one, fails with a tool result
 * naming why — through the gateway and through /runtime/mcp/call alike. Tasks themselves:
 * tasks.test.ts.
 */
import { readFileSync } from 'node:fs';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { keyFor, useTestServer } from '../support/server.ts';
import { type CountingUpstream, connectClient, startCountingUpstream } from './support.ts';

const spec = JSON.parse(readFileSync(new URL('../../spec/dist/openapi.json', import.meta.url), 'utf8'));
const ALL: string = spec.components.schemas.Permission.enum.join(',');
const server = useTestServer({ egressAllowlist: ['127.0.0.1/32'] });
let upstream: CountingUpstream;
let key: string;
const AGENT_KEY = 'ak_fidelity_tasks_0123456789';
const clients: Client[] = [];

beforeAll(async () => {
  upstream = await startCountingUpstream();
  key = await keyFor(server, ALL, 'fidelity');
  const post = (path: string, body: unknown) => server.api('POST', path as '/agents', { key, body, unchecked: true });
  expect((await post('/mcp-servers', { name: 'tools', slug: 'tools', transport_url: upstream.url })).status).toBe(201);
  expect((await post('/agents', { name: 'Bot', slug: 'bot', provider: 'local', api_key: AGENT_KEY })).status).toBe(201);
});
afterAll(async () => {
  for (const client of clients) await client.close().catch(() => undefined);
  await upstream?.close();
});

const gatewayClient = async () => {
  const client = await connectClient(`${server.url}/mcp/tools`, { authorization: `Bearer ${AGENT_KEY}` });
  clients.push(client);
  return client;
};
const reportCalls = () => upstream.calls().filter((c) => c.startsWith('report:'));

describe('POST /runtime/mcp/discover (discoverMcpTools)', () => {
  it("passes every field of the upstream's tools through: title, annotations, outputSchema, execution, _meta", async () => {
    const res = await server.api('POST', '/runtime/mcp/discover', {
      key,
      headers: { 'x-warden-agent-key': AGENT_KEY },
      body: { server: 'tools' },
    });
    expect(res.status).toBe(200);
    const tools = res.body.data.tools;
    expect(tools.find((t) => t.name === 'echo')).toMatchObject({
      title: 'Echo',
      description: 'Echoes its text',
      annotations: { readOnlyHint: true, openWorldHint: false },
      execution: { taskSupport: 'forbidden' },
      _meta: { 'example.dev/origin': 'test' },
    });
    expect(tools.find((t) => t.name === 'add')?.outputSchema).toMatchObject({ type: 'object', properties: { sum: { type: 'number' } } });
    expect(tools.find((t) => t.name === 'report')).toMatchObject({ title: 'Report', execution: { taskSupport: 'required' } });
  });
});

describe('a tool that runs only as a task, called without one', () => {
  it('is listed by the gateway as the upstream lists it (taskSupport required)', async () => {
    const { tools } = await (await gatewayClient()).listTools();
    expect(tools.find((t) => t.name === 'report')?.execution).toEqual({ taskSupport: 'required' });
  });

  it('answers tools/call through the gateway with a tool error naming why, and the upstream runs nothing', async () => {
    const before = reportCalls().length;
    // sent as an unmodified client would send it without listing first (a client that listed refuses it itself)
    const result = await (await gatewayClient()).request(
      { method: 'tools/call', params: { name: 'report', arguments: { topic: 'q3' } } },
      CallToolResultSchema,
    );
    expect(result.isError).toBe(true);
    // Warden's words when its upstream session has listed the tool, else the upstream's own refusal (a new client session's first request)
    expect(result.content).toEqual([
      {
        type: 'text',
        text: expect.stringMatching(/runs only as an MCP task \(execution.taskSupport 'required'\)|requires task augmentation/),
      },
    ]);
    expect(reportCalls().length).toBe(before);
  });

  it('answers POST /runtime/mcp/call (callMcpTool) with a tool error naming why, and the upstream runs nothing', async () => {
    const before = reportCalls().length;
    const res = await server.api('POST', '/runtime/mcp/call', {
      key,
      headers: { 'x-warden-agent-key': AGENT_KEY },
      body: { server: 'tools', tool: 'report', arguments: { topic: 'q3' } },
    });
    expect(res.status).toBe(200);
    expect(res.body.data.allowed).toBe(true);
    expect(res.body.data.execution).toMatchObject({
      isError: true,
      content: [{ type: 'text', text: expect.stringContaining('the REST runtime does not run tasks') }],
    });
    expect(reportCalls().length).toBe(before);
  });
});
