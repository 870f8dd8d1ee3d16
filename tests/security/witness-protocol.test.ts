/**
 * The witness (`warden witness`) against C2SP tlog-witness and tlog-cosignature, as a separate
 * process over HTTP, with each kind of witness key: ML-DSA-44 (the default, type 0x06, the
 * `subtree/v1` message) and Ed25519 (`--key-algorithm ed25519`, type 0x04, `cosignature/v1`).
 * Everything is checked with the test's own code from the specs (node:crypto): the log's signed
 * notes (Ed25519, and ML-DSA-44 for a log that signs with it), an RFC 9162 Merkle tree with its
 * consistency proofs, and both cosignature verifiers (tests/support/tlog-cosignature.ts); nothing of
 * the server's audit code is used.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { createHash, generateKeyPairSync, type KeyObject, sign, verify } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type Cosigner,
  cosignedMessage,
  ED25519_SPKI_PREFIX,
  ML_DSA_44_SPKI_PREFIX,
  parseCosignerVkey as parseVkey,
  subtreeMessage,
} from '../support/tlog-cosignature.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
/** What `npx tsx` runs, without npx's start-up cost. */
/** What `npm run warden` runs: the CLI, built (tools/warden.mjs). */
const CLI = join(ROOT, 'tools/warden.mjs');
/** Generous: a loaded machine starts tsx slowly. */
const START_TIMEOUT = 60_000;
const PREFIX = 'warden/audit/';
const WITNESS = 'witness.example/w1';
const ORIGIN_A = `${PREFIX}ws-a`;
const ORIGIN_B = `${PREFIX}ws-b`;
type Algorithm = 'ml-dsa-44' | 'ed25519';

// ---- RFC 9162 Merkle tree (§2.1.1, §2.1.4.1) ----------------------------------------------------

const sha256 = (...parts: Buffer[]) => createHash('sha256').update(Buffer.concat(parts)).digest();
const largestPowerOfTwoBelow = (n: number) => 2 ** Math.floor(Math.log2(n - 1));

function mth(leaves: Buffer[]): Buffer {
  if (leaves.length === 0) return sha256();
  if (leaves.length === 1) return sha256(Buffer.from([0]), leaves[0] as Buffer);
  const k = largestPowerOfTwoBelow(leaves.length);
  return sha256(Buffer.from([1]), mth(leaves.slice(0, k)), mth(leaves.slice(k)));
}

function subproof(m: number, leaves: Buffer[], complete: boolean): Buffer[] {
  const n = leaves.length;
  if (m === n) return complete ? [] : [mth(leaves)];
  const k = largestPowerOfTwoBelow(n);
  if (m <= k) return [...subproof(m, leaves.slice(0, k), complete), mth(leaves.slice(k))];
  return [...subproof(m - k, leaves.slice(k), false), mth(leaves.slice(0, k))];
}

const consistencyProof = (m: number, leaves: Buffer[]) => subproof(m, leaves, true);
const LEAVES = Array.from({ length: 20 }, (_, i) => Buffer.from(`event ${i}`));
/** The same history but for leaf 2: a second tree the log must not be able to show. */
const FORKED = LEAVES.map((leaf, i) => (i === 2 ? Buffer.from('rewritten event 2') : leaf));

// ---- signed notes (C2SP signed-note, tlog-checkpoint) -------------------------------------------

interface Ed25519 {
  privateKey: KeyObject;
  raw: Buffer;
}

function newKey(algorithm: Algorithm = 'ed25519'): Ed25519 {
  const { privateKey, publicKey } = algorithm === 'ed25519' ? generateKeyPairSync('ed25519') : generateKeyPairSync('ml-dsa-44');
  const spki = publicKey.export({ format: 'der', type: 'spki' });
  return { privateKey, raw: spki.subarray(algorithm === 'ed25519' ? ED25519_SPKI_PREFIX.length : ML_DSA_44_SPKI_PREFIX.length) };
}

