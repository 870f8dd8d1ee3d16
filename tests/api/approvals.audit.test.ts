/**
 * Every approval is on the record (issue 36): asked for (by a policy's decision or with POST
 * /approvals), approved or rejected (who, when, with which note), expired and consumed, each an
 * audit event of source `approval` naming the act's digest, written in the approval's own
 * transaction — so a later change of the `approvals` row cannot rewrite what the sealed log says.
 */
import { describe, expect, it } from 'vitest';
import { useTestServer } from '../support/server.ts';
import { approvalHelpers } from './support/approvals.ts';

const server = useTestServer();
const { freshWorkspace, createApproval, decide, evaluate, approvalWorkspace } = approvalHelpers(server);

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

  it("records a policy's approval from request to use: requested, approved, consumed, each naming the act's digest", async () => {
    const ws = await approvalWorkspace();
    const asked = await evaluate(ws.key, { input: { action: 'refund.create', resource: 'orders/9', agent: 'billing-bot' } });
    const approvalId = asked.body.data.approval_id as string;
    expect(approvalId).toBeTruthy();
    expect((await decide(ws.key, approvalId, { status: 'approved', decision_note: 'fine' })).status).toBe(200);
    const used = await evaluate(ws.key, {
      input: { action: 'refund.create', resource: 'orders/9', agent: 'billing-bot' },
      approval_id: approvalId,
    });
    expect(used.body.data).toMatchObject({ allowed: true });
    const approval = (await server.api('GET', `/approvals/${approvalId}`, { key: ws.key })).body.data;
    expect(approval.input_digest).toMatch(/^[0-9a-f]{64}$/);

    const events = await approvalEvents(ws.key, approvalId);
    expect(events.map((e) => e.action)).toEqual(['approval.requested', 'approval.approved', 'approval.consumed']);
    for (const event of events) {
      expect(event).toMatchObject({ approval_id: approvalId, agent: 'billing-bot', context: { input_digest: approval.input_digest } });
      expect(event.user).toEqual(expect.any(String));
    }
    expect(events[0]!.context).toMatchObject({ status: 'pending', act_action: 'refund.create', act_resource: 'orders/9' });
    expect(events[2]).toMatchObject({ severity: 'medium', context: { status: 'approved', decision_note: 'fine' } });
    // the same key asked and used it
    expect(events[2]!.user).toBe(events[0]!.user);
  });

  it('records an approval that expired undecided, once, by warden; it can no longer be decided', async () => {
    const ws = await freshWorkspace();
    const created = await createApproval(ws.key, { title: 'Short-lived', expires_in_seconds: 60 });
    // a minute passes (the shortest expiry the API takes)
    await server.database.db
      .updateTable('approvals')
      .set({ expires_at: new Date(Date.now() - 1_000) })
      .where('id', '=', created.id)
      .execute();
    const deadline = Date.now() + 15_000;
    let events: Record<string, any>[] = [];
    while (Date.now() < deadline) {
      events = await approvalEvents(ws.key, created.id);
      if (events.some((e) => e.action === 'approval.expired')) break;
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    expect(events.map((e) => e.action)).toEqual(['approval.requested', 'approval.expired']);
    expect(events[1]).toMatchObject({ user: 'warden', context: { status: 'expired', title: 'Short-lived' } });
    expect((await server.api('GET', `/approvals/${created.id}`, { key: ws.key })).body.data.status).toBe('expired');
    expect((await decide(ws.key, created.id, { status: 'approved' })).status).toBe(409);
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    expect((await approvalEvents(ws.key, created.id)).filter((e) => e.action === 'approval.expired')).toHaveLength(1);
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
