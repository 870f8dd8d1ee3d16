/**
 * /api/v1/mcp: every enabled MCP server of the workspace behind one MCP endpoint, names
 * namespaced `<server>__<name>`; and @modelcontextprotocol/server-everything (a published
 * third-party server) through /api/v1/mcp/{server}.
 */
import { readFileSync } from 'node:fs';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { keyFor, useTestServer } from '../support/server.ts';
import { type CountingUpstream, connectClient, startCountingUpstream, startEverything } from './support.ts';

const spec = JSON.parse(readFileSync(new URL('../../spec/dist/openapi.json', import.meta.url), 'utf8'));
const ALL: string = spec.components.schemas.Permission.enum.join(',');
const server = useTestServer({ egressAllowlist: ['127.0.0.1/32'] });
let upstream: CountingUpstream;
let everything: { url: string; stop: () => Promise<void> };
let key: string;
const AGENT_KEY = 'ak_aggregate_test_key_1';
const clients: Client[] = [];

beforeAll(async () => {
  [upstream, everything] = await Promise.all([startCountingUpstream(), startEverything()]);
  key = await keyFor(server, ALL, 'aggregate');
  const post = (path: string, body: unknown) => server.api('POST', path as '/agents', { key, body, unchecked: true });
  expect((await post('/mcp-servers', { name: 'tools', slug: 'tools', transport_url: upstream.url })).status).toBe(201);
  expect((await post('/mcp-servers', { name: 'everything', slug: 'everything', transport_url: everything.url })).status).toBe(201);
  expect((await post('/agents', { name: 'Bot', slug: 'bot', provider: 'local', api_key: AGENT_KEY })).status).toBe(201);
  expect(
    (
      await post('/policies', {
        name: 'Not everything',
        rules: [{ match: { server: ['everything'], tool: ['get-env', 'printEnv', 'get-sum'] }, effect: 'block' }],
      })
    ).status,
  ).toBe(201);
}, 120_000);

afterAll(async () => {
  for (const client of clients) await client.close().catch(() => undefined);
  await everything?.stop();
  await upstream?.close();
});

const client = async (path: string) => {
  const c = await connectClient(`${server.url}${path}`, { authorization: `Bearer ${AGENT_KEY}` });
  clients.push(c);
  return c;
};

describe('the aggregate endpoint /mcp', () => {
  it('lists the tools of every server, namespaced <server>__<tool>, less what policy blocks', async () => {
    const { tools } = await (await client('/mcp')).listTools();
    const names = tools.map((t) => t.name);
    expect(names).toEqual(expect.arrayContaining(['tools__echo', 'tools__add', 'everything__echo']));
    expect(names.every((n) => n.startsWith('tools__') || n.startsWith('everything__'))).toBe(true);
    expect(names).not.toContain('everything__get-env');
    expect(names).not.toContain('everything__get-sum');
    expect(tools.find((t) => t.name === 'tools__echo')).toMatchObject({ title: 'Echo', annotations: { readOnlyHint: true } });
  });

  it('routes a namespaced call to its server, decided on that server and tool', async () => {
    const c = await client('/mcp');
    expect((await c.callTool({ name: 'tools__echo', arguments: { text: 'via aggregate' } })).content).toEqual([
      { type: 'text', text: 'via aggregate' },
    ]);
    const echoed = await c.callTool({ name: 'everything__echo', arguments: { message: 'hi everything' } });
    expect(echoed.isError).toBeFalsy();
    expect(JSON.stringify(echoed.content)).toContain('hi everything');
    const blocked = await c.callTool({ name: 'everything__get-sum', arguments: { a: 1, b: 2 } });
    expect(blocked.isError).toBe(true);
    expect(JSON.stringify(blocked.content)).toContain('Not everything');
  });

  it('refuses a name without a registered server prefix with a JSON-RPC error', async () => {
    const c = await client('/mcp');
    await expect(c.callTool({ name: 'echo', arguments: {} })).rejects.toThrow(/names no server/);
    await expect(c.callTool({ name: 'nowhere__echo', arguments: {} })).rejects.toThrow(/nowhere/);
  });

  it('namespaces resources and prompts too, and reads them through their server', async () => {
    const c = await client('/mcp');
    const { resources } = await c.listResources();
    expect(resources.map((r) => r.uri)).toContain('tools__test://greeting');
    const read = await c.readResource({ uri: 'tools__test://greeting' });
    expect(read.contents).toEqual([{ uri: 'tools__test://greeting', text: 'hello', mimeType: 'text/plain' }]);
    const { prompts } = await c.listPrompts();
    expect(prompts.map((p) => p.name)).toContain('tools__greet');
    const prompt = await c.getPrompt({ name: 'tools__greet', arguments: { name: 'Grace' } });
    expect(JSON.stringify(prompt.messages)).toContain('Grace');
  });
});

describe('server-everything through /mcp/{server}', () => {
  it('lists its tools and calls one', async () => {
    const c = await client('/mcp/everything');
    const { tools } = await c.listTools();
    expect(tools.map((t) => t.name)).toContain('echo');
    expect(tools.map((t) => t.name)).not.toContain('get-sum');
    const result = await c.callTool({ name: 'echo', arguments: { message: 'hello' } });
    expect(result.isError).toBeFalsy();
    expect(JSON.stringify(result.content)).toContain('hello');
  });
});
