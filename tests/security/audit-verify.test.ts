/**
 * Issue 36, "verification that cannot be talked round": GET /audit/verify checks the tree
 * against every signed checkpoint since the last verified size — each stored note verified
 * with the log's key, and the last checkpoint the signer keeps outside the database — and
 * never adopts a tree that one contradicts as its next starting point. Before, it compared the
 * tree with the newest stored checkpoint only, so a tree rebuilt from rewritten events passed
 * once the newest checkpoints were deleted (and `full=true` adopted it).
 *
 * Full verification runs off the request thread, one at a time, a second request for the same
 * workspace joining the first; GET /audit/verify/status reports how far it has come.
 *
 * The roots are recomputed here from the events' leaves with the test's own RFC 9162 hashing
 * (the SDK's verifier), not the server's.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { insertAuditRows } from '../../apps/server/src/features/audit/audit.repository.ts';
import { auditRows } from '../../apps/server/src/features/audit/audit-event.ts';
import { exportSigningKey, generateSigningKey } from '../../apps/server/src/features/audit/checkpoint.ts';
import { verifyCheckpoint } from '../../packages/sdk/src/index.ts';
import { asAttacker, resealEverything } from '../support/audit-forgery.ts';
import { keyFor, startTestServer, type TestServer } from '../support/server.ts';

let server: TestServer;
let dir: string;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
async function until<T>(what: string, probe: () => Promise<T | undefined | false>, timeoutMs = 20_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(25);
  }
}

interface Workspace {
  key: string;
  id: string;
  vkey: string;
}

async function workspace(slug: string): Promise<Workspace> {
  const key = await keyFor(server, '*', slug);
  const signing = (await server.api('GET', '/audit/signing-key', { key })).body.data;
  return { key, id: (signing.key_name as string).split('/audit/')[1] as string, vkey: signing.verifier_key };
}

const verify = async (ws: Workspace, full = false) =>
  (await server.api('GET', '/audit/verify', { key: ws.key, query: full ? { full: true } : {} })).body.data;

/** Records `count` blocked events and waits until they are sealed and a checkpoint covers them; returns that size. */
async function recordAndSign(ws: Workspace, count: number, prefix: string): Promise<number> {
  for (let i = 0; i < count; i++) {
    const res = await server.api('POST', '/audit', {
      key: ws.key,
      body: { action: `${prefix}.${i}`, result: 'blocked', agent: 'verify-test' },
    });
    expect(res.status).toBe(201);
  }
  const head = await until('sealed and checkpointed', async () => {
    const data = await verify(ws);
    return data.unsealed === 0 && data.checkpoint?.tree_size === data.tree_size && data.valid && data;
  });
  // the checkpoint really is signed by the published key (the SDK's verifier)
  const checkpoint = (await server.api('GET', '/audit/checkpoint', { key: ws.key })).body.data;
  expect((await verifyCheckpoint(checkpoint.note, ws.vkey)).size).toBe(head.tree_size);
  return head.tree_size;
}

/** The attacker also removes the signer's refusal, so that only the verification itself can tell. */
const hideRefusal = (ws: Workspace) =>
  asAttacker(server.database.db, async (trx) => {
    await sql`DELETE FROM audit_signing_refusals WHERE workspace_id = ${ws.id}`.execute(trx);
  });

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'warden-audit-verify-'));
  server = await startTestServer({
    auditSigningKey: exportSigningKey(generateSigningKey()),
    auditCheckpointFile: join(dir, 'checkpoints.ndjson'),
    auditCheckpointIntervalMs: 50,
    auditSealIntervalMs: 50,
  });
}, 60_000);

