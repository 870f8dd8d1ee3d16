/** POST /policy/evaluate (evaluatePolicy) with approvals: asking for one, using it once, and each way it is refused. */
import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { useTestServer } from '../support/server.ts';
import { approvalHelpers, ISO, refund, UUID } from './support/approvals.ts';

const server = useTestServer();
const { createPolicy, createApproval, decide, evaluate, approvalWorkspace, listAll } = approvalHelpers(server);

describe('POST /policy/evaluate (evaluatePolicy) with approvals', () => {
  it('creates a pending approval for a require_approval decision and returns its id', async () => {
    const { key } = await approvalWorkspace();
    const res = await evaluate(key, { input: refund });
    expect(res.status).toBe(200);
    expect(res.body.data).toMatchObject({
      allowed: false,
      action: 'require_approval',
      matched: true,
      policy: 'Refunds need approval',
      result: 'approval_required',
      severity: 'high',
    });
    expect(res.body.data.approval_id).toMatch(UUID);

    const approval = await server.api('GET', `/approvals/${res.body.data.approval_id}`, { key });
    expect(approval.status).toBe(200);
    expect(approval.body.data).toMatchObject({
      id: res.body.data.approval_id,
      status: 'pending',
      type: 'policy',
      agent: 'billing-bot',
      policy: 'Refunds need approval',
      action: 'refund.create',
      resource: 'orders/1234',
      decided_by: null,
      decided_at: null,
      consumed_at: null,
    });
  });

  it('answers the same pending approval while it is pending, without creating another', async () => {
    const { key } = await approvalWorkspace();
    const id = (await evaluate(key, { input: refund })).body.data.approval_id!;
    const again = await evaluate(key, { input: refund, approval_id: id });
    expect(again.status).toBe(200);
    expect(again.body.data).toMatchObject({ allowed: false, result: 'approval_required', approval_id: id });
    const all = await listAll(key, '/approvals');
    expect(all.map((a) => a.id)).toEqual([id]);
  });

  it('allows once after approval, then refuses a second use with 400 approval_invalid', async () => {
    const { key } = await approvalWorkspace();
    const id = (await evaluate(key, { input: refund })).body.data.approval_id!;
    expect((await decide(key, id, { status: 'approved' })).status).toBe(200);

    const first = await evaluate(key, { input: refund, approval_id: id });
    expect(first.status).toBe(200);
    expect(first.body.data).toMatchObject({ allowed: true, result: 'allowed', approval_id: id });
    const used = (await server.api('GET', `/approvals/${id}`, { key })).body.data;
    expect(used.consumed_at).toMatch(ISO);

    const second = await evaluate(key, { input: refund, approval_id: id });
    expect(second.status).toBe(400);
    expect(second.body.error.code).toBe('approval_invalid');
    // Without the approval the action still needs one: a new approval is asked for.
    const fresh = await evaluate(key, { input: refund });
    expect(fresh.body.data.result).toBe('approval_required');
    expect(fresh.body.data.approval_id).not.toBe(id);
  });

  it('refuses an approval used for another action, resource or agent with 400 approval_invalid', async () => {
    const { key } = await approvalWorkspace();
    const id = (await evaluate(key, { input: refund })).body.data.approval_id!;
    expect((await decide(key, id, { status: 'approved' })).status).toBe(200);
    for (const input of [
      { ...refund, action: 'refund.cancel' },
      { ...refund, resource: 'orders/9999' },
      { action: refund.action, agent: refund.agent },
      { ...refund, agent: 'other-bot' },
    ]) {
      const res = await evaluate(key, { input, approval_id: id });
      expect(res.status, JSON.stringify(input)).toBe(400);
      expect(res.body.error.code).toBe('approval_invalid');
    }
    // The refused attempts did not use it up.
    const right = await evaluate(key, { input: refund, approval_id: id });
    expect(right.body.data).toMatchObject({ allowed: true, result: 'allowed' });
  });

  it('blocks an evaluation carrying a rejected approval', async () => {
    const { key } = await approvalWorkspace();
    const id = (await evaluate(key, { input: refund })).body.data.approval_id!;
    expect((await decide(key, id, { status: 'rejected', decision_note: 'Too much' })).status).toBe(200);
    const res = await evaluate(key, { input: refund, approval_id: id });
    expect(res.status).toBe(200);
    expect(res.body.data).toMatchObject({ allowed: false, result: 'blocked' });
  });

  it('still blocks by a blocking rule whatever the approval', async () => {
    const { key } = await approvalWorkspace();
    const id = (await evaluate(key, { input: refund })).body.data.approval_id!;
    expect((await decide(key, id, { status: 'approved' })).status).toBe(200);
    await createPolicy(key, { name: 'Refund freeze', rules: [{ match: { action: ['refund.create'] }, effect: 'block' }] });
    const res = await evaluate(key, { input: refund, approval_id: id });
    expect(res.status).toBe(200);
    expect(res.body.data).toMatchObject({ allowed: false, result: 'blocked', policy: 'Refund freeze' });
  });

  it('allows exactly one of several concurrent evaluations carrying the same approved approval', async () => {
    const { key } = await approvalWorkspace();
    const id = (await evaluate(key, { input: refund })).body.data.approval_id!;
    expect((await decide(key, id, { status: 'approved' })).status).toBe(200);
    const results = await Promise.all(Array.from({ length: 6 }, () => evaluate(key, { input: refund, approval_id: id })));
    const allowed = results.filter((r) => r.status === 200 && r.body.data.allowed === true);
    expect(allowed).toHaveLength(1);
    for (const r of results.filter((x) => !allowed.includes(x))) {
      expect(r.status).toBe(400);
      expect(r.body.error.code).toBe('approval_invalid');
    }
  });

  it('allows with an approved approval created through POST /approvals that pins the same input', async () => {
    const { key } = await approvalWorkspace();
    const manual = await createApproval(key, { title: 'Pre-approved refund', input: refund });
    expect(manual).toMatchObject({ agent: 'billing-bot', action: refund.action, resource: refund.resource });
    expect(manual.input_digest).toMatch(/^[0-9a-f]{64}$/);
    expect((await decide(key, manual.id, { status: 'approved' })).status).toBe(200);
    const res = await evaluate(key, { input: refund, approval_id: manual.id });
    expect(res.status).toBe(200);
    expect(res.body.data).toMatchObject({ allowed: true, result: 'allowed', approval_id: manual.id });
  });

  it('refuses an approved POST /approvals approval that pins no input with 400 approval_invalid (it authorises no runtime decision)', async () => {
    const { key } = await approvalWorkspace();
    const manual = await createApproval(key, { title: 'Harmless', agent: 'billing-bot', action: refund.action, resource: refund.resource });
    expect(manual.input_digest).toBeNull();
    expect((await decide(key, manual.id, { status: 'approved' })).status).toBe(200);
    const res = await evaluate(key, { input: refund, approval_id: manual.id });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('approval_invalid');
  });

  it('refuses an approved approval once it has expired with 400 approval_invalid', async () => {
    const { key } = await approvalWorkspace();
    const id = (await evaluate(key, { input: refund })).body.data.approval_id!;
    expect((await decide(key, id, { status: 'approved' })).status).toBe(200);
    await sql`UPDATE approvals SET expires_at = now() - interval '1 second' WHERE id = ${id}`.execute(server.database.db);
    const res = await evaluate(key, { input: refund, approval_id: id });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('approval_invalid');
  });

  it("answers 400 approval_invalid for an unknown approval or another workspace's", async () => {
    const { key } = await approvalWorkspace();
    const unknown = await evaluate(key, { input: refund, approval_id: '00000000-0000-4000-8000-000000000000' });
    expect(unknown.status).toBe(400);
    expect(unknown.body.error.code).toBe('approval_invalid');

    const other = await approvalWorkspace();
    const foreign = (await evaluate(other.key, { input: refund })).body.data.approval_id!;
    expect((await decide(other.key, foreign, { status: 'approved' })).status).toBe(200);
    const res = await evaluate(key, { input: refund, approval_id: foreign });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('approval_invalid');
    expect((await server.api('GET', `/approvals/${foreign}`, { key: other.key })).body.data.consumed_at).toBeNull();
  });
});
