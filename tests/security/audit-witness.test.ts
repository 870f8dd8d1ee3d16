/**
 * Issue 36, witnesses: a witness (`warden witness`, a process of its own with its own key and
 * state) cosigns each checkpoint Warden signs, after checking a consistency proof from the last
 * one it cosigned. A signer that lost its own record (its checkpoint file gone, or a second
 * process holding the key) signs a history rewritten in the database; the witness refuses it,
 * so the forged checkpoint carries no cosignature and every verifier with a witness policy (the
 * SDK's verifyCheckpoint, `warden audit verify --witness`) refuses it: a split view now needs the
 * witness's key too. Cosignatures are checked here with the test's own C2SP tlog-cosignature
 * verifier, not the server's.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { sql } from 'kysely';
import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ExportPage } from '../../apps/server/src/features/audit/audit-export.ts';
import { exportSigningKey, generateSigningKey, loadSigningKey } from '../../apps/server/src/features/audit/checkpoint.ts';
import { Checkpointer, loadAuditSigner } from '../../apps/server/src/features/audit/checkpointer.ts';
import { formatCosignerKey } from '../../apps/server/src/features/audit/cosignature.ts';
import { createLogger } from '../../apps/server/src/logger.ts';
import { isAuditProofError, verifyCheckpoint } from '../../packages/sdk/src/index.ts';
import { asAttacker, resealEverything, rewriteAsAllowed } from '../support/audit-forgery.ts';
import { keyFor, startTestServer, type TestServer } from '../support/server.ts';
import { cosignatureTime, parseCosignerVkey } from '../support/tlog-cosignature.ts';
import { until as untilWithin } from '../support/until.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const TSX = join(ROOT, 'node_modules/tsx/dist/cli.mjs');
/** What `npm run warden` runs: the CLI, built (tools/warden.mjs). */
const CLI = join(ROOT, 'tools/warden.mjs');
const N = 6;
const WITNESS_NAME = 'witness.test/w1';

const signingKey = exportSigningKey(generateSigningKey());
const logPublicKey = loadSigningKey(signingKey).publicKey.toString('base64');
let dir: string;
let witness: ChildProcess;
let witnessUrl: string;
let witnessVkey: string;
let server: TestServer;
interface Log {
  key: string;
  id: string;
  vkey: string;
  /** Its tree's size once the test's events were signed and cosigned. */
  size: number;
}
const logs: Record<string, Log> = {};
/** The honest log the first tests read. */
let wsKey: string;
let logVkey: string;
let signedSize: number;

/** Runs the CLI to its end. */
function warden(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, ...args], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk) => (stdout += chunk));
    child.stderr.on('data', (chunk) => (stderr += chunk));
    const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/** The witness's cosignature on a note, checked from the C2SP specs alone (either type); its time when it verifies. */
function testCosignature(note: string, name: string, vkey: string): Date | undefined {
  const cosigner = parseCosignerVkey(vkey);
  expect(cosigner.name).toBe(name);
  const seconds = cosignatureTime(note, cosigner);
  return seconds === undefined ? undefined : new Date(Number(seconds) * 1000);
}

/** Polls for what the sealer, the checkpointer and the witness do, up to 20 s on a busy machine. */
const until = <T>(what: string, probe: () => T | Promise<T>) => untilWithin(what, probe, 20_000);

const policy = () => ({ witnesses: [witnessVkey], quorum: 1 });

/** Webhook deliveries to the receiver (audit.checkpoint of the honest log). */
const received: { headers: IncomingHttpHeaders; body: string }[] = [];
const receiver = createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (chunk: Buffer) => chunks.push(chunk));
  req.on('end', () => {
    received.push({ headers: req.headers, body: Buffer.concat(chunks).toString('utf8') });
    res.writeHead(200).end('ok');
  });
});
let webhookSecret: string;

async function checkpointRows(workspaceId: string) {
  return server.database.db
    .selectFrom('audit_checkpoints')
    .select(['tree_size', 'note'])
    .where('workspace_id', '=', workspaceId)
    .orderBy('tree_size')
    .execute();
}

