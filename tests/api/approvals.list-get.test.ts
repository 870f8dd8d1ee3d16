/** GET /approvals, GET /approval/request (listing, filters, cursors) and GET /approvals/{id}: found, and each refusal. */
import type { Approval } from '@warden/contract';
import { describe, expect, it } from 'vitest';
import { keyFor, useTestServer } from '../support/server.ts';
import { approvalHelpers, PERMISSIONS } from './support/approvals.ts';

const server = useTestServer();
const { freshWorkspace, createAgent, createApproval, decide, listAll } = approvalHelpers(server);

describe('GET /approvals (listApprovals)', () => {
  it('filters by status and agent and pages with a cursor, newest first, without repeats', async () => {
    const { key } = await freshWorkspace();
    await createAgent(key, { name: 'Ann', slug: 'ann' });
    await createAgent(key, { name: 'Bob', slug: 'bob' });
    const made: Approval[] = [];
    for (let i = 0; i < 5; i++) made.push(await createApproval(key, { title: `A${i}`, agent: i % 2 === 0 ? 'ann' : 'bob' }));
    expect((await decide(key, made[0]!.id, { status: 'approved' })).status).toBe(200);
    expect((await decide(key, made[1]!.id, { status: 'rejected', decision_note: 'no' })).status).toBe(200);

    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const res = await server.api('GET', `/approvals?limit=2${cursor ? `&cursor=${cursor}` : ''}`, { key });
      expect(res.status).toBe(200);
      expect(res.body.data.length).toBeLessThanOrEqual(2);
      seen.push(...res.body.data.map((a: { title: string }) => a.title));
      cursor = res.body.next_cursor as string | null;
      expect(res.body.has_more).toBe(cursor !== null);
      pages++;
    } while (cursor && pages < 10);
    expect(seen).toEqual(['A4', 'A3', 'A2', 'A1', 'A0']);
    expect(pages).toBe(3);

    const titles = async (query: string) => (await listAll(key, `/approvals?${query}`)).map((a) => a.title);
    expect(await titles('status=pending')).toEqual(['A4', 'A3', 'A2']);
    expect(await titles('status=approved')).toEqual(['A0']);
    expect(await titles('status=rejected')).toEqual(['A1']);
    expect(await titles('status=expired')).toEqual([]);
    expect(await titles('agent=ann')).toEqual(['A4', 'A2', 'A0']);
    expect(await titles('agent=bob&status=pending')).toEqual(['A3']);

    const page = await server.api('GET', '/approvals?agent=ann&limit=1', { key });
    expect(page.body.data.map((a: { title: string }) => a.title)).toEqual(['A4']);
    const next = await server.api('GET', `/approvals?agent=ann&limit=1&cursor=${page.body.next_cursor}`, { key });
    expect(next.body.data.map((a: { title: string }) => a.title)).toEqual(['A2']);
  });

  it('pages without skipping or repeating approvals created at the same moment', async () => {
    const { key } = await freshWorkspace();
    const created = await Promise.all(Array.from({ length: 50 }, (_, i) => createApproval(key, { title: `Burst ${i}` })));
    const seen: string[] = [];
    let cursor: string | null = null;
    for (let page = 0; page < 60; page++) {
      const res = await server.api('GET', `/approvals?limit=1${cursor ? `&cursor=${cursor}` : ''}`, { key });
      seen.push(...res.body.data.map((a: { id: string }) => a.id));
      cursor = res.body.next_cursor as string | null;
      if (!cursor) break;
    }
    expect(new Set(seen).size).toBe(seen.length);
    expect([...seen].sort()).toEqual(created.map((a) => a.id).sort());
  });

  it.each([
    ['unknown status', 'status=maybe'],
    ['limit over 100', 'limit=101'],
    ['limit overflowing to infinity, with a filter', 'status=expired&limit=1e999'],
    ['forged cursor', 'cursor=bm90LWEtY3Vyc29y'],
    ['unknown parameter', 'colour=red'],
  ])('answers 400 invalid_request for %s', async (_label, query) => {
    const res = await server.api('GET', `/approvals?${query}`);
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('invalid_request');
  });

  it('answers 403 insufficient_permission for a key without approvals:read', async () => {
    const key = await keyFor(server, PERMISSIONS.filter((p) => p !== 'approvals:read').join(','));
    const res = await server.api('GET', '/approvals', { key });
    expect(res.status).toBe(403);
    expect(res.body.error.code).toBe('insufficient_permission');
  });
});

describe('GET /approval/request (listApprovalRequests)', () => {
  it('lists and filters exactly like GET /approvals', async () => {
    const { key } = await freshWorkspace();
    await createAgent(key, { name: 'Cat', slug: 'cat' });
    const a = await createApproval(key, { title: 'One', agent: 'cat' });
    await createApproval(key, { title: 'Two' });
    expect((await decide(key, a.id, { status: 'approved' })).status).toBe(200);
    for (const query of ['', '?status=approved', '?agent=cat', '?limit=1'] as const) {
      const alias = await server.api('GET', `/approval/request${query}`, { key });
      const main = await server.api('GET', `/approvals${query}`, { key });
      expect(alias.status).toBe(200);
      expect(alias.body).toEqual(main.body);
    }
    expect((await server.api('GET', '/approval/request?status=approved', { key })).body.data.map((x: { id: string }) => x.id)).toEqual([
      a.id,
    ]);
  });
});

describe('GET /approvals/{id} (getApproval)', () => {
  it('gets an approval by id', async () => {
    const { key } = await freshWorkspace();
    const created = await createApproval(key, { title: 'Getter' });
    const res = await server.api('GET', `/approvals/${created.id}`, { key });
    expect(res.status).toBe(200);
    expect(res.body.data).toEqual(created);
  });

  it('answers 404 not_found for an unknown id and 400 invalid_request for a non-UUID', async () => {
    const missing = await server.api('GET', '/approvals/00000000-0000-4000-8000-000000000000');
    expect(missing.status).toBe(404);
    expect(missing.body.error.code).toBe('not_found');
    const bad = await server.api('GET', '/approvals/not-a-uuid');
    expect(bad.status).toBe(400);
    expect(bad.body.error.code).toBe('invalid_request');
  });
});