/** A log's ML-DSA-44 signature line (type 0x06) of a checkpoint text, timestamped with its time line (0 without). */
function mlDsaNoteSignature(text: string, name: string, key: Ed25519): string {
  const time = BigInt(/\ntime (\d+)\n/.exec(text)?.[1] ?? 0);
  const signature = sign(null, subtreeMessage(name, time, text), key.privateKey);
  const stamp = Buffer.alloc(8);
  stamp.writeBigUInt64BE(time);
  return `— ${name} ${Buffer.concat([keyId(name, 0x06, key.raw), stamp, signature]).toString('base64')}\n`;
}

const keyId = (name: string, type: number, raw: Buffer) => sha256(Buffer.from(`${name}\n`), Buffer.from([type]), raw).subarray(0, 4);

function checkpointText(origin: string, size: number, root: Buffer, time?: number): string {
  return `${origin}\n${size}\n${root.toString('base64')}\n${time === undefined ? '' : `time ${time}\n`}`;
}

/** A signature line by `key` under `name` (type 0x01), over the note text. */
function noteSignature(text: string, name: string, key: Ed25519): string {
  const signature = sign(null, Buffer.from(text), key.privateKey);
  return `— ${name} ${Buffer.concat([keyId(name, 0x01, key.raw), signature]).toString('base64')}\n`;
}

const logKey = newKey();
/** A second key of the log, ML-DSA-44: the witness trusts both (GET /audit/signing-key's two). */
const logMlDsaKey = newKey('ml-dsa-44');

/** A checkpoint of the first `size` leaves of `leaves`, signed by the log (or `key`) under its origin. */
function checkpoint(origin: string, size: number, leaves = LEAVES, key = logKey): { text: string; note: string } {
  const text = checkpointText(origin, size, mth(leaves.slice(0, size)));
  return { text, note: `${text}\n${noteSignature(text, origin, key)}` };
}

const body = (old: number, proof: Buffer[], note: string) =>
  `old ${old}\n${proof.map((h) => `${h.toString('base64')}\n`).join('')}\n${note}`;

// ---- the cosignature/v1 verifier (C2SP tlog-cosignature) -----------------------------------------

/** Verifies the witness's answer over `text`; returns the cosigned timestamp. */
function verifyCosignature(answer: string, text: string, cosigner: Cosigner): number {
  expect(answer.endsWith('\n')).toBe(true);
  const lines = answer.slice(0, -1).split('\n');
  const ours = lines.filter((line) => line.startsWith(`— ${cosigner.name} `));
  expect(ours).toHaveLength(1);
  const bytes = Buffer.from((ours[0] as string).slice(`— ${cosigner.name} `.length), 'base64');
  expect(bytes.length).toBe(4 + 8 + (cosigner.type === 0x04 ? 64 : 2420));
  expect(bytes.subarray(0, 4).equals(cosigner.id)).toBe(true);
  const timestamp = bytes.readBigUInt64BE(4);
  expect(verify(null, cosignedMessage(cosigner, timestamp, text), cosigner.key, bytes.subarray(12))).toBe(true);
  // A cosignature of any other tree must not verify: origin, size and root are signed.
  const [origin, size, ...rest] = text.split('\n');
  const other = [origin, Number(size) + 1, ...rest].join('\n');
  expect(verify(null, cosignedMessage(cosigner, timestamp, other), cosigner.key, bytes.subarray(12))).toBe(false);
  return Number(timestamp);
}

// ---- the witness process -------------------------------------------------------------------------

interface Running {
  child: ChildProcess;
  info: { name: string; vkey: string; url: string; origin_prefix: string };
}

const children: ChildProcess[] = [];
const dataDirs: string[] = [];
let dataDir: string;
let witness: Running;
let cosigner: Cosigner;
let algorithm: Algorithm;

/** Signals a child's whole process group (tsx runs the script in a node process of its own). */
function signalGroup(child: ChildProcess, signal: NodeJS.Signals): void {
  try {
    process.kill(-(child.pid as number), signal);
  } catch {
    // already gone
  }
}

