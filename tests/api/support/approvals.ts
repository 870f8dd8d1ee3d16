/**
 * What the approvals test files share (approvals.*.test.ts): the constants of the contract and
 * helpers bound to the file's server, so that each file keeps its own server and database.
 */
import { readFileSync } from 'node:fs';
import type { AgentCreateWritable, Approval, ApprovalCreate, ApprovalDecision, EvaluationRequest, PolicyCreate } from '@warden/contract';
import { expect } from 'vitest';
import { keyFor, type TestServer } from '../../support/server.ts';

const spec = JSON.parse(readFileSync(new URL('../../../spec/dist/openapi.json', import.meta.url), 'utf8'));
export const PERMISSIONS: string[] = spec.components.schemas.Permission.enum;
export const ALL = PERMISSIONS.join(',');
export const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
export const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
export const APPROVAL_FIELDS = [
  'environment',
  'tool',
  'execution',
  'input_digest',
  'rule',
  'policy_version',
  'id',
  'title',
  'description',
  'priority',
  'type',
  'status',
  'agent',
  'policy',
  'action',
  'resource',
  'context',
  'decision_note',
  'decided_by',
  'decided_at',
  'expires_at',
  'consumed_at',
  'created_at',
  'updated_at',
];

/** The input that `approvalWorkspace()`'s policy sends for approval. */
export const refund = { action: 'refund.create', resource: 'orders/1234', agent: 'billing-bot' };

type ApprovalListPath = '/approvals' | `/approvals?${string}` | '/approval/request' | `/approval/request?${string}`;

/** The helpers of the approvals tests, bound to `server` (a `useTestServer()` handle). */
export function approvalHelpers(server: TestServer) {
  let workspaces = 0;
  const freshWorkspace = async (name = `approvals-${++workspaces}`) => {
    const key = await keyFor(server, ALL, name);
    return { key, name };
  };

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

  const createApproval = async (key: string, body: ApprovalCreate, path: '/approvals' | '/approval/request' = '/approvals') => {
    const res = await server.api('POST', path, { key, body });
    expect(res.status).toBe(201);
    return res.body.data;
  };

  /** PATCH /approvals/{id}; `id` may be an evaluation's `approval_id` (null when none was asked for: the test then fails on the status). */
  const decide = (key: string, id: string | null, body: ApprovalDecision) => server.api('PATCH', `/approvals/${id}`, { key, body });

  const evaluate = (key: string, body: EvaluationRequest) => server.api('POST', '/policy/evaluate', { key, body });

  /** A workspace whose policy asks for approval before `refund.create` by any agent. */
  async function approvalWorkspace() {
    const ws = await freshWorkspace();
    await createAgent(ws.key, { name: 'Billing bot', slug: 'billing-bot' });
    await createAgent(ws.key, { name: 'Other bot', slug: 'other-bot' });
    await createPolicy(ws.key, {
      name: 'Refunds need approval',
      rules: [{ match: { action: ['refund.*'] }, effect: 'require_approval', severity: 'high', message: 'A human approves refunds' }],
    });
    return ws;
  }

  /** Every page of a list of approvals, with the filters in `path`'s query string. */
  async function listAll(key: string, path: ApprovalListPath): Promise<Approval[]> {
    const items: Approval[] = [];
    let cursor: string | null = null;
    for (let page = 0; page < 50; page++) {
      const res = await server.api('GET', path, { key, query: { limit: 100, cursor: cursor ?? undefined } });
      expect(res.status).toBe(200);
      items.push(...res.body.data);
      cursor = res.body.next_cursor as string | null;
      if (!cursor) break;
    }
    return items;
  }

  return { freshWorkspace, createAgent, createPolicy, createApproval, decide, evaluate, approvalWorkspace, listAll };
}
