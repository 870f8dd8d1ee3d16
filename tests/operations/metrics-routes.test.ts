/**
 * Issue 38, metrics by route: every request is labelled by what it was aimed at — the probes,
 * the MCP gateway, and refusals made before the contract validator (401 without a key, for one)
 * by the operation of their method and path — and only a path nothing serves is `unmatched`.
 * On PostgreSQL, the pool gauge at rest reports no request waiting (it counted the scrape's own
 * query). Samples are read from the exposition text by a parser written here.
 */
import { request as httpRequest } from 'node:http';
import { beforeAll, describe, expect, it } from 'vitest';
import { useTestServer } from '../support/server.ts';

/** Every sample of `name` as its labels and value. */
function samples(text: string, name: string): { labels: Record<string, string>; value: number }[] {
  const found = [];
  for (const line of text.split('\n')) {
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$/.exec(line);
    if (!match || match[1] !== name) continue;
    const labels = Object.fromEntries([...(match[3] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((m) => [m[1], m[2]]));
    found.push({ labels: labels as Record<string, string>, value: Number(match[4]) });
  }
  return found;
}

/** Over node:http (fetch would be counted on undici's channels as an upstream call of this process). */
function plain(method: string, url: string, headers: Record<string, string> = {}, body?: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(url, { method, headers }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
    });
    req.on('error', reject);
    req.end(body);
  });
}

describe('warden_http_requests_total by route', () => {
  const server = useTestServer({ metricsPort: 0 });
  let text = '';
  const statuses: Record<string, number> = {};
  const count = (operation: string, status?: number) =>
    samples(text, 'warden_http_requests_total')
      .filter((s) => s.labels.operation === operation && (status === undefined || s.labels.status === String(status)))
      .reduce((sum, s) => sum + s.value, 0);

  beforeAll(async () => {
    const json = { 'content-type': 'application/json' };
    const mcpBody = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' });
    const mcpHeaders = { ...json, accept: 'application/json, text/event-stream' };
    statuses.livez = await plain('GET', `${server.origin}/livez`);
    statuses.readyz = await plain('GET', `${server.origin}/readyz`);
    statuses.mcpAnonymous = await plain('POST', `${server.url}/mcp`, mcpHeaders, mcpBody);
    statuses.mcpServer = await plain(
      'POST',
      `${server.url}/mcp/some-server`,
      { ...mcpHeaders, authorization: 'Bearer wk_wrong_key' },
      mcpBody,
    );
    statuses.evaluateAnonymous = await plain('POST', `${server.url}/policy/evaluate`, json, '{}');
    statuses.getAgentWrongKey = await plain('GET', `${server.url}/agents/00000000-0000-4000-8000-000000000000`, {
      authorization: 'Bearer wk_wrong_key',
    });
    statuses.sessionAnonymous = await plain('GET', `${server.origin}/dashboard/api/session`);
    statuses.unknown = await plain('GET', `${server.url}/no-such-route`, { authorization: `Bearer ${server.key}` });
    statuses.listAgents = await plain('GET', `${server.url}/agents`, { authorization: `Bearer ${server.key}` });
    const res = await fetch(server.metricsUrl as string);
    text = await res.text();
  });

  it('labels the probes livez and readyz', () => {
    expect([statuses.livez, statuses.readyz]).toEqual([200, 200]);
    expect(count('livez', 200)).toBe(1);
    expect(count('readyz', 200)).toBe(1);
  });

  it('labels the MCP gateway mcp.gateway, refusals included', () => {
    expect([statuses.mcpAnonymous, statuses.mcpServer]).toEqual([401, 401]);
    expect(count('mcp.gateway', 401)).toBe(2);
  });

  it('labels a 401 by the operation its method and path were aimed at', () => {
    expect([statuses.evaluateAnonymous, statuses.getAgentWrongKey, statuses.sessionAnonymous]).toEqual([401, 401, 401]);
    expect(count('evaluatePolicy', 401)).toBe(1);
    expect(count('getAgent', 401)).toBe(1);
    expect(count('getSession', 401)).toBe(1);
    expect(count('listAgents', 200)).toBe(1);
  });

  it('keeps unmatched for the path nothing serves, and for nothing else', () => {
    expect(statuses.unknown).toBe(404);
    expect(count('unmatched')).toBe(1);
    expect(count('unmatched', 404)).toBe(1);
  });
});

describe.runIf(process.env.DATABASE_URL)('warden_db_pool_connections at rest', () => {
  const server = useTestServer({ metricsPort: 0 });

  it('reports no request waiting for a connection when nothing is asked of the database', async () => {
    const waiting: number[] = [];
    for (let i = 0; i < 3; i++) {
      // scrapes farther apart than the backlog's cache, so each one queries
      await new Promise((resolve) => setTimeout(resolve, 1_100));
      const text = await (await fetch(server.metricsUrl as string)).text();
      const sample = samples(text, 'warden_db_pool_connections').find((s) => s.labels.state === 'waiting');
      expect(sample).toBeDefined();
      waiting.push(sample?.value as number);
    }
    expect(waiting).toEqual([0, 0, 0]);
  }, 30_000);
});
