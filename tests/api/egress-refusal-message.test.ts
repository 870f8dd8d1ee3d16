/**
 * A target the egress guard refuses (POST /runtime/execute, POST /runtime/mcp/discover) is a
 * 403 execution_target_denied whose message names the fix: WARDEN_EGRESS_ALLOWLIST and the
 * entry that would let it through. Nothing is sent.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { useTestServer } from '../support/server.ts';

const server = useTestServer();

describe('egress refusals name WARDEN_EGRESS_ALLOWLIST', () => {
  beforeAll(async () => {
    const agent = await server.api('POST', '/agents', {
      body: { name: 'Egress bot', slug: 'egress-bot', provider: 'local', environment: 'development' },
    });
    expect(agent.status).toBe(201);
    const mcp = await server.api('POST', '/mcp-servers', {
      body: { name: 'Local MCP', slug: 'local-mcp', transport_url: 'http://127.0.0.1:9/mcp' },
    });
    expect(mcp.status).toBe(201);
  });

  it('executeRuntime to a loopback address: 403 execution_target_denied naming 127.0.0.1/32 and WARDEN_EGRESS_ALLOWLIST', async () => {
    const res = await server.api('POST', '/runtime/execute', {
      body: {
        input: { action: 'http.get', agent: 'egress-bot' },
        execution: { mode: 'http_proxy', method: 'GET', url: 'http://127.0.0.1:9/orders' },
      },
    });
    expect(res.status).toBe(403);
    expect(res.body.error).toEqual({
      code: 'execution_target_denied',
      message: 'target denied: 127.0.0.1 is not a public address (an operator can allow it: add 127.0.0.1/32 to WARDEN_EGRESS_ALLOWLIST)',
    });
  });

  it('executeRuntime to a host name that resolves to loopback: the message names the host to allow', async () => {
    const res = await server.api('POST', '/runtime/execute', {
      body: {
        input: { action: 'http.get', agent: 'egress-bot' },
        execution: { mode: 'http_proxy', method: 'GET', url: 'http://localhost:9/orders' },
      },
    });
    expect(res.status).toBe(403);
    expect(res.body.error.code).toBe('execution_target_denied');
    expect(res.body.error.message).toMatch(
      /is not a public address \(an operator can allow it: add localhost to WARDEN_EGRESS_ALLOWLIST\)$/,
    );
  });

  it('discoverMcpTools on a registered server at a loopback address: 403 naming the server and WARDEN_EGRESS_ALLOWLIST', async () => {
    const res = await server.api('POST', '/runtime/mcp/discover', { body: { server: 'local-mcp', input: { agent: 'egress-bot' } } });
    expect(res.status).toBe(403);
    expect(res.body.error.code).toBe('execution_target_denied');
    expect(res.body.error.message).toContain("MCP server 'local-mcp'");
    expect(res.body.error.message).toContain('add 127.0.0.1/32 to WARDEN_EGRESS_ALLOWLIST');
  });
});