/** What a database writer does to a log (triggers off), each variant of issue 36; answers the forged tree's size. */
const FORGERIES: Record<string, (log: Log) => Promise<number>> = {
  'a decision rewritten as allowed, one event forged, the checkpoint rows deleted': async (log) => {
    await rewriteAsAllowed(server.database.db, log.id, 'op.2');
    await deleteCheckpoints(log);
    return log.size + 1;
  },
  'a decision rewritten in place, resealed to the same size, the checkpoint rows deleted': async (log) => {
    await asAttacker(server.database.db, async (trx) => {
      await sql`UPDATE audit_events SET result = 'allowed' WHERE workspace_id = ${log.id} AND action = 'op.2'`.execute(trx);
      await sql`DELETE FROM audit_checkpoints WHERE workspace_id = ${log.id}`.execute(trx);
      await resealEverything(trx, log.id);
    });
    return log.size;
  },
  'the newest events deleted, the rest resealed, the checkpoint rows deleted': async (log) => {
    await asAttacker(server.database.db, async (trx) => {
      await sql`DELETE FROM audit_events WHERE workspace_id = ${log.id} AND action IN ('op.4', 'op.5')`.execute(trx);
      await sql`DELETE FROM audit_checkpoints WHERE workspace_id = ${log.id}`.execute(trx);
      await resealEverything(trx, log.id);
    });
    return log.size - 2;
  },
  'an event in the middle dropped, the rest resealed, the checkpoint rows deleted': async (log) => {
    await asAttacker(server.database.db, async (trx) => {
      await sql`DELETE FROM audit_events WHERE workspace_id = ${log.id} AND action = 'op.1'`.execute(trx);
      await sql`DELETE FROM audit_checkpoints WHERE workspace_id = ${log.id}`.execute(trx);
      await resealEverything(trx, log.id);
    });
    return log.size - 1;
  },
};
const FORGED_SLUGS = Object.keys(FORGERIES).map((_, i) => `forged-${i}`);

const deleteCheckpoints = (log: Log) =>
  asAttacker(server.database.db, async (trx) => {
    await sql`DELETE FROM audit_checkpoints WHERE workspace_id = ${log.id}`.execute(trx);
  });

/** A workspace with N events, signed and cosigned. */
async function witnessedLog(slug: string): Promise<Log> {
  const key = await keyFor(server, '*', slug);
  const signing = (await server.api('GET', '/audit/signing-key', { key })).body.data;
  for (let i = 0; i < N; i++) {
    const written = await server.api('POST', '/audit', { key, body: { action: `op.${i}`, result: 'blocked', agent: 'witness-test' } });
    expect(written.status).toBe(201);
  }
  // the workspace's own events (its key's creation) come first: the head is what verify reports
  const size = await until(`${slug} checkpointed and cosigned`, async () => {
    const head = (await server.api('GET', '/audit/verify', { key })).body.data;
    const served = (await server.api('GET', '/audit/checkpoint', { key })).body.data;
    const done = head.unsealed === 0 && served?.tree_size === head.tree_size && testCosignature(served.note, WITNESS_NAME, witnessVkey);
    return done && head.tree_size;
  });
  return { key, id: (signing.key_name as string).split('/audit/')[1] as string, vkey: signing.verifier_key, size };
}

/** A second signer with the same key and witnesses, but no record of what it signed (its file gone, another machine). */
const rogueSigner = () =>
  new Checkpointer(
    server.database.db,
    loadAuditSigner({
      auditSigningKey: signingKey,
      dataDir: 'memory://',
      auditLogName: 'warden',
      auditWitnesses: `${witnessUrl} ${witnessVkey}`,
      auditWitnessQuorum: 1,
    }),
    createLogger(true),
    0,
    undefined,
  );