afterAll(async () => {
  await server?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('every signed checkpoint since the last verification is checked', () => {
  it('a rewritten middle, the newest checkpoints deleted: the first checkpoint it contradicts is named', async () => {
    const ws = await workspace('verify-middle');
    const first = await recordAndSign(ws, 4, 'a');
    const second = await recordAndSign(ws, 4, 'b');
    const third = await recordAndSign(ws, 4, 'c');
    expect(first).toBeGreaterThan(0);
    expect(first).toBeLessThan(second);
    expect(second).toBeLessThan(third);
    await asAttacker(server.database.db, async (trx) => {
      // an event after the first checkpoint rewritten; the newest checkpoints and every verification deleted
      await sql`UPDATE audit_events SET result = 'allowed' WHERE workspace_id = ${ws.id} AND action = 'b.1'`.execute(trx);
      await sql`DELETE FROM audit_checkpoints WHERE workspace_id = ${ws.id} AND tree_size > ${second}`.execute(trx);
      await sql`DELETE FROM audit_verifications WHERE workspace_id = ${ws.id}`.execute(trx);
      await resealEverything(trx, ws.id);
    });
    await until('resealed', async () => (await verify(ws)).unsealed === 0);
    await hideRefusal(ws);
    for (const full of [false, true]) {
      const data = await verify(ws, full);
      expect(data.valid).toBe(false);
      // a stored checkpoint no later than `second` is named: the smallest the rebuilt tree contradicts (a reseal may also reorder events)
      expect(data.contradicted_checkpoint).toMatchObject({ source: 'database' });
      expect(data.contradicted_checkpoint?.tree_size).toBeLessThanOrEqual(second);
      expect(data.contradicted_checkpoint?.tree_root_hash).toMatch(/^[0-9a-f]{64}$/);
      expect(data.contradicted_checkpoint?.tree_root_hash).not.toBe(data.contradicted_checkpoint?.root_hash);
      expect(data.checkpoints_checked).toBeGreaterThanOrEqual(2);
    }
    // the forged tree was never adopted as a starting point
    const adopted = await server.database.db
      .selectFrom('audit_verifications')
      .select('tree_size')
      .where('workspace_id', '=', ws.id)
      .executeTakeFirst();
    expect(adopted).toBeUndefined();
  });

  it("the cover-up (every checkpoint, verification and refusal deleted): the signer's own record contradicts the tree", async () => {
    const ws = await workspace('verify-covered');
    const size = await recordAndSign(ws, 6, 'op');
    await asAttacker(server.database.db, async (trx) => {
      await sql`UPDATE audit_events SET result = 'allowed' WHERE workspace_id = ${ws.id} AND action = 'op.2'`.execute(trx);
      await sql`DELETE FROM audit_checkpoints WHERE workspace_id = ${ws.id}`.execute(trx);
      await sql`DELETE FROM audit_verifications WHERE workspace_id = ${ws.id}`.execute(trx);
      await resealEverything(trx, ws.id);
    });
    await until('resealed', async () => (await verify(ws)).unsealed === 0);
    await hideRefusal(ws);
    for (const full of [false, true]) {
      const data = await verify(ws, full);
      expect(data).toMatchObject({ valid: false, checkpoint: null, first_invalid_sequence: null });
      expect(data.contradicted_checkpoint).toMatchObject({ tree_size: size, source: 'signer' });
      expect(data.contradicted_checkpoint?.tree_root_hash).not.toBe(data.contradicted_checkpoint?.root_hash);
    }
  });

  it('the newest events cut and the tree resealed smaller: the tree is smaller than a signed checkpoint', async () => {
    const ws = await workspace('verify-cut');
    const size = await recordAndSign(ws, 5, 'op');
    await asAttacker(server.database.db, async (trx) => {
      await sql`DELETE FROM audit_events WHERE workspace_id = ${ws.id} AND action IN ('op.3', 'op.4')`.execute(trx);
      await sql`DELETE FROM audit_verifications WHERE workspace_id = ${ws.id}`.execute(trx);
      // only the newest checkpoint is left to contradict the shorter tree (a reseal may also reorder events)
      await sql`DELETE FROM audit_checkpoints WHERE workspace_id = ${ws.id} AND tree_size < ${size}`.execute(trx);
      await resealEverything(trx, ws.id);
    });
    await until('resealed', async () => (await verify(ws)).unsealed === 0);
    await hideRefusal(ws);
    const data = await verify(ws, true);
    expect(data.valid).toBe(false);
    expect(data.contradicted_checkpoint).toMatchObject({ tree_size: size, tree_root_hash: null });
    expect(data.contradicted_checkpoint?.reason).toContain('fewer than');
  });

  it('a checkpoint row edited to agree with a forged tree: its note no longer verifies, which is itself a contradiction', async () => {
    const ws = await workspace('verify-forged-row');
    const size = await recordAndSign(ws, 3, 'op');
    await asAttacker(server.database.db, async (trx) => {
      await sql`UPDATE audit_checkpoints SET root_hash = ${'ab'.repeat(32)} WHERE workspace_id = ${ws.id} AND tree_size = ${size}`.execute(
        trx,
      );
    });
    const data = await verify(ws, true);
    expect(data.valid).toBe(false);
    expect(data.contradicted_checkpoint).toMatchObject({ tree_size: size, root_hash: 'ab'.repeat(32), source: 'database' });
    expect(data.contradicted_checkpoint?.reason).toContain('not signed');
  });

  it('an untouched log verifies against all of its checkpoints', async () => {
    const ws = await workspace('verify-honest');
    await recordAndSign(ws, 3, 'a');
    await recordAndSign(ws, 3, 'b');
    const data = await verify(ws, true);
    expect(data).toMatchObject({ valid: true, contradicted_checkpoint: null });
    expect(data.checkpoints_checked).toBeGreaterThanOrEqual(2);
  });
});

describe('full verification runs off the request thread, one at a time, and reports its progress', () => {
  it('two requests for one workspace share one run; the status shows it queued or running, then idle', async () => {
    const ws = await workspace('verify-large');
    const records = Array.from({ length: 4000 }, (_, i) => ({
      source: 'manual' as const,
      agent: 'bulk',
      action: `bulk.${i}`,
      result: 'blocked' as const,
      severity: 'low' as const,
      requestId: `req_bulk_${i}`,
    }));
    for (let i = 0; i < records.length; i += 500) {
      await insertAuditRows(
        server.database.db,
        records.slice(i, i + 500).map((record) => auditRows(ws.id, record)),
      );
    }
    let last: unknown;
    const sealed = await until(
      '4,000 events sealed and checkpointed',
      async () => {
        await sleep(250);
        const data = await verify(ws);
        last = data;
        return data.unsealed === 0 && data.tree_size >= 4000 && data.checkpoint?.tree_size === data.tree_size && data;
      },
      90_000,
    ).catch((error) => {
      throw new Error(`${error.message}: ${JSON.stringify(last)}`);
    });
    expect(sealed.valid).toBe(true);

    const states = new Set<string>();
    let polling = true;
    const poll = (async () => {
      while (polling) {
        const status = (await server.api('GET', '/audit/verify/status', { key: ws.key })).body.data;
        states.add(status.state);
        if (status.state === 'running' && status.total !== null) expect(status.checked).toBeLessThanOrEqual(status.total);
        await sleep(5);
      }
    })();
    const [a, b] = await Promise.all([verify(ws, true), verify(ws, true)]);
    polling = false;
    await poll;
    expect(a).toMatchObject({ valid: true, verified_from: 0, tree_size: sealed.tree_size, checked: sealed.tree_size });
    // one run answered both
    expect(b.verified_at).toBe(a.verified_at);
    expect([...states].some((state) => state === 'queued' || state === 'running')).toBe(true);
    expect((await server.api('GET', '/audit/verify/status', { key: ws.key })).body.data).toEqual({
      state: 'idle',
      queued_at: null,
      started_at: null,
      checked: 0,
      total: null,
    });
  }, 120_000);
});
