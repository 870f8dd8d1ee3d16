/** PATCH /approvals/{id} (decideApproval): approved, rejected, and each refusal; and tenant isolation of approvals. */
import { describe, expect, it } from 'vitest';
import { keyFor, useTestServer } from '../support/server.ts';
import { approvalHelpers, ISO, PERMISSIONS } from './support/approvals.ts';

const server = useTestServer();
const { freshWorkspace, createApproval, decide, listAll } = approvalHelpers(server);

describe('PATCH /approvals/{id} (decideApproval)', () => {
  it('approves, recording who decided and when', async () => {
    const ws = await freshWorkspace();
    const decider = (
      await server.admin('keys.create', { workspace: ws.name, permissions: 'approvals:read,approvals:decide', name: 'alice' })
    ).key;
    const created = await createApproval(ws.key, { title: 'Approve me' });
    const before = Date.now();
    const res = await decide(decider, created.id, { status: 'approved', decision_note: 'fine' });
    expect(res.status).toBe(200);
    expect(res.body.data).toMatchObject({
      id: created.id,
      status: 'approved',
      decided_by: 'alice',
      decision_note: 'fine',
      consumed_at: null,
    });
    expect(res.body.data.decided_at).toMatch(ISO);
    expect(Math.abs(Date.parse(res.body.data.decided_at!) - before)).toBeLessThan(10_000);
    expect((await server.api('GET', `/approvals/${created.id}`, { key: ws.key })).body.data).toEqual(res.body.data);
  });

  it('rejects with a decision_note', async () => {
    const { key } = await freshWorkspace();
    const created = await createApproval(key, { title: 'Reject me' });
    const res = await decide(key, created.id, { status: 'rejected', decision_note: 'Amount above the refund limit' });
    expect(res.status).toBe(200);
    expect(res.body.data).toMatchObject({ status: 'rejected', decision_note: 'Amount above the refund limit' });
    expect(res.body.data.decided_at).toMatch(ISO);
    expect(typeof res.body.data.decided_by).toBe('string');
  });

  it.each([
    ['without decision_note', { status: 'rejected' }],
    ['with a blank decision_note', { status: 'rejected', decision_note: '   ' }],
  ] as const)('answers 400 decision_note_required for a rejection %s, leaving it pending', async (_label, body) => {
    const { key } = await freshWorkspace();
    const created = await createApproval(key, { title: 'Keep pending' });
    const res = await decide(key, created.id, body);
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('decision_note_required');
    expect((await server.api('GET', `/approvals/${created.id}`, { key })).body.data.status).toBe('pending');
  });

  it('answers 409 approval_already_decided for a second decision, keeping the first', async () => {
    const { key } = await freshWorkspace();
    const created = await createApproval(key, { title: 'Once' });
    expect((await decide(key, created.id, { status: 'approved' })).status).toBe(200);
    // a rejection without a note too: what the approval is comes first (issue 48)
    for (const body of [
      { status: 'approved' },
      { status: 'rejected', decision_note: 'changed my mind' },
      { status: 'rejected' },
    ] as const) {
      const res = await decide(key, created.id, body);
      expect(res.status).toBe(409);
      expect(res.body.error.code).toBe('approval_already_decided');
    }
    expect((await server.api('GET', `/approvals/${created.id}`, { key })).body.data.status).toBe('approved');
  });

  it('lets exactly one of two concurrent decisions win, the other answering 409', async () => {
    const { key } = await freshWorkspace();
    const created = await createApproval(key, { title: 'Race' });
    const [a, b] = await Promise.all([
      decide(key, created.id, { status: 'approved' }),
      decide(key, created.id, { status: 'rejected', decision_note: 'no' }),
    ]);
    expect([a.status, b.status].sort()).toEqual([200, 409]);
    const winner = a.status === 200 ? a : b;
    expect((await server.api('GET', `/approvals/${created.id}`, { key })).body.data.status).toBe(winner.body.data.status);
  });

  it('answers 403 insufficient_permission for a key with every permission but approvals:decide', async () => {
    const ws = await freshWorkspace();
    const created = await createApproval(ws.key, { title: 'Not yours' });
    const key = await keyFor(server, PERMISSIONS.filter((p) => p !== 'approvals:decide').join(','), ws.name);
    const res = await decide(key, created.id, { status: 'approved' });
    expect(res.status).toBe(403);
    expect(res.body.error.code).toBe('insufficient_permission');
    expect((await server.api('GET', `/approvals/${created.id}`, { key: ws.key })).body.data.status).toBe('pending');
  });

  it('answers 404 not_found for an unknown id and 400 invalid_request for a non-UUID', async () => {
    const missing = await decide(server.key, '00000000-0000-4000-8000-000000000000', { status: 'approved' });
    expect(missing.status).toBe(404);
    expect(missing.body.error.code).toBe('not_found');
    const bad = await decide(server.key, 'not-a-uuid', { status: 'approved' });
    expect(bad.status).toBe(400);
    expect(bad.body.error.code).toBe('invalid_request');
  });

  it.each([
    ['missing status', { decision_note: 'x' }],
    ['status pending', { status: 'pending' }],
    ['status expired', { status: 'expired' }],
    ['unknown field', { status: 'approved', colour: 'red' }],
  ])('answers 400 invalid_request for %s', async (_label, body) => {
    const { key } = await freshWorkspace();
    const created = await createApproval(key, { title: 'Bad decision' });
    const res = await server.api('PATCH', `/approvals/${created.id}`, { key, body, unchecked: true });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('invalid_request');
  });

  it('answers 401 unauthorized without a key', async () => {
    const res = await server.api('PATCH', '/approvals/00000000-0000-4000-8000-000000000000', { key: null, body: { status: 'approved' } });
    expect(res.status).toBe(401);
    expect(res.body.error.code).toBe('unauthorized');
  });
});

describe('approvals tenant isolation', () => {
  it("never shows or decides another workspace's approval", async () => {
    const owner = await freshWorkspace();
    const created = await createApproval(owner.key, { title: 'Private approval' });
    const intruder = await freshWorkspace();
    expect((await server.api('GET', `/approvals/${created.id}`, { key: intruder.key })).status).toBe(404);
    const decided = await decide(intruder.key, created.id, { status: 'approved' });
    expect(decided.status).toBe(404);
    expect(decided.body.error.code).toBe('not_found');
    for (const path of ['/approvals', '/approval/request', '/approvals?status=pending'] as const) {
      expect((await listAll(intruder.key, path)).find((a) => a.id === created.id)).toBeUndefined();
    }
    expect((await server.api('GET', `/approvals/${created.id}`, { key: owner.key })).body.data.status).toBe('pending');
  });
});