async function resealed(log: Log, size: number) {
  await until('the forged tree rebuilt by the sealer', async () => {
    const head = await server.database.db
      .selectFrom('audit_tree_heads')
      .select('tree_size')
      .where('workspace_id', '=', log.id)
      .executeTakeFirst();
    const queued = await server.database.db.selectFrom('audit_unsealed').select('event_id').where('workspace_id', '=', log.id).execute();
    return Number(head?.tree_size) === size && queued.length === 0;
  });
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'warden-witness-'));
  witness = spawn(
    process.execPath,
    [
      TSX,
      CLI,
      'witness',
      '--name',
      WITNESS_NAME,
      '--data-dir',
      join(dir, 'witness'),
      '--listen',
      '127.0.0.1:0',
      '--log-key',
      logPublicKey,
      '--json',
    ],
    { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] },
  );
  const started = await new Promise<{ url: string; vkey: string }>((resolve, reject) => {
    let out = '';
    witness.stdout!.on('data', (chunk) => {
      out += chunk;
      if (out.includes('\n')) resolve(JSON.parse(out.slice(0, out.indexOf('\n'))));
    });
    witness.on('exit', (code) => reject(new Error(`the witness exited (${code})`)));
  });
  witnessUrl = started.url;
  witnessVkey = started.vkey;
  server = await startTestServer({
    auditSigningKey: signingKey,
    auditCheckpointFile: join(dir, 'checkpoints.ndjson'),
    auditCheckpointIntervalMs: 50,
    auditSealIntervalMs: 50,
    auditWitnesses: `${witnessUrl} ${witnessVkey}`,
    auditWitnessQuorum: 1,
    egressAllowlist: ['127.0.0.1/32'],
  });
  await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
  await server.admin('workspaces.create', { slug: 'witnessed' });
  webhookSecret = (await server.admin('webhooks.create', { workspace: 'witnessed', url, events: 'audit.checkpoint' })).secret;
  for (const slug of ['witnessed', 'covered', ...FORGED_SLUGS]) logs[slug] = await witnessedLog(slug);
  ({ key: wsKey, vkey: logVkey, size: signedSize } = logs.witnessed!);
}, 240_000);

afterAll(async () => {
  witness?.kill('SIGTERM');
  await server?.close();
  await new Promise<void>((resolve) => receiver.close(() => resolve()));
  rmSync(dir, { recursive: true, force: true });
});

describe('witnessed checkpoints', () => {
  it('publishes the witnesses with the signing key, and every checkpoint carries a cosignature that verifies', async () => {
    const signing = (await server.api('GET', '/audit/signing-key', { key: wsKey })).body.data;
    expect(signing.witnesses).toEqual([{ name: WITNESS_NAME, key_id: witnessVkey.split('+')[1], verifier_key: witnessVkey }]);
    expect(signing.witness_quorum).toBe(1);
    const served = (await server.api('GET', '/audit/checkpoint', { key: wsKey })).body.data;
    const seen = testCosignature(served.note, WITNESS_NAME, witnessVkey);
    expect(Math.abs(seen!.getTime() - Date.now())).toBeLessThan(120_000);
    // the same cosigned note in the checkpoint file, outside the database
    const filed = readFileSync(join(dir, 'checkpoints.ndjson'), 'utf8')
      .split('\n')
      .filter((line) => line !== '')
      .map((line) => JSON.parse(line))
      .filter((entry) => entry.workspace_id === logs.witnessed!.id);
    expect(filed.at(-1)?.note).toBe(served.note);
    // and in the audit.checkpoint webhook, signed by Warden
    const hook = await until('the audit.checkpoint webhook of that size', async () =>
      received
        .map((r) => new Webhook(webhookSecret).verify(r.body, r.headers as Record<string, string>) as Record<string, any>)
        .find((event) => event.data.checkpoint.tree_size === signedSize),
    );
    expect(hook.data.checkpoint.note).toBe(served.note);
    const sdk = await verifyCheckpoint(served.note, logVkey, policy());
    expect(sdk.size).toBe(signedSize);
    expect(sdk.cosignatures.map((c) => c.name)).toEqual([WITNESS_NAME]);
  });

  it('a policy naming a witness that did not cosign refuses the checkpoint (unwitnessed)', async () => {
    const other = `witness.test/other+${'0'.repeat(8)}+${Buffer.concat([Buffer.from([4]), Buffer.alloc(32, 7)]).toString('base64')}`;
    const served = (await server.api('GET', '/audit/checkpoint', { key: wsKey })).body.data;
    // a made-up key id is rejected as a key before anything else
    await expect(verifyCheckpoint(served.note, logVkey, { witnesses: [other] })).rejects.toMatchObject({ code: 'invalid_argument' });
    const unrelated = formatCosignerKey('witness.test/other', generateSigningKey().publicKey);
    const refused = await verifyCheckpoint(served.note, logVkey, { witnesses: [witnessVkey, unrelated], quorum: 2 }).catch((e) => e);
    expect(isAuditProofError(refused) && refused.code).toBe('unwitnessed');
    expect((await verifyCheckpoint(served.note, logVkey, { witnesses: [witnessVkey, unrelated], quorum: 1 })).size).toBe(signedSize);
  });
});

