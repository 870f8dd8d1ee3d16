/**
 * POST /runtime/execute (executeRuntime): the decision before the execution — blocked (nothing sent),
 * approval required then executed exactly once, approvals refused — and the audit events of each.
 */
import { describe, expect, it } from 'vitest';
import { closedPort, UUID, useRuntimeExecute } from './support/runtime-execute.ts';

const { server, execute, http, seen, auditEvents } = useRuntimeExecute();

describe('POST /runtime/execute (executeRuntime)', () => {
  describe('decisions', () => {
    it('answers 200 allowed false with execution null for a blocked action, and sends nothing upstream', async () => {
      const { result: res, requests, connections } = await seen(() => execute(http('/json', {}, { action: 'http.forbidden' })));
      expect(res.status).toBe(200);
      expect(res.body.data).toMatchObject({
        allowed: false,
        execution: null,
        decision: {
          allowed: false,
          action: 'block',
          matched: true,
          policy: 'Proxy rules',
          severity: 'high',
          message: 'Not this one',
          result: 'blocked',
          approval_id: null,
        },
      });
      expect(requests).toEqual([]);
      expect(connections).toBe(0);
    });

    it('asks for an approval, then executes exactly once with the approved approval_id', async () => {
      const request = http('/json', {}, { action: 'http.ask', resource: 'orders/1' });
      const { result: asked, requests: none } = await seen(() => execute(request));
      expect(asked.status).toBe(200);
      expect(asked.body.data).toMatchObject({
        allowed: false,
        execution: null,
        decision: { allowed: false, action: 'require_approval', result: 'approval_required' },
      });
      const approvalId = asked.body.data.decision.approval_id!;
      expect(approvalId).toMatch(UUID);
      expect(none).toEqual([]);

      const approved = await server.api('PATCH', `/approvals/${approvalId}`, { body: { status: 'approved' } });
      expect(approved.status).toBe(200);

      const { result: ran, requests: once } = await seen(() => execute({ ...request, approval_id: approvalId }));
      expect(ran.status).toBe(200);
      expect(ran.body.data).toMatchObject({
        allowed: true,
        decision: { allowed: true, result: 'allowed', approval_id: approvalId },
        execution: { status: 200 },
      });
      expect(once).toHaveLength(1);

      const { result: again, requests: never } = await seen(() => execute({ ...request, approval_id: approvalId }));
      expect(again.status).toBe(400);
      expect(again.body.error.code).toBe('approval_invalid');
      expect(never).toEqual([]);
    });

    it('never executes with a rejected approval', async () => {
      const request = http('/json', {}, { action: 'http.ask', resource: 'orders/2' });
      const asked = await execute(request);
      const approvalId = asked.body.data.decision.approval_id!;
      expect(approvalId).toMatch(UUID);
      expect((await server.api('PATCH', `/approvals/${approvalId}`, { body: { status: 'rejected', decision_note: 'no' } })).status).toBe(
        200,
      );
      const { result: res, requests } = await seen(() => execute({ ...request, approval_id: approvalId }));
      expect(res.status).toBe(200);
      expect(res.body.data).toMatchObject({ allowed: false, execution: null, decision: { allowed: false, result: 'blocked' } });
      expect(requests).toEqual([]);
    });

    it('refuses an approval given for another resource with 400 approval_invalid', async () => {
      const asked = await execute(http('/json', {}, { action: 'http.ask', resource: 'orders/3' }));
      const approvalId = asked.body.data.decision.approval_id!;
      expect((await server.api('PATCH', `/approvals/${approvalId}`, { body: { status: 'approved' } })).status).toBe(200);
      const { result: res, requests } = await seen(() =>
        execute({ ...http('/json', {}, { action: 'http.ask', resource: 'orders/4' }), approval_id: approvalId }),
      );
      expect(res.status).toBe(400);
      expect(res.body.error.code).toBe('approval_invalid');
      expect(requests).toEqual([]);
    });

    it('audits the decision and the outcome of every execution (source execution)', async () => {
      const ok = await execute(http('/json', {}, { action: 'http.audited' }));
      expect(ok.status).toBe(200);
      const events = await auditEvents('http.audited');
      expect(events).toHaveLength(2);
      expect(events.every((e) => e.source === 'execution' && e.agent === 'proxy-bot')).toBe(true);
      expect(events.map((e) => e.id)).toContain(ok.body.data.decision.audit_event_id);

      const port = await closedPort();
      const failed = await execute({
        input: { action: 'http.audited-failure', agent: 'proxy-bot' },
        execution: { mode: 'http_proxy', method: 'GET', url: `http://127.0.0.1:${port}/` },
      });
      expect(failed.status).toBe(502);
      const failureEvents = await auditEvents('http.audited-failure');
      expect(failureEvents).toHaveLength(2);
      expect(failureEvents.every((e) => e.source === 'execution')).toBe(true);

      const blocked = await execute(http('/json', {}, { action: 'http.forbidden', resource: 'audit-check' }));
      expect(blocked.body.data.allowed).toBe(false);
      const blockedEvents = (await auditEvents('http.forbidden')).filter((e) => e.resource === 'audit-check');
      expect(blockedEvents).toHaveLength(1);
      expect(blockedEvents[0]).toMatchObject({ source: 'execution', result: 'blocked', policy: 'Proxy rules' });
    });
  });
});
