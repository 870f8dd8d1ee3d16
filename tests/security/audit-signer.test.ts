/**
 * Issue 36: the signer must not sign a history that was rewritten under it. A database superuser
 * (triggers off) rewrites a workspace's log and lets Warden's own sealer rebuild the tree: the
 * head set to 0, every seal and node deleted, every event queued again. Before the signer
 * checked, Warden's checkpointer signed the forged tree (a second root for a size it had signed
 * when the checkpoints were deleted too), and GET /audit/verify answered valid: true.
 *
 * Now the signer proves every new head consistent with the last checkpoint it signed, which it
 * keeps outside the database (the checkpoint file and memory), and refuses otherwise: the
 * refusal is in GET /audit/verify, the compliance control, the metric and an
 * `audit.integrity_failed` webhook, and no further checkpoint is signed for that log. Consistency
 * is re-checked here with the test's own RFC 9162 verifier (the SDK's), not the server's.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sql } from 'kysely';
import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { exportSigningKey, generateSigningKey } from '../../apps/server/src/features/audit/checkpoint.ts';
import { Checkpointer, loadAuditSigner } from '../../apps/server/src/features/audit/checkpointer.ts';
import { createLogger } from '../../apps/server/src/logger.ts';
import { verifyCheckpoint, verifyConsistency } from '../../packages/sdk/src/index.ts';
import { asAttacker, resealEverything, rewriteAsAllowed } from '../support/audit-forgery.ts';
import { keyFor, startTestServer, type TestServer } from '../support/server.ts';
import { sleep, until } from '../support/until.ts';

const N = 6;
const SLUGS = ['control', 'rewritten', 'covered', 'shortened'] as const;

interface Workspace {
  slug: string;
  key: string;
  id: string;
  vkey: string;
  /** Its tree's size and root once the test's events were signed. */
  size: number;
  root: string;
}

let server: TestServer;
let dir: string;
let checkpointFile: string;
const signingKey = exportSigningKey(generateSigningKey());
const workspaces: Record<string, Workspace> = {};

interface Received {
  headers: IncomingHttpHeaders;
  body: string;
}
const received: Received[] = [];
const receiver = createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (chunk: Buffer) => chunks.push(chunk));
  req.on('end', () => {
    received.push({ headers: req.headers, body: Buffer.concat(chunks).toString('utf8') });
    res.writeHead(200).end('ok');
  });
});
let webhookSecret: string;

const verify = async (ws: Workspace, full = false) =>
  (await server.api('GET', '/audit/verify', { key: ws.key, query: full ? { full: true } : {} })).body.data;

/** The checkpoint file's entries for one workspace, each checked with the SDK against the public key. */
async function fileCheckpoints(ws: Workspace): Promise<{ size: number; root: string }[]> {
  const out: { size: number; root: string }[] = [];
  for (const line of readFileSync(checkpointFile, 'utf8').split('\n')) {
    if (line === '' || JSON.parse(line).workspace_id !== ws.id) continue;
    const opened = await verifyCheckpoint(JSON.parse(line).note, ws.vkey);
    out.push({ size: opened.size, root: Buffer.from(opened.rootHash).toString('hex') });
  }
  return out;
}

const blockedEvent = (ws: Workspace, action: string) =>
  server.api('POST', '/audit', { key: ws.key, body: { action, result: 'blocked', agent: 'signer-test' } });

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'warden-audit-signer-'));
  checkpointFile = join(dir, 'checkpoints.ndjson');
  await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
  server = await startTestServer({
    auditSigningKey: signingKey,
    auditCheckpointFile: checkpointFile,
    auditCheckpointIntervalMs: 50,
    auditSealIntervalMs: 50,
    metricsPort: 0,
    egressAllowlist: ['127.0.0.1/32'],
  });
  for (const slug of SLUGS) {
    const key = await keyFor(server, '*', slug);
    const signing = (await server.api('GET', '/audit/signing-key', { key })).body.data;
    workspaces[slug] = {
      slug,
      key,
      id: (signing.key_name as string).split('/audit/')[1] as string,
      vkey: signing.verifier_key,
      size: 0,
      root: '',
    };
  }
  const url = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
  webhookSecret = (await server.admin('webhooks.create', { workspace: 'rewritten', url, events: 'audit.integrity_failed' })).secret;
  for (const ws of Object.values(workspaces)) {
    for (let i = 0; i < N; i++) expect((await blockedEvent(ws, `op.${i}`)).status).toBe(201);
  }
  for (const ws of Object.values(workspaces)) {
    const head = await until(`${ws.slug} sealed and checkpointed`, async () => {
      const data = await verify(ws);
      return data.unsealed === 0 && data.checkpoint?.tree_size === data.tree_size && data.valid && data;
    });
    ws.size = head.tree_size;
    ws.root = head.root_hash;
  }
}, 60_000);