describe('a forged history signed by a signer that lost its record', () => {
  for (const [i, [what, forge]] of Object.entries(FORGERIES).entries()) {
    it(`${what}: the witness refuses it, and the policy refuses the forged checkpoint`, async () => {
      const log = logs[`forged-${i}`]!;
      const size = await forge(log);
      await resealed(log, size);
      await rogueSigner().run();
      const forged = (await checkpointRows(log.id)).find((row) => Number(row.tree_size) === size);
      expect(forged, 'the rogue signer signed the forged tree').toBeDefined();
      expect((await verifyCheckpoint(forged!.note, log.vkey)).size).toBe(size);
      expect(testCosignature(forged!.note, WITNESS_NAME, witnessVkey)).toBeUndefined();
      const refused = await verifyCheckpoint(forged!.note, log.vkey, policy()).catch((e) => e);
      expect(isAuditProofError(refused) && refused.code).toBe('unwitnessed');
    }, 60_000);
  }

  it('the cover-up, checked offline: an export the forged checkpoint alone binds is rejected with the policy', async () => {
    const log = logs.covered!;
    const honest = await checkpointRows(log.id);
    // the cover-up: a blocked decision rewritten as allowed, the tree rebuilt, every checkpoint row deleted
    await rewriteAsAllowed(server.database.db, log.id, 'op.2');
    await deleteCheckpoints(log);
    await resealed(log, log.size + 1);
    const rogue = rogueSigner();
    await rogue.run();
    const forged = (await checkpointRows(log.id)).find((row) => Number(row.tree_size) === log.size + 1);
    expect(forged, 'the rogue signer signed the forged tree').toBeDefined();
    // the log's own signature verifies: without witnesses, nothing tells the forgery apart
    expect((await verifyCheckpoint(forged!.note, log.vkey)).size).toBe(log.size + 1);
    // but the witness refused it: no cosignature, and the policy refuses it
    expect(testCosignature(forged!.note, WITNESS_NAME, witnessVkey)).toBeUndefined();
    const refused = await verifyCheckpoint(forged!.note, log.vkey, policy()).catch((e) => e);
    expect(isAuditProofError(refused) && refused.code).toBe('unwitnessed');

    // the offline verifier: the export as the database now holds it (forged events, only the forged checkpoint)
    const lines: ExportPage['lines'] = [];
    let cursor: string | undefined;
    do {
      const page = (await server.admin('audit.export', { workspace: 'covered', cursor })) as ExportPage;
      lines.push(...page.lines);
      cursor = page.cursor ?? undefined;
    } while (cursor !== undefined);
    const exportFile = join(dir, 'export.ndjson');
    writeFileSync(exportFile, lines.map((line) => JSON.stringify(line)).join('\n'));
    const trusting = await warden(['audit', 'verify', '--export', exportFile, '--public-key', log.vkey, '--json']);
    expect(JSON.parse(trusting.stdout).valid, `without a witness policy the forgery verifies: ${trusting.stdout}`).toBe(true);
    const witnessed = await warden([
      'audit',
      'verify',
      '--export',
      exportFile,
      '--public-key',
      log.vkey,
      '--witness',
      witnessVkey,
      '--json',
    ]);
    const report = JSON.parse(witnessed.stdout);
    expect(witnessed.code).toBe(1);
    expect(report.valid).toBe(false);
    expect(report.checkpoints_unwitnessed).toBe(1);
    expect(report.problems.map((p: { kind: string }) => p.kind)).toContain('no_checkpoint');

    // the honest checkpoints kept outside (cosigned) contradict the forged export
    const outside = join(dir, 'honest.ndjson');
    writeFileSync(outside, honest.map((row) => JSON.stringify({ note: row.note })).join('\n'));
    const contradicted = await warden([
      'audit',
      'verify',
      '--export',
      exportFile,
      '--checkpoint',
      outside,
      '--public-key',
      log.vkey,
      '--witness',
      witnessVkey,
      '--json',
    ]);
    expect(JSON.parse(contradicted.stdout).problems.map((p: { kind: string }) => p.kind)).toContain('root_mismatch');
  }, 120_000);
});