function startWitness(): Promise<Running> {
  const args = [
    'witness',
    '--name',
    WITNESS,
    '--data-dir',
    dataDir,
    '--listen',
    '127.0.0.1:0',
    '--log-key',
    logKey.raw.toString('base64'),
    '--log-key',
    logMlDsaKey.raw.toString('base64'),
    ...(algorithm === 'ed25519' ? ['--key-algorithm', 'ed25519'] : []),
    '--json',
  ];
  const child = spawn(process.execPath, [CLI, ...args], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  children.push(child);
  let stdout = '';
  let stderr = '';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`the witness did not start within ${START_TIMEOUT} ms:\n${stderr}`)), START_TIMEOUT);
    child.stderr?.on('data', (chunk) => {
      stderr += chunk;
    });
    child.stdout?.on('data', (chunk) => {
      stdout += chunk;
      const line = stdout
        .split('\n')
        .slice(0, -1)
        .find((l) => l.startsWith('{')); // complete lines only
      if (line === undefined) return;
      clearTimeout(timer);
      resolve({ child, info: JSON.parse(line) });
    });
    child.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`the witness exited (${code}) while starting:\n${stderr}`));
    });
  });
}

async function stopWitness(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  signalGroup(child, 'SIGTERM');
  await exited;
}

async function add(requestBody: string): Promise<{ status: number; type: string; text: string }> {
  const res = await fetch(`${witness.info.url}/add-checkpoint`, { method: 'POST', body: requestBody });
  return { status: res.status, type: res.headers.get('content-type') ?? '', text: await res.text() };
}

afterAll(async () => {
  for (const child of children) signalGroup(child, 'SIGKILL');
  for (const dir of dataDirs) rmSync(dir, { recursive: true, force: true });
});