afterAll(async () => {
  await server?.close();
  await new Promise<void>((resolve) => receiver.close(() => resolve()));
  rmSync(dir, { recursive: true, force: true });
});

describe('the signer refuses a history rewritten under its last checkpoint', () => {
  it('a blocked decision rewritten as allowed and the tree rebuilt by the sealer: the next head is refused, loudly', async () => {
    const ws = workspaces.rewritten!;
    await rewriteAsAllowed(server.database.db, ws.id, 'op.2');
    const refused = await until('the refusal', async () => (await verify(ws)).signing_refused ?? undefined);
    expect(refused).toMatchObject({ signed_size: ws.size, signed_root: ws.root, head_size: ws.size + 1 });
    expect(refused.reason).toContain('does not extend');
    // the forged head really is inconsistent with what was signed (the SDK's verifier, not the server's)
    const forged = (
      await server.api('GET', '/audit/proofs/consistency', { key: ws.key, query: { from_size: ws.size, to_size: ws.size + 1 } })
    ).body.data;
    await expect(
      verifyConsistency({ oldSize: ws.size, newSize: ws.size + 1, oldRoot: ws.root, newRoot: forged.to_root, proof: forged.proof }),
    ).rejects.toMatchObject({ code: 'root_mismatch' });

    for (const full of [false, true]) expect(await verify(ws, full)).toMatchObject({ valid: false, signing_refused: refused });
    // nothing signed beyond the last honest checkpoint, in the database or the file
    await sleep(300);
    expect((await server.api('GET', '/audit/checkpoint', { key: ws.key })).body.data).toMatchObject({
      tree_size: ws.size,
      root_hash: ws.root,
    });
    expect(await fileCheckpoints(ws)).not.toContainEqual(expect.objectContaining({ size: ws.size + 1 }));

    const compliance = (await server.api('GET', '/compliance/status', { key: ws.key })).body.data;
    expect(compliance.controls.find((c: { id: string }) => c.id === 'audit-chain')).toMatchObject({ score: 0 });

    const hook = await until('the audit.integrity_failed webhook', async () =>
      received.find((r) => JSON.parse(r.body).type === 'audit.integrity_failed'),
    );
    const event = new Webhook(webhookSecret).verify(hook.body, hook.headers as Record<string, string>) as Record<string, any>;
    expect(event).toMatchObject({
      type: 'audit.integrity_failed',
      workspace_id: ws.id,
      data: { refusal: { signed_size: ws.size, head_size: ws.size + 1 } },
    });

    const metrics = await (await fetch(server.metricsUrl as string)).text();
    expect(metrics).toMatch(/^warden_audit_signing_refused_logs [1-9]/m);
  });

  it('the cover-up (checkpoints and verifications deleted too): no second root is signed for a signed size', async () => {
    const ws = workspaces.covered!;
    await asAttacker(server.database.db, async (trx) => {
      await sql`UPDATE audit_events SET result = 'allowed' WHERE workspace_id = ${ws.id} AND action = 'op.1'`.execute(trx);
      await sql`DELETE FROM audit_checkpoints WHERE workspace_id = ${ws.id}`.execute(trx);
      await sql`DELETE FROM audit_verifications WHERE workspace_id = ${ws.id}`.execute(trx);
      await resealEverything(trx, ws.id);
    });
    const refused = await until('the refusal', async () => (await verify(ws)).signing_refused ?? undefined);
    expect(refused).toMatchObject({ signed_size: ws.size, signed_root: ws.root, head_size: ws.size });
    expect(refused.head_root).not.toBe(ws.root);
    expect(refused.reason).toContain('second root');
    await sleep(300);
    expect((await server.api('GET', '/audit/checkpoint', { key: ws.key })).status).toBe(404);
    expect(await fileCheckpoints(ws)).toEqual(expect.not.arrayContaining([{ size: ws.size, root: refused.head_root }]));
    expect(await verify(ws, true)).toMatchObject({ valid: false });
  });

  it('the newest events deleted and the rest resealed: a tree smaller than a signed one is refused', async () => {
    const ws = workspaces.shortened!;
    await asAttacker(server.database.db, async (trx) => {
      await sql`DELETE FROM audit_events WHERE workspace_id = ${ws.id} AND action IN ('op.4', 'op.5')`.execute(trx);
      await sql`DELETE FROM audit_checkpoints WHERE workspace_id = ${ws.id}`.execute(trx);
      await resealEverything(trx, ws.id);
    });
    const refused = await until('the refusal', async () => (await verify(ws)).signing_refused ?? undefined);
    expect(refused).toMatchObject({ signed_size: ws.size, head_size: ws.size - 2 });
    expect(refused.reason).toContain('fewer than');
  });

  it('a signer started afresh reads its checkpoint file and keeps refusing; an untouched log is signed as before', async () => {
    const ws = workspaces.covered!;
    const restarted = new Checkpointer(
      server.database.db,
      loadAuditSigner({ auditSigningKey: signingKey, dataDir: 'memory://', auditLogName: ws.vkey.split('/audit/')[0] as string }),
      createLogger(true),
      0,
      checkpointFile,
    );
    const before = readFileSync(checkpointFile, 'utf8');
    await restarted.run();
    expect(readFileSync(checkpointFile, 'utf8').slice(before.length)).not.toContain(ws.id);
    expect((await verify(ws)).signing_refused).toMatchObject({ signed_size: ws.size });

    const control = workspaces.control!;
    expect((await blockedEvent(control, 'later')).status).toBe(201);
    await until('the control log signed at its new size', async () => (await verify(control)).checkpoint?.tree_size === control.size + 1);
    expect(await verify(control)).toMatchObject({ valid: true, signing_refused: null });
  });

  it('a signer started without its own record signs nothing the database alone vouches for, and says how to fix it (issue 46, row 9)', async () => {
    const key = await keyFor(server, '*', 'lost-record');
    const signing = (await server.api('GET', '/audit/signing-key', { key })).body.data;
    const ws: Workspace = {
      slug: 'lost-record',
      key,
      id: (signing.key_name as string).split('/audit/')[1] as string,
      vkey: signing.verifier_key,
      size: 0,
      root: '',
    };
    const signedAt = async (size: number) =>
      until(`signed at ${size}`, async () => {
        const data = await verify(ws);
        return data.unsealed === 0 && data.tree_size >= size && data.checkpoint?.tree_size === data.tree_size && data;
      });
    for (let i = 0; i < 3; i++) expect((await blockedEvent(ws, `early.${i}`)).status).toBe(201);
    const older = await signedAt(3);
    for (let i = 0; i < 3; i++) expect((await blockedEvent(ws, `late.${i}`)).status).toBe(201);
    const newest = await signedAt(older.tree_size + 3);
    // a database writer deletes the newest checkpoints and rewrites history after the older one
    await asAttacker(server.database.db, async (trx) => {
      await sql`DELETE FROM audit_checkpoints WHERE workspace_id = ${ws.id} AND tree_size > ${older.tree_size}`.execute(trx);
      await sql`UPDATE audit_events SET result = 'allowed' WHERE workspace_id = ${ws.id} AND action = 'late.1'`.execute(trx);
      await resealEverything(trx, ws.id);
    });
    await until('resealed', async () => (await verify(ws)).unsealed === 0 && (await verify(ws)).tree_size === newest.tree_size);

    // a signer whose checkpoint file is lost (here: a new path) anchored on the older checkpoint before, and signed the forgery
    const errors: { message: string; fields?: Record<string, unknown> }[] = [];
    const lostFile = join(dir, 'lost-checkpoints.ndjson');
    const withoutRecord = new Checkpointer(
      server.database.db,
      loadAuditSigner({ auditSigningKey: signingKey, dataDir: 'memory://', auditLogName: ws.vkey.split('/audit/')[0] as string }),
      { info: () => undefined, error: (message, fields) => errors.push({ message, ...(fields ? { fields } : {}) }) },
      0,
      lostFile,
    );
    await withoutRecord.run();
    expect(withoutRecord.lastSigned(ws.id)).toBeUndefined();
    expect(existsSync(lostFile)).toBe(false);
    expect(errors.map((e) => e.message).join('\n')).toMatch(/checkpoint file holds no checkpoint of any log, but the database does/);
    expect(errors[0]?.message).toMatch(/Restore the checkpoint file/);
    // nor does a record that lacks only this log (its newest checkpoints deleted) anchor on the database's older one
    const partial = join(dir, 'partial-checkpoints.ndjson');
    writeFileSync(
      partial,
      readFileSync(checkpointFile, 'utf8')
        .split('\n')
        .filter((line) => line && !line.includes(ws.id))
        .join('\n'),
    );
    const withoutThisLog = new Checkpointer(
      server.database.db,
      loadAuditSigner({ auditSigningKey: signingKey, dataDir: 'memory://', auditLogName: ws.vkey.split('/audit/')[0] as string }),
      { info: () => undefined, error: (message, fields) => errors.push({ message, ...(fields ? { fields } : {}) }) },
      0,
      partial,
    );
    await withoutThisLog.run();
    expect(withoutThisLog.lastSigned(ws.id)).toBeUndefined();
    expect(errors.find((e) => e.fields?.workspaceId === ws.id)?.message).toMatch(/holds no checkpoint of this log, but the database does/);
    const stored = await sql<{ tree_size: string }>`SELECT tree_size FROM audit_checkpoints WHERE workspace_id = ${ws.id}`.execute(
      server.database.db,
    );
    expect(stored.rows.map((row) => Number(row.tree_size))).not.toContain(newest.tree_size);
  });
});
