/**
 * The MCP Inspector's CLI (`@modelcontextprotocol/inspector --cli`, an unmodified MCP client
 * with its own SDK) against Warden's gateway, the agent key as the bearer: tools/list is
 * filtered as policy says, an allowed tools/call runs, a blocked one answers the policy's
 * message as a tool error, and a caller without a key is refused.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { keyFor, useTestServer } from '../support/server.ts';
import { type CountingUpstream, startCountingUpstream } from './support.ts';

const INSPECTOR = new URL('../../node_modules/.bin/mcp-inspector', import.meta.url).pathname;
const spec = JSON.parse(readFileSync(new URL('../../spec/dist/openapi.json', import.meta.url), 'utf8'));
const ALL: string = spec.components.schemas.Permission.enum.join(',');
const AGENT_KEY = 'ak_inspector_cli_0123456789';
const server = useTestServer({ egressAllowlist: ['127.0.0.1/32'] });
let upstream: CountingUpstream;
// the Inspector keeps a catalog and secrets under HOME: a throw-away one
const home = mkdtempSync(join(tmpdir(), 'warden-inspector-'));

beforeAll(async () => {
  upstream = await startCountingUpstream();
  const key = await keyFor(server, ALL, 'inspector');
  const post = (path: string, body: unknown) => server.api('POST', path as '/agents', { key, body, unchecked: true });
  expect((await post('/mcp-servers', { name: 'tools', slug: 'tools', transport_url: upstream.url })).status).toBe(201);
  expect(
    (
      await post('/agents', {
        name: 'Bot',
        slug: 'bot',
        provider: 'local',
        api_key: AGENT_KEY,
        allowed_tools: ['echo', 'add', 'delete_everything'],
      })
    ).status,
  ).toBe(201);
  const policies = [
    { name: 'No wipe', rules: [{ match: { tool: ['delete_everything'] }, effect: 'block', message: 'Wiping is not allowed' }] },
    {
      name: 'No shouting',
      rules: [
        {
          match: { tool: ['echo'] },
          condition: 'has(execution.arguments) && has(execution.arguments.text) && execution.arguments.text == "STOP"',
          effect: 'block',
          message: 'No shouting',
        },
      ],
    },
  ];
  for (const policy of policies) expect((await post('/policies', policy)).status).toBe(201);
});
afterAll(async () => {
  await upstream?.close();
  rmSync(home, { recursive: true, force: true });
});

/** Runs `mcp-inspector --cli` on /mcp/tools; its stdout is one JSON document. */
function inspector(args: string[], bearer: string | null = AGENT_KEY): Promise<{ code: number; out: string; err: string }> {
  const headers = bearer === null ? [] : ['--header', `Authorization: Bearer ${bearer}`];
  return new Promise((resolve) => {
    execFile(
      INSPECTOR,
      ['--cli', `${server.url}/mcp/tools`, '--transport', 'http', ...headers, ...args],
      { env: { ...process.env, HOME: home, MCP_CATALOG_PATH: join(home, 'mcp.json') }, timeout: 90_000 },
      (error, out, err) => resolve({ code: error ? Number(error.code ?? 1) : 0, out, err }),
    );
  });
}

describe('the MCP Inspector CLI on /mcp/{server}', { timeout: 120_000 }, () => {
  it('lists only the tools the agent may call (tools/list)', async () => {
    const { code, out, err } = await inspector(['--method', 'tools/list']);
    expect(code, err).toBe(0);
    const { tools } = JSON.parse(out);
    expect(tools.map((t: { name: string }) => t.name).sort()).toEqual(['add', 'echo']);
    expect(tools.find((t: { name: string }) => t.name === 'echo')).toMatchObject({ title: 'Echo', annotations: { readOnlyHint: true } });
  });

  it('runs an allowed tools/call and answers the upstream result', async () => {
    const { code, out, err } = await inspector(['--method', 'tools/call', '--tool-name', 'add', '--tool-arg', 'a=2', 'b=3']);
    expect(code, err).toBe(0);
    expect(JSON.parse(out)).toMatchObject({ content: [{ type: 'text', text: '5' }], structuredContent: { sum: 5 } });
    expect(upstream.calls()).toContain('add:{"a":2,"b":3}');
  });

  it("answers a tools/call that policy blocks on its arguments with the policy's message as a tool error, and the upstream runs nothing", async () => {
    const { out, err } = await inspector(['--method', 'tools/call', '--tool-name', 'echo', '--tool-arg', 'text=STOP']);
    // the Inspector prints the tool result and reports the tool error
    expect(JSON.parse(err)).toMatchObject({ error: { code: 'tool_is_error' } });
    expect(JSON.parse(out)).toMatchObject({
      isError: true,
      content: [{ type: 'text', text: "Blocked by Warden policy 'No shouting': No shouting" }],
    });
    expect(upstream.calls()).not.toContain('echo:{"text":"STOP"}');
  });

  it('is refused without a key (HTTP 401), and lists nothing', async () => {
    const { code, out, err } = await inspector(['--method', 'tools/list'], null);
    expect(code).not.toBe(0);
    expect(out).not.toContain('"tools"');
    // the Inspector answers a 401 with WWW-Authenticate by asking for (OAuth) credentials
    expect(JSON.parse(err)).toMatchObject({ error: { code: 'auth_required' } });
  });
});
