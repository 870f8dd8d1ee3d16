/**
 * Every approval is on the record (issue 36): one asked for with POST /approvals, and every
 * decision on one (who, when, with which note), as audit events of source `approval` written
 * in the approval's own transaction — so a later change of the `approvals` row cannot rewrite
 * what the sealed log says was decided.
 */
import { describe, expect, it } from 'vitest';
import { useTestServer } from '../support/server.ts';
import { approvalHelpers } from './support/approvals.ts';

const server = useTestServer();
const { freshWorkspace, createApproval, decide } = approvalHelpers(server);

async function approvalEvents(key: string, approvalId: string) {
  const res = await server.api('GET', '/audit-logs', { key, query: { limit: 100 } });
  expect(res.status).toBe(200);
  return (res.body.data as Record<string, any>[]).filter((e) => e.source === 'approval' && e.resource === approvalId).reverse();
}

describe('approvals in the audit log', () => {
  it('records a manual approval, then who approved it, when and with which note', async () => {
    const ws = await freshWorkspace();
    const alice = (await server.admin('keys.create', { workspace: ws.name, permissions: 'approvals:decide,audit:read', name: 'alice' }))
      .key;
    const created = await createApproval(ws.key, { title: 'Refund 120 EUR', action: 'payments.refund', resource: 'order/7' });
    const decided = await decide(alice, created.id, { status: 'approved', decision_note: 'customer called' });
    expect(decided.status).toBe(200);

    const events = await approvalEvents(ws.key, created.id);
    expect(events.map((e) => e.action)).toEqual(['approval.requested', 'approval.approved']);
    expect(events[0]).toMatchObject({
      result: 'allowed',
      approval_id: created.id,
      context: { title: 'Refund 120 EUR', status: 'pending' },
    });
    expect(events[1]).toMatchObject({
      user: 'alice',
      severity: 'medium',
      message: 'customer called',
      approval_id: created.id,
      context: { status: 'approved', decision_note: 'customer called', act_action: 'payments.refund', act_resource: 'order/7' },
    });
    expect(Math.abs(Date.parse(events[1]!.event_timestamp) - Date.parse(decided.body.data.decided_at!))).toBeLessThan(5_000);
  });

  it('records a rejection with its note; a refused decision records nothing', async () => {
    const ws = await freshWorkspace();
    const created = await createApproval(ws.key, { title: 'Delete the bucket' });
    expect((await decide(ws.key, created.id, { status: 'rejected', decision_note: 'no' })).status).toBe(200);
    expect((await decide(ws.key, created.id, { status: 'approved', decision_note: 'changed my mind' })).status).toBe(409);
    const events = await approvalEvents(ws.key, created.id);
    expect(events.map((e) => [e.action, e.message])).toEqual([
      ['approval.requested', 'Delete the bucket'],
      ['approval.rejected', 'no'],
    ]);
  });
});
