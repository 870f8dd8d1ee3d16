/**
 * What the POST /policy/evaluate test files share (evaluate-policy.*.test.ts): constants and
 * helpers bound to the file's server, so that each file keeps its own server and database.
 */
import { readFileSync } from 'node:fs';
import type { AgentCreateWritable, AuditEvent, EvaluationRequest, PolicyCreate } from '@warden/contract';
import { expect } from 'vitest';
import { keyFor, type TestServer } from '../../support/server.ts';

const spec = JSON.parse(readFileSync(new URL('../../../spec/dist/openapi.json', import.meta.url), 'utf8'));
export const PERMISSIONS: string[] = spec.components.schemas.Permission.enum;
export const ALL = PERMISSIONS.join(',');
export const RESULT_FIELDS = [
  'allowed',
  'action',
  'matched',
  'policy',
  'severity',
  'message',
  'result',
  'approval_id',
  'execution_proxy_required',
];
export const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** The helpers of the POST /policy/evaluate tests, bound to `server` (a `useTestServer()` handle). */
export function evaluateHelpers(server: TestServer) {
  /** A key with every permission of a workspace of its own, so that policies never leak between tests. */
  let workspaces = 0;
  const freshWorkspace = () => keyFor(server, ALL, `evaluate-${++workspaces}`);

  const createAgent = async (key: string, body: Omit<AgentCreateWritable, 'provider'>) => {
    const res = await server.api('POST', '/agents', { key, body: { provider: 'local', ...body } });
    expect(res.status).toBe(201);
    return res.body.data;
  };

  const createPolicy = async (key: string, body: PolicyCreate) => {
    const res = await server.api('POST', '/policies', { key, body });
    expect(res.status).toBe(201);
    return res.body.data;
  };

  const evaluate = (key: string | null, body: EvaluationRequest, headers?: Record<string, string>) =>
    server.api('POST', '/policy/evaluate', { key, body, headers });

  /** Every audit event of the key's workspace (all pages of GET /audit-logs), filtered by `query` (`&action=…`). */
  async function auditEvents(key: string, query: '' | `&${string}` = ''): Promise<AuditEvent[]> {
    const events: AuditEvent[] = [];
    let cursor: string | null = null;
    for (let page = 0; page < 50; page++) {
      const res = await server.api('GET', `/audit-logs?limit=100${query}`, { key, query: { cursor: cursor ?? undefined } });
      expect(res.status).toBe(200);
      events.push(...res.body.data);
      cursor = res.body.next_cursor as string | null;
      if (!cursor) break;
    }
    return events;
  }

  return { freshWorkspace, createAgent, createPolicy, evaluate, auditEvents };
}
