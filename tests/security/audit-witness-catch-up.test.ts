/**
 * A witness that was down when a checkpoint was signed cosigns it once it is back, without the
 * log growing (issue 52, item 3). The witness (Warden's own, ML-DSA-44) sits behind a switch that
 * answers 503 while "down"; the checkpoint goes out without its cosignature, and within a few
 * catch-up rounds after the switch is back the note as served (GET /audit/checkpoint, the tiles'
 * checkpoint) carries a cosignature that the tests' own C2SP verifier accepts, for the same size
 * and root, the stored row untouched. A witness that refuses (a 4xx) is not asked again.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { exportSigningKey, generateSigningKey } from '../../apps/server/src/features/audit/checkpoint.ts';
import { Witness } from '../../apps/server/src/witness/witness.ts';
import { witnessServer } from '../../apps/server/src/witness/witness-http.ts';
import { verifyCheckpoint } from '../../packages/sdk/src/index.ts';
import { startTestServer, type TestServer } from '../support/server.ts';
import { cosignatureTime, parseCosignerVkey } from '../support/tlog-cosignature.ts';
import { until } from '../support/until.ts';

const NAME = 'witness.example/late';
const signingKey = generateSigningKey();
const dir = mkdtempSync(join(tmpdir(), 'warden-late-witness-'));
const witness = new Witness({
  name: NAME,
  key: generateSigningKey('ml-dsa-44'),
  dataDir: dir,
  logs: [{ originPrefix: 'warden/audit/', publicKey: signingKey.publicKey }],
});
const inner = witnessServer(witness, NAME);
/** What the switch answers instead of the witness: undefined when the witness is up. */
let outage: number | undefined = 503;
let asked = 0;
const front: Server = createServer((req, res) => {
  asked += 1;
  if (outage === undefined) inner.emit('request', req, res);
  else res.writeHead(outage, { 'content-type': 'text/plain' }).end('down\n');
});
let server: TestServer;

beforeAll(async () => {
  await new Promise<void>((resolve) => front.listen(0, '127.0.0.1', resolve));
  server = await startTestServer({
    auditSigningKey: exportSigningKey(signingKey),
    auditCheckpointIntervalMs: 50,
    auditSealIntervalMs: 50,
    auditWitnesses: `http://127.0.0.1:${(front.address() as AddressInfo).port} ${witness.vkey}`,
    auditWitnessQuorum: 1,
    egressAllowlist: ['127.0.0.1/32'],
  });
}, 120_000);

afterAll(async () => {
  await server?.close();
  await new Promise((resolve) => front.close(resolve));
  rmSync(dir, { recursive: true, force: true });
});

const checkpoint = async () => (await server.api('GET', '/audit/checkpoint')).body.data;
const cosigner = parseCosignerVkey(witness.vkey);

describe('a witness back from an outage', () => {
  it('cosigns the checkpoint it missed, and the note as served carries it, for the same size and root', { timeout: 90_000 }, async () => {
    const written = await server.api('POST', '/audit', { body: { action: 'late.1', result: 'blocked', agent: 'late-bot' } });
    expect(written.status).toBe(201);
    const missed = await until(
      'a checkpoint signed while the witness is down',
      async () => {
        const head = (await server.api('GET', '/audit/verify')).body.data;
        const served = await checkpoint();
        return head.unsealed === 0 && served?.tree_size === head.tree_size && served;
      },
      30_000,
    );
    expect(cosignatureTime(missed.note, cosigner)).toBeUndefined();
    const signing = (await server.api('GET', '/audit/signing-key')).body.data;
    await expect(verifyCheckpoint(missed.note, signing.verifier_key, { witnesses: [witness.vkey] })).rejects.toMatchObject({
      code: 'unwitnessed',
    });

    outage = undefined; // back
    const late = await until(
      'the missed checkpoint cosigned',
      async () => {
        const served = await checkpoint();
        return cosignatureTime(served.note, cosigner) !== undefined && served;
      },
      60_000,
    );
    // the same checkpoint: size, root and the log's signed text; only the witness's line was added
    expect(late).toMatchObject({ tree_size: missed.tree_size, root_hash: missed.root_hash, timestamp: missed.timestamp });
    expect(late.note.startsWith(missed.note)).toBe(true);
    const verified = await verifyCheckpoint(late.note, signing.verifier_key, { witnesses: [witness.vkey] });
    expect(verified.cosignatures.map((c) => c.name)).toEqual([NAME]);
    // the tiles' checkpoint is the same note
    const tiles = await fetch(`${server.url}/audit/log/checkpoint`, { headers: { authorization: `Bearer ${server.key}` } });
    expect(await tiles.text()).toBe(late.note);
    // and the stored row is as it was signed (append-only: the line lives beside it)
    const row = await server.database.db
      .selectFrom('audit_checkpoints')
      .select('note')
      .where('workspace_id', '=', missed.origin.split('/audit/')[1] as string)
      .where('tree_size', '=', missed.tree_size)
      .executeTakeFirstOrThrow();
    expect(row.note).toBe(missed.note);
  });

  it('is not asked again after it refused (a 4xx is an answer)', { timeout: 90_000 }, async () => {
    outage = 400;
    await server.api('POST', '/audit', { body: { action: 'late.2', result: 'blocked', agent: 'late-bot' } });
    const before = (await checkpoint()).tree_size;
    await until('a checkpoint past the refusal', async () => (await checkpoint()).tree_size > before, 30_000);
    const after = asked;
    await new Promise((resolve) => setTimeout(resolve, 6_000)); // past one catch-up period (5 s)
    expect(asked).toBe(after);
    outage = undefined;
  });
});