describe.each(['ml-dsa-44', 'ed25519'] as const)('witness add-checkpoint (C2SP tlog-witness), %s key', (keyAlgorithm) => {
  beforeAll(async () => {
    algorithm = keyAlgorithm;
    dataDir = mkdtempSync(join(tmpdir(), 'warden-witness-'));
    dataDirs.push(dataDir);
    witness = await startWitness();
    cosigner = parseVkey(witness.info.vkey);
  }, START_TIMEOUT + 10_000);

  it('makes its key of the algorithm asked for (ML-DSA-44 unless told otherwise)', () => {
    expect(cosigner.type).toBe(keyAlgorithm === 'ml-dsa-44' ? 0x06 : 0x04);
  });

  it("cosigns a checkpoint signed only with the log's ML-DSA-44 key, and refuses one whose signature or time line is off", async () => {
    const origin = `${PREFIX}ws-ml-dsa`;
    const text = checkpointText(origin, 7, mth(LEAVES.slice(0, 7)), 1_767_323_045);
    const line = mlDsaNoteSignature(text, origin, logMlDsaKey);
    const res = await add(body(0, [], `${text}\n${line}`));
    expect(res.status, res.text).toBe(200);
    verifyCosignature(res.text, text, cosigner);
    const bytes = Buffer.from(line.slice(`— ${origin} `.length, -1), 'base64');
    bytes[100] = (bytes[100] as number) ^ 0x01; // one bit of the ML-DSA-44 signature
    const flipped = `${text}\n— ${origin} ${bytes.toString('base64')}\n`;
    expect((await add(body(7, [], flipped))).status).toBe(403);
    // the time line is not what the signature states: a line the signature does not cover is refused
    const retimed = text.replace('time 1767323045', 'time 1767323046');
    expect((await add(body(7, [], `${retimed}\n${line}`))).status).toBe(403);
  });
  it('prints its name, vkey, URL and prefix, and GET / answers the same vkey as JSON', async () => {
    expect(witness.info).toMatchObject({ name: WITNESS, origin_prefix: PREFIX });
    expect(witness.info.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(cosigner.name).toBe(WITNESS);
    const res = await fetch(`${witness.info.url}/`);
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ name: WITNESS, vkey: witness.info.vkey });
  });

  it('cosigns a first checkpoint from old 0, with a fresh non-zero timestamp', async () => {
    const { text, note } = checkpoint(ORIGIN_A, 5);
    const res = await add(body(0, [], note));
    expect(res.status, res.text).toBe(200);
    const timestamp = verifyCosignature(res.text, text, cosigner);
    expect(timestamp).toBeGreaterThan(0);
    expect(Math.abs(timestamp - Date.now() / 1000)).toBeLessThan(60);
  });

  it('cosigns 5 → 13 with a correct consistency proof, covering an extension line too', async () => {
    const text = checkpointText(ORIGIN_A, 13, mth(LEAVES.slice(0, 13)), 1_700_000_000);
    const res = await add(body(5, consistencyProof(5, LEAVES.slice(0, 13)), `${text}\n${noteSignature(text, ORIGIN_A, logKey)}`));
    expect(res.status, res.text).toBe(200);
    verifyCosignature(res.text, text, cosigner);
  });

  it('answers a stale old size with 409 text/x.tlog.size and the latest cosigned size', async () => {
    const res = await add(body(5, consistencyProof(5, LEAVES.slice(0, 16)), checkpoint(ORIGIN_A, 16).note));
    expect(res.status).toBe(409);
    expect(res.type).toMatch(/^text\/x\.tlog\.size/);
    expect(res.text).toBe('13\n');
  });

  it('refuses a forked tree with 422 and keeps its state (13) for the next correct submission', async () => {
    const forked = await add(body(13, consistencyProof(13, FORKED.slice(0, 16)), checkpoint(ORIGIN_A, 16, FORKED).note));
    expect(forked.status, forked.text).toBe(422);
    const { text, note } = checkpoint(ORIGIN_A, 16);
    const res = await add(body(13, consistencyProof(13, LEAVES.slice(0, 16)), note));
    expect(res.status, res.text).toBe(200);
    verifyCosignature(res.text, text, cosigner);
  });

  it('shows monitors the latest checkpoint it cosigned, at GET /<SHA-256 of the origin>/checkpoint', async () => {
    const origin = `${PREFIX}ws-monitored`;
    const { text, note } = checkpoint(origin, 3);
    const res = await add(body(0, [], note));
    expect(res.status, res.text).toBe(200);
    const shown = await fetch(`${witness.info.url}/${sha256(Buffer.from(origin)).toString('hex')}/checkpoint`);
    expect(shown.status).toBe(200);
    const monitored = await shown.text();
    // the log's signed checkpoint, then this witness's cosignature over it
    expect(monitored.startsWith(note)).toBe(true);
    verifyCosignature(monitored.slice(note.length), text, cosigner);
    expect((await fetch(`${witness.info.url}/${sha256(Buffer.from('warden/audit/unknown')).toString('hex')}/checkpoint`)).status).toBe(404);
    // submitted again with a line under the log's name that is no signature of its key: cosigned, and never shown
    const junk = `— ${origin} ${Buffer.alloc(68, 7).toString('base64')}\n`;
    expect((await add(body(3, [], `${note}${junk}`))).status).toBe(200);
    const again = await (await fetch(`${witness.info.url}/${sha256(Buffer.from(origin)).toString('hex')}/checkpoint`)).text();
    expect(again.startsWith(note)).toBe(true);
    expect(again).not.toContain(junk.trim());
    verifyCosignature(again.slice(note.length), text, cosigner);
  });

  it('answers 409 for a second root at the cosigned size, and cosigns the same root again', async () => {
    const fork = await add(body(16, [], checkpoint(ORIGIN_A, 16, FORKED).note));
    expect(fork.status).toBe(409);
    expect(fork.type).not.toMatch(/x\.tlog\.size/); // a conflict of roots, not of sizes
    const { text, note } = checkpoint(ORIGIN_A, 16);
    const same = await add(body(16, [], note));
    expect(same.status, same.text).toBe(200);
    verifyCosignature(same.text, text, cosigner);
  });

  it('answers 404 for an origin outside the trusted prefix, or the bare prefix', async () => {
    expect((await add(body(0, [], checkpoint('example.com/other-log', 3).note))).status).toBe(404);
    expect((await add(body(0, [], checkpoint(PREFIX, 3).note))).status).toBe(404);
  });

  it('answers 403 for a checkpoint signed by another key, or a tampered signature by the log key', async () => {
    expect((await add(body(16, consistencyProof(16, LEAVES.slice(0, 17)), checkpoint(ORIGIN_A, 17, LEAVES, newKey()).note))).status).toBe(
      403,
    );
    const { text } = checkpoint(ORIGIN_A, 17);
    const line = noteSignature(text, ORIGIN_A, logKey);
    const bytes = Buffer.from(line.slice(`— ${ORIGIN_A} `.length, -1), 'base64');
    bytes[10] = (bytes[10] as number) ^ 0x01; // one bit of the signature itself, the key id intact
    const tampered = `${text}\n— ${ORIGIN_A} ${bytes.toString('base64')}\n`;
    expect((await add(body(16, consistencyProof(16, LEAVES.slice(0, 17)), tampered))).status).toBe(403);
  });

  it('answers 400 for old > size, a proof from 0, more than 63 proof lines, or a malformed body', async () => {
    expect((await add(body(17, [], checkpoint(ORIGIN_A, 16).note))).status).toBe(400);
    const fresh = `${PREFIX}ws-fresh`;
    expect((await add(body(0, [mth(LEAVES.slice(0, 1))], checkpoint(fresh, 4).note))).status).toBe(400);
    const tooLong = Array.from({ length: 64 }, (_, i) => sha256(Buffer.from([i])));
    expect((await add(body(16, tooLong, checkpoint(ORIGIN_A, 17).note))).status).toBe(400);
    expect((await add(`old 16\nnot-a-hash\n\n${checkpoint(ORIGIN_A, 17).note}`)).status).toBe(400);
    expect((await add('old x\n\n')).status).toBe(400);
    // None of those moved the state: the witness still cosigns from 16.
    const stale = await add(body(0, [], checkpoint(ORIGIN_A, 17).note));
    expect(stale.text).toBe('16\n');
    // Nor did the refused fresh origin get a state.
    expect((await add(body(0, [], checkpoint(fresh, 4).note))).status).toBe(200);
  });

  it('tracks two origins independently, and accepts checkpoints carrying other witnesses cosignatures', async () => {
    const { text, note } = checkpoint(ORIGIN_B, 8);
    const other = newKey();
    const otherLine = Buffer.concat([keyId('other.example/w', 0x04, other.raw), Buffer.alloc(8), Buffer.alloc(64, 7)]);
    const withOthers = `${note}— other.example/w ${otherLine.toString('base64')}\n`;
    const first = await add(body(0, [], withOthers));
    expect(first.status, first.text).toBe(200);
    verifyCosignature(first.text, text, cosigner);
    const next = checkpoint(ORIGIN_B, 13);
    const grown = await add(body(8, consistencyProof(8, LEAVES.slice(0, 13)), next.note));
    expect(grown.status, grown.text).toBe(200);
    verifyCosignature(grown.text, next.text, cosigner);
    expect((await add(body(0, [], checkpoint(ORIGIN_A, 18).note))).text).toBe('16\n');
    expect((await add(body(0, [], checkpoint(ORIGIN_B, 18).note))).text).toBe('13\n');
  });

  it(
    'keeps its key and state across a restart on the same data directory',
    async () => {
      const vkey = witness.info.vkey;
      await stopWitness(witness.child);
      witness = await startWitness();
      expect(witness.info.vkey).toBe(vkey);
      const a = await add(body(5, [], checkpoint(ORIGIN_A, 18).note));
      expect(a.status).toBe(409);
      expect(a.type).toMatch(/^text\/x\.tlog\.size/);
      expect(a.text).toBe('16\n');
      expect((await add(body(0, [], checkpoint(ORIGIN_B, 18).note))).text).toBe('13\n');
      // And it goes on from there: 16 → 20 is cosigned by the same key.
      const { text, note } = checkpoint(ORIGIN_A, 20);
      const res = await add(body(16, consistencyProof(16, LEAVES), note));
      expect(res.status, res.text).toBe(200);
      verifyCosignature(res.text, text, cosigner);
    },
    START_TIMEOUT * 2,
  );
});
