/**
 * The dashboard API's approvals (deciding needs approvals:decide besides admin; reading audit,
 * agents and compliance their own permission), billing (the operator's CLI or PUT /billing sets the plan; the page reads it) and
 * the served web app (/dashboard/). Shared helpers: ./support/dashboard.ts.
 */
import { describe, expect, it } from 'vitest';
import { useTestServer } from '../support/server.ts';
import { closeReceiversAfterAll, startReceiver, until, verify } from '../webhooks/support/delivery.ts';
import { dashboardHelpers, thanks } from './support/dashboard.ts';

const server = useTestServer({ egressAllowlist: ['127.0.0.1/32'] });
closeReceiversAfterAll();
const { login, freshWorkspace, newKey } = dashboardHelpers(server);

describe('approvals (/approvals)', () => {
  it('deciding needs approvals:decide: a key with admin only gets 403, one with both approves', async () => {
    const ws = await freshWorkspace('*');
    const approval = await server.api('POST', '/approvals', { key: ws.key, body: { title: 'Refund 250 EUR' } });
    expect(approval.status).toBe(201);
    const id = approval.body.data.id;

    const adminOnly = await login((await newKey(ws.slug, 'admin')).key);
    const listed = await adminOnly.api('GET', '/approvals');
    expect(listed.status).toBe(200);
    expect(listed.body.data.map((a: { id: string }) => a.id)).toContain(id);
    const refused = await adminOnly.api('PATCH', `/approvals/${id}`, { body: { status: 'approved' } });
    expect(refused.status).toBe(403);
    expect(refused.body.error.code).toBe('insufficient_permission');
    expect((await server.api('GET', `/approvals/${id}`, { key: ws.key })).body.data.status).toBe('pending');

    const decider = await login((await newKey(ws.slug, 'admin,approvals:decide')).key);
    const rejectedWithoutNote = await decider.api('PATCH', `/approvals/${id}`, { body: { status: 'rejected' } });
    expect(rejectedWithoutNote.status).toBe(400);
    expect(rejectedWithoutNote.body.error.code).toBe('decision_note_required');
    const approved = await decider.api('PATCH', `/approvals/${id}`, { body: { status: 'approved', decision_note: 'ok' } });
    expect(approved.status).toBe(200);
    expect(approved.body.data).toMatchObject({ id, status: 'approved', decision_note: 'ok' });
    expect(approved.body.data.decided_by).toEqual(expect.any(String));
    const again = await decider.api('PATCH', `/approvals/${id}`, { body: { status: 'rejected', decision_note: 'changed my mind' } });
    expect(again.status).toBe(409);
  });

  it('reading audit, agents and compliance needs their own permission besides admin', async () => {
    const ws = await freshWorkspace('*');
    const adminOnly = await login((await newKey(ws.slug, 'admin')).key);
    for (const path of ['/audit-logs', '/audit/verify', '/agents', '/compliance'] as const) {
      const res = await adminOnly.api('GET', path);
      expect(res.status, path).toBe(403);
      expect(res.body.error.code).toBe('insufficient_permission');
    }
    const reader = await login((await newKey(ws.slug, 'admin,audit:read,agents:read,compliance:read')).key);
    for (const path of ['/audit-logs', '/audit/verify', '/agents', '/compliance'] as const) {
      expect((await reader.api('GET', path)).status, path).toBe(200);
    }
  });
});

describe('billing (/billing)', () => {
  it('shows the plan the operator sets with the CLI (warden billing set-plan), which fires billing.updated', async () => {
    const ws = await freshWorkspace('admin');
    const session = await login(ws.key);
    const receiver = await startReceiver(thanks);
    const created = (await session.api('POST', '/webhooks', { body: { url: receiver.url, events: ['billing.updated'] } })).body.data;

    expect((await session.api('GET', '/billing')).body.data).toMatchObject({ plan: 'free', billing_status: expect.any(String) });
    await server.admin('billing.set-plan', { workspace: ws.slug, plan: 'team' });
    expect((await session.api('GET', '/billing')).body.data.plan).toBe('team');
    expect((await session.api('GET', '/session')).body.data.workspace.plan).toBe('team');

    const event = await until('billing.updated', () => receiver.received[0]);
    expect(event.payload).toMatchObject({ type: 'billing.updated', workspace_id: ws.id, data: { plan: 'team', previous_plan: 'free' } });
    expect(verify(event, created.secret)).toEqual(event.payload);
  });

  it('PUT /billing changes the plan and fires billing.updated; setting the same plan again does not', async () => {
    const ws = await freshWorkspace('admin');
    const session = await login(ws.key);
    const receiver = await startReceiver(thanks);
    await session.api('POST', '/webhooks', { body: { url: receiver.url, events: ['billing.updated'] } });

    const changed = await session.api('PUT', '/billing', { body: { plan: 'team' } });
    expect(changed.status).toBe(200);
    expect(changed.body.data.plan).toBe('team');
    expect((await session.api('PUT', '/billing', { body: { plan: 'team' } })).status).toBe(200);
    expect((await session.api('PUT', '/billing', { body: { plan: 'enterprise' } })).status).toBe(200);
    const second = await until('the second billing.updated', () => receiver.received[1]);
    expect(receiver.received[0]?.payload.data).toMatchObject({ plan: 'team', previous_plan: 'free' });
    expect(second.payload.data).toMatchObject({ plan: 'enterprise', previous_plan: 'team' });
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(receiver.received).toHaveLength(2);
  });

  it('PUT /billing answers 400 invalid_request for an unknown plan', async () => {
    const ws = await freshWorkspace('admin');
    const session = await login(ws.key);
    const res = await session.api('PUT', '/billing', { body: { plan: 'platinum' }, unchecked: true });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('invalid_request');
    expect((await session.api('GET', '/billing')).body.data.plan).toBe('free');
  });
});

describe('GET /dashboard/ (the web app)', () => {
  it("serves the HTML page with Content-Security-Policy default-src 'self'", async () => {
    const res = await fetch(`${server.origin}/dashboard/`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/html/);
    const csp = res.headers.get('content-security-policy') ?? '';
    expect(csp.split(';').map((d) => d.trim())).toContain("default-src 'self'");
    expect(csp).not.toMatch(/unsafe-inline|unsafe-eval/);
    const html = await res.text();
    expect(html).toMatch(/<html/i);
    expect(html).not.toMatch(/<script(?![^>]*\bsrc=)[^>]*>/i);
  });

  it('redirects /dashboard to /dashboard/', async () => {
    const res = await fetch(`${server.origin}/dashboard`, { redirect: 'manual' });
    expect([301, 302, 308]).toContain(res.status);
    expect(new URL(res.headers.get('location') ?? '', server.origin).pathname).toBe('/dashboard/');
  });
});
