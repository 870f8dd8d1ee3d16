/**
 * Upstream-session caps are fair (issue 46, row 6): one agent that opens 100 client sessions
 * on the aggregate endpoint in front of 3 servers (300 upstream sessions, past the workspace's
 * 250) ends its own upstream sessions, never another agent's, whose upstream state (here its
 * session on the upstream, with the log level it set) outlives the flood.
 */
import { randomUUID } from 'node:crypto';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type CountingUpstream, connectClient, startCountingUpstream } from '../mcp-gateway/support.ts';
import { keyFor, useTestServer } from '../support/server.ts';

const server = useTestServer({ egressAllowlist: ['127.0.0.1/32'] });
let upstream: CountingUpstream;
const clients: Client[] = [];

beforeAll(async () => {
  upstream = await startCountingUpstream();
});
afterAll(async () => {
  await Promise.all(clients.map((client) => client.close().catch(() => undefined)));
  await upstream?.close();
});

describe('upstream sessions under a flood of one agent', { timeout: 180_000 }, () => {
  it("end the flooding agent's own least recently used, never another agent's", async () => {
    const key = await keyFor(server, 'agents:write,mcp_servers:write,runtime:execute', `fair-${randomUUID().slice(0, 8)}`);
    const agentKeys = { quiet: `ak_${randomUUID()}`, flood: `ak_${randomUUID()}` };
    const post = (path: string, body: unknown) => server.api('POST', path as '/agents', { key, body, unchecked: true });
    for (const slug of ['alpha', 'beta', 'gamma'])
      expect((await post('/mcp-servers', { name: slug, slug, transport_url: upstream.url })).status).toBe(201);
    for (const [slug, agentKey] of Object.entries(agentKeys))
      expect((await post('/agents', { name: slug, slug, provider: 'local', api_key: agentKey })).status).toBe(201);

    // the quiet agent's session on alpha, with state the upstream keeps for it
    const opened = upstream.openedIds().length;
    const quiet = await connectClient(`${server.url}/mcp/alpha`, { authorization: `Bearer ${agentKeys.quiet}` });
    clients.push(quiet);
    await quiet.setLoggingLevel('debug');
    expect((await quiet.callTool({ name: 'echo', arguments: { text: 'before' } })).isError).toBeFalsy();
    const quietSessions = upstream.openedIds().slice(opened);
    expect(quietSessions).toHaveLength(1);

    // the flood: 100 client sessions of another agent, each listing the tools of 3 servers
    for (let batch = 0; batch < 10; batch++)
      await Promise.all(
        Array.from({ length: 10 }, async () => {
          const client = await connectClient(`${server.url}/mcp`, { authorization: `Bearer ${agentKeys.flood}` });
          clients.push(client);
          expect((await client.listTools()).tools.length).toBeGreaterThan(0);
        }),
      );
    expect(upstream.openedIds().length - opened).toBeGreaterThanOrEqual(300);

    // the quiet agent's upstream session was never ended, and its next call needs no new one
    expect(upstream.deletedIds()).not.toContain(quietSessions[0]);
    const before = upstream.openedIds().length;
    expect((await quiet.callTool({ name: 'echo', arguments: { text: 'after' } })).isError).toBeFalsy();
    expect(upstream.openedIds().length).toBe(before);
  });
});
