/**
 * Tenant isolation, walked over the whole contract: every operation of the spec is called
 * with a key of workspace B (holding every permission) against the resources of workspace A.
 * Nothing of A may be read, changed or listed: id-addressed operations answer 404 (or 403
 * agent_not_found for runtime calls naming A's agent), lists never contain A's items, and
 * A's resources are unchanged afterwards.
 */
import { randomUUID } from 'node:crypto';
import { operations } from '@warden/contract';
import { beforeAll, describe, expect, it } from 'vitest';
import spec from '../../spec/dist/openapi.json' with { type: 'json' };
import { keyFor, useTestServer } from '../support/server.ts';

const server = useTestServer();
let keyB: string;
/** Workspace A's resources: ids, and the names a request may use instead. */
const a = {} as {
  agent: string;
  agentSlug: string;
  policy: string;
  policyName: string;
  approval: string;
  server: string;
  serverSlug: string;
  credential: string;
  /** An id no workspace has: for collections A holds nothing of (OAuth grants come only from a sign-in). */
  nobody: string;
};

type Schema = { $ref?: string; example?: unknown };
const schemas = (spec as unknown as { components: { schemas: Record<string, Schema> } }).components.schemas;
function exampleBody(operationId: string): Record<string, unknown> | undefined {
  for (const item of Object.values(
    (
      spec as unknown as {
        paths: Record<
          string,
          Record<string, { operationId?: string; requestBody?: { content: { 'application/json': { schema: Schema } } } }>
        >;
      }
    ).paths,
  )) {
    for (const op of Object.values(item)) {
      if (op?.operationId !== operationId) continue;
      const ref = op.requestBody?.content['application/json'].schema.$ref;
      return ref ? structuredClone(schemas[ref.split('/').pop() as string]?.example as Record<string, unknown>) : undefined;
    }
  }
  return undefined;
}

/** Points an example body at workspace A's resources (by their names), so B's call aims at them. */
function aimAtA(body: Record<string, unknown> | undefined): Record<string, unknown> | undefined {
  if (!body) return body;
  const text = JSON.stringify(body)
    .replaceAll('billing-bot', a.agentSlug as string)
    .replaceAll('"github"', `"${a.serverSlug}"`);
  return JSON.parse(text);
}

async function snapshotA() {
  const key = server.key;
  return {
    agent: (await server.api('GET', `/agents/${a.agent}`, { key })).body,
    policy: (await server.api('GET', `/policies/${a.policy}`, { key })).body,
    approval: (await server.api('GET', `/approvals/${a.approval}`, { key })).body,
    server: (await server.api('GET', `/mcp-servers/${a.server}`, { key })).body,
    credential: (await server.api('GET', `/credentials/${a.credential}`, { key })).body,
    audit: (await server.api('GET', '/audit-logs?limit=100', { key })).body.data.length,
  };
}

beforeAll(async () => {
  const agent = (
    await server.api('POST', '/agents', { body: { name: 'A private agent', provider: 'local', api_key: 'agent-key-of-workspace-a-123' } })
  ).body.data;
  const policy = (
    await server.api('POST', '/policies', {
      body: { name: 'A private policy', rules: [{ match: { action: ['x'] }, effect: 'require_approval' }] },
    })
  ).body.data;
  const approval = (await server.api('POST', '/approvals', { body: { title: 'A private approval', agent: agent.slug } })).body.data;
  const mcp = (await server.api('POST', '/mcp-servers', { body: { name: 'A private server', transport_url: 'https://mcp.example.com/a' } }))
    .body.data;
  const credential = (
    await server.api('POST', '/credentials', {
      body: { name: 'a-private-cred', hosts: ['a.example.com'], auth: { type: 'bearer', secret: 'secret-of-workspace-a-123' } },
    })
  ).body.data;
  await server.api('POST', '/audit', { body: { action: 'a.private', result: 'blocked', agent: agent.slug } });
  Object.assign(a, {
    agent: agent.id,
    agentSlug: agent.slug,
    policy: policy.id,
    policyName: policy.name,
    approval: approval.id,
    server: mcp.id,
    serverSlug: mcp.slug,
    credential: credential.id,
    nobody: randomUUID(),
  });
  keyB = await keyFor(server, '*', 'workspace-b');
});

const idFor: Record<string, keyof typeof a> = {
  agents: 'agent',
  policies: 'policy',
  approvals: 'approval',
  'mcp-servers': 'server',
  credentials: 'credential',
  'oauth-grants': 'nobody',
};

describe('tenant isolation over every operation', () => {
  it('a key of workspace B reads, changes and lists nothing of workspace A', async () => {
    const before = await snapshotA();
    const aIds = [a.agent, a.policy, a.approval, a.server, a.credential] as string[];
    const walked: string[] = [];
    for (const row of operations) {
      const collection = row.path.split('/')[1] as string;
      const id = idFor[collection];
      const path = row.path.replace('{id}', id ? a[id] : 'missing');
      const body = row.method === 'get' || row.method === 'delete' ? undefined : (aimAtA(exampleBody(row.operationId)) ?? {});
      // every operation of the contract, from its table: typed by the row, not by the call
      const res = await server.api(row.method.toUpperCase(), path, { key: keyB, body, unchecked: true });
      walked.push(`${row.method.toUpperCase()} ${row.path} → ${res.status}`);
      const text = JSON.stringify(res.body);
      if (row.path.includes('{id}')) {
        expect(res.status, `${row.operationId} on A's resource`).toBe(404);
      } else if (res.status >= 200 && res.status < 300) {
        for (const id of aIds) expect(text, `${row.operationId} leaked ${id}`).not.toContain(id);
        expect(text).not.toContain('A private');
        expect(text).not.toContain('a.private');
      } else {
        expect([400, 403, 404, 409], `${row.operationId}: ${text}`).toContain(res.status);
      }
    }
    expect(walked).toHaveLength(operations.length);
    expect(await snapshotA()).toEqual(before);
  });

  it('runtime calls naming workspace A’s agent or MCP server are refused for another workspace', async () => {
    // a fresh workspace: the walk above let B create resources named like A's
    keyB = await keyFor(server, '*', 'workspace-c');
    const evaluate = await server.api('POST', '/policy/evaluate', { key: keyB, body: { input: { action: 'x', agent: a.agentSlug } } });
    expect(evaluate.status).toBe(403);
    expect(evaluate.body.error.code).toBe('agent_not_found');
    await server.api('POST', '/agents', { key: keyB, body: { name: 'B agent', provider: 'local' } });
    const call = await server.api('POST', '/runtime/mcp/call', {
      key: keyB,
      body: { server: a.serverSlug, tool: 't', input: { agent: 'b-agent' } },
    });
    expect(call.status, JSON.stringify(call.body)).toBe(404);
    expect(call.body.error.code).toBe('mcp_server_not_found');
    const agentKeyOfA = await server.api('POST', '/policy/evaluate', {
      key: keyB,
      headers: { 'x-warden-agent-key': 'agent-key-of-workspace-a-123' },
      body: { input: { action: 'x' } },
    });
    expect(agentKeyOfA.status).toBe(401);
    expect(agentKeyOfA.body.error.code).toBe('invalid_agent_key');
  });
});
