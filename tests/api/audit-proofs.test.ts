/**
 * The verifiable audit log through the API: signed checkpoints, inclusion and consistency
 * proofs, checked here by a verifier written from RFC 9162 (§2.1.3.2, §2.1.4.2) and the C2SP
 * signed-note format, not by the server's code; and incremental verification.
 */
import { createHash, createPublicKey, verify as verifySignature } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { keyFor, startTestServer, type TestServer } from '../support/server.ts';

let server: TestServer;

beforeAll(async () => {
  server = await startTestServer({ auditSealIntervalMs: 50, auditCheckpointIntervalMs: 50 });
});
afterAll(() => server?.close());

// ---- an independent verifier (RFC 9162 and C2SP signed-note), written from the texts ----------

const sha256 = (...parts: Buffer[]) => createHash('sha256').update(Buffer.concat(parts)).digest();
const nodeHash = (left: Buffer, right: Buffer) => sha256(Buffer.of(1), left, right);
const hex = (value: string) => Buffer.from(value, 'hex');

/** RFC 9162 §2.1.3.2. */
function inclusionVerifies(index: number, size: number, leaf: Buffer, proof: Buffer[], root: Buffer): boolean {
  if (index >= size) return false;
  let fn = index;
  let sn = size - 1;
  let r = leaf;
  for (const p of proof) {
    if (sn === 0) return false;
    if (fn % 2 === 1 || fn === sn) {
      r = nodeHash(p, r);
      while (fn % 2 === 0 && fn !== 0) {
        fn = Math.floor(fn / 2);
        sn = Math.floor(sn / 2);
      }
    } else {
      r = nodeHash(r, p);
    }
    fn = Math.floor(fn / 2);
    sn = Math.floor(sn / 2);
  }
  return sn === 0 && r.equals(root);
}

/** RFC 9162 §2.1.4.2. */
function consistencyVerifies(first: number, second: number, firstRoot: Buffer, secondRoot: Buffer, proof: Buffer[]): boolean {
  if (first === second) return proof.length === 0 && firstRoot.equals(secondRoot);
  const path = (first & (first - 1)) === 0 ? [firstRoot, ...proof] : [...proof];
  if (path.length === 0) return false;
  let fn = first - 1;
  let sn = second - 1;
  while (fn % 2 === 1) {
    fn = Math.floor(fn / 2);
    sn = Math.floor(sn / 2);
  }
  let fr = path[0]!;
  let sr = path[0]!;
  for (const c of path.slice(1)) {
    if (sn === 0) return false;
    if (fn % 2 === 1 || fn === sn) {
      fr = nodeHash(c, fr);
      sr = nodeHash(c, sr);
      while (fn % 2 === 0 && fn !== 0) {
        fn = Math.floor(fn / 2);
        sn = Math.floor(sn / 2);
      }
    } else {
      sr = nodeHash(sr, c);
    }
    fn = Math.floor(fn / 2);
    sn = Math.floor(sn / 2);
  }
  return sn === 0 && fr.equals(firstRoot) && sr.equals(secondRoot);
}

/** A C2SP signed note: its text verified with a raw Ed25519 key; returns the checkpoint's lines. */
function openNote(note: string, keyName: string, publicKey: Buffer): { origin: string; size: number; root: Buffer; time: number } {
  const split = note.lastIndexOf('\n\n');
  const text = note.slice(0, split + 1);
  const line = note
    .slice(split + 2)
    .split('\n')
    .find((l) => l.startsWith(`\u2014 ${keyName} `));
  if (!line) throw new Error('no signature by the key');
  const signature = Buffer.from(line.slice(`\u2014 ${keyName} `.length), 'base64');
  const keyId = sha256(Buffer.from(`${keyName}\n`), Buffer.of(1), publicKey).subarray(0, 4);
  expect(signature.subarray(0, 4)).toEqual(keyId);
  const key = createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: publicKey.toString('base64url') }, format: 'jwk' });
  if (!verifySignature(null, Buffer.from(text), key, signature.subarray(4))) throw new Error('bad signature');
  const [origin, size, root, time] = text.slice(0, -1).split('\n');
  return { origin: origin!, size: Number(size), root: Buffer.from(root!, 'base64'), time: Number(time!.replace('time ', '')) };
}

// ---- helpers -------------------------------------------------------------------------------

async function recordEvents(count: number, key = server.key): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < count; i++) {
    const res = await server.api('POST', '/audit', {
      key,
      body: { agent: 'billing-bot', action: `refund.${i}`, resource: `orders/${i}`, result: 'blocked', severity: 'high' },
    });
    expect(res.status).toBe(201);
    ids.push(res.body.data.id);
  }
  return ids;
}

/** Polls GET /audit/checkpoint until the latest covers at least `size` events (bounded). */
async function checkpointOf(size: number, key = server.key) {
  for (let attempt = 0; attempt < 200; attempt++) {
    const res = await server.api('GET', '/audit/checkpoint', { key });
    if (res.status === 200 && res.body.data.tree_size >= size) return res.body.data;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`no checkpoint of ${size} events within 10 s`);
}

async function signingKey(key = server.key) {
  const res = await server.api('GET', '/audit/signing-key', { key });
  expect(res.status).toBe(200);
  return res.body.data;
}

// ---- tests -----------------------------------------------------------------------------------

describe('GET /audit/signing-key and GET /audit/checkpoint', () => {
  it('getAuditCheckpoint: a checkpoint of every event, a C2SP note signed by the published Ed25519 key', async () => {
    await recordEvents(5);
    const checkpoint = await checkpointOf(5);
    const key = await signingKey();
    expect(key).toMatchObject({ algorithm: 'ed25519', key_id: checkpoint.key_id });
    expect(key.verifier_key).toBe(
      `${key.key_name}+${key.key_id}+${Buffer.concat([Buffer.of(1), Buffer.from(key.public_key, 'base64')]).toString('base64')}`,
    );
    const opened = openNote(checkpoint.note, key.key_name, Buffer.from(key.public_key, 'base64'));
    expect(opened.origin).toBe(checkpoint.origin);
    expect(opened.size).toBe(checkpoint.tree_size);
    expect(opened.root.toString('hex')).toBe(checkpoint.root_hash);
    expect(opened.time * 1000).toBe(Date.parse(checkpoint.timestamp));
    // the checkpoint of exactly that size is the same
    const exact = await server.api('GET', `/audit/checkpoint?tree_size=${checkpoint.tree_size}`);
    expect(exact.body.data).toEqual(checkpoint);
  });

  it('getAuditCheckpoint: 404 not_found for a size never checkpointed; 400 for a size that is not a positive integer', async () => {
    const missing = await server.api('GET', '/audit/checkpoint?tree_size=999999');
    expect(missing.status).toBe(404);
    expect(missing.body.error.code).toBe('not_found');
    const bad = await server.api('GET', '/audit/checkpoint?tree_size=0', { unchecked: true });
    expect(bad.status).toBe(400);
    expect(bad.body.error.code).toBe('invalid_request');
  });

  it('getAuditCheckpoint: a workspace whose only event is its key’s creation has no larger checkpoint (404), and never sees another workspace’s', async () => {
    // Creating the key is a configuration change, audited in the new workspace: its tree holds that one event.
    const other = await keyFor(server, 'audit:read,audit:write', 'proofs-empty');
    const larger = await server.api('GET', '/audit/checkpoint?tree_size=2', { key: other });
    expect(larger.status).toBe(404);
    const mine = (await server.api('GET', '/audit/checkpoint')).body.data;
    const deadline = Date.now() + 10_000;
    let res = await server.api('GET', '/audit/checkpoint', { key: other });
    while (res.status === 404 && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 100));
      res = await server.api('GET', '/audit/checkpoint', { key: other });
    }
    expect(res.status).toBe(200);
    expect(res.body.data.tree_size).toBe(1);
    expect(res.body.data.origin).toMatch(/^warden\/audit\//);
    expect(res.body.data.origin).not.toBe(mine?.origin);
  });
});

describe('GET /audit/proofs/inclusion', () => {
  it('getAuditInclusionProof: every event is proven in the checkpointed tree, its leaf being its canonical bytes', async () => {
    const ids = await recordEvents(7);
    const checkpoint = await checkpointOf(12);
    const key = await signingKey();
    const signed = openNote(checkpoint.note, key.key_name, Buffer.from(key.public_key, 'base64'));
    for (const id of ids) {
      const res = await server.api('GET', `/audit/proofs/inclusion?event_id=${id}&tree_size=${signed.size}`);
      expect(res.status).toBe(200);
      const proof = res.body.data;
      expect(proof.root_hash).toBe(signed.root.toString('hex'));
      const leaf = sha256(Buffer.of(0), Buffer.from(proof.leaf, 'utf8'));
      expect(leaf.toString('hex')).toBe(proof.leaf_hash);
      expect(inclusionVerifies(proof.leaf_index, proof.tree_size, leaf, proof.proof.map(hex), signed.root)).toBe(true);
      // the leaf is the event: its id and action are in the canonical array
      const fields = JSON.parse(proof.leaf) as unknown[];
      expect(fields[1]).toBe(id);
      expect(fields[12]).toBe('blocked');
      // and the API's event carries the same leaf hash and position
      const listed = await server.api('GET', '/audit-logs?limit=100');
      const event = listed.body.data.find((e: { id: string }) => e.id === id);
      expect(event).toMatchObject({ sequence: proof.leaf_index + 1, hash: proof.leaf_hash });
    }
  });

  it('getAuditInclusionProof: a changed leaf or a proof for another index does not verify', async () => {
    const [id] = await recordEvents(1);
    const checkpoint = await checkpointOf(13);
    const res = await server.api('GET', `/audit/proofs/inclusion?event_id=${id}&tree_size=${checkpoint.tree_size}`);
    const proof = res.body.data;
    const root = hex(checkpoint.root_hash);
    const forged = sha256(Buffer.of(0), Buffer.from(proof.leaf.replace('"blocked"', '"allowed"'), 'utf8'));
    expect(inclusionVerifies(proof.leaf_index, proof.tree_size, forged, proof.proof.map(hex), root)).toBe(false);
    expect(inclusionVerifies(proof.leaf_index - 1, proof.tree_size, hex(proof.leaf_hash), proof.proof.map(hex), root)).toBe(false);
  });

  it('getAuditInclusionProof: 404 for an unknown event or another workspace’s; 400 beyond the tree or for an event after tree_size', async () => {
    const [id] = await recordEvents(1);
    const checkpoint = await checkpointOf(14);
    const unknown = await server.api('GET', '/audit/proofs/inclusion?event_id=00000000-0000-4000-8000-000000000000');
    expect(unknown.status).toBe(404);
    expect(unknown.body.error.code).toBe('not_found');

    const otherKey = await keyFor(server, 'audit:read,audit:write', 'proofs-other');
    const foreign = await server.api('GET', `/audit/proofs/inclusion?event_id=${id}`, { key: otherKey });
    expect(foreign.status).toBe(404);

    const beyond = await server.api('GET', `/audit/proofs/inclusion?event_id=${id}&tree_size=${checkpoint.tree_size + 1000}`);
    expect(beyond.status).toBe(400);
    expect(beyond.body.error.code).toBe('invalid_request');
    const before = await server.api('GET', `/audit/proofs/inclusion?event_id=${id}&tree_size=1`);
    expect(before.status).toBe(400);

    const missing = await server.api('GET', '/audit/proofs/inclusion', { unchecked: true });
    expect(missing.status).toBe(400);
    expect(missing.body.error.code).toBe('invalid_request');
  });
});

describe('GET /audit/proofs/consistency', () => {
  it('getAuditConsistencyProof: the tree of an earlier checkpoint is a prefix of a later one, for every earlier size', async () => {
    const first = await checkpointOf(1);
    await recordEvents(6);
    const second = await checkpointOf(first.tree_size + 6);
    for (let size = 1; size <= second.tree_size; size++) {
      const res = await server.api('GET', `/audit/proofs/consistency?from_size=${size}&to_size=${second.tree_size}`);
      expect(res.status).toBe(200);
      const { from_root, to_root, proof } = res.body.data;
      expect(to_root).toBe(second.root_hash);
      if (size === first.tree_size) expect(from_root).toBe(first.root_hash);
      expect(consistencyVerifies(size, second.tree_size, hex(from_root), hex(to_root), proof.map(hex))).toBe(true);
    }
  });

  it('getAuditConsistencyProof: a proof does not verify against a root that is not the log’s', async () => {
    const checkpoint = await checkpointOf(2);
    const res = await server.api('GET', `/audit/proofs/consistency?from_size=2&to_size=${checkpoint.tree_size}`);
    const { from_root, to_root, proof } = res.body.data;
    const forged = sha256(Buffer.from('a rewritten history'));
    expect(consistencyVerifies(2, checkpoint.tree_size, forged, hex(to_root), proof.map(hex))).toBe(false);
    expect(consistencyVerifies(2, checkpoint.tree_size, hex(from_root), forged, proof.map(hex))).toBe(false);
  });

  it('getAuditConsistencyProof: 400 when from_size > to_size or to_size exceeds the tree', async () => {
    const checkpoint = await checkpointOf(3);
    const reversed = await server.api('GET', `/audit/proofs/consistency?from_size=${checkpoint.tree_size}&to_size=2`);
    expect(reversed.status).toBe(400);
    expect(reversed.body.error.code).toBe('invalid_request');
    const beyond = await server.api('GET', `/audit/proofs/consistency?from_size=1&to_size=${checkpoint.tree_size + 10_000}`);
    expect(beyond.status).toBe(400);
  });
});

describe('GET /audit/verify', () => {
  it('verifyAuditChain: valid against the latest signed checkpoint, then incremental from where it ended', async () => {
    await recordEvents(3);
    const checkpoint = await checkpointOf(3);
    const full = await server.api('GET', '/audit/verify?full=true');
    expect(full.status).toBe(200);
    expect(full.body.data).toMatchObject({ valid: true, verified_from: 0, unaccounted: 0, first_invalid_sequence: null });
    expect(full.body.data.checked).toBe(full.body.data.tree_size);
    expect(full.body.data.checkpoint).toMatchObject({ valid: true });
    expect(full.body.data.checkpoint!.tree_size).toBeGreaterThanOrEqual(checkpoint.tree_size);

    await recordEvents(2);
    await checkpointOf(full.body.data.tree_size + 2);
    const next = await server.api('GET', '/audit/verify');
    expect(next.body.data).toMatchObject({ valid: true, verified_from: full.body.data.tree_size });
    // The new events, plus the rolling re-check of older ones: all of them, on a log this small.
    expect(next.body.data.checked).toBe(next.body.data.tree_size);
  });
});

describe('permissions', () => {
  it('audit proofs need audit:read: 403 insufficient_permission without it', async () => {
    const key = await keyFor(server, 'agents:read');
    for (const path of ['/audit/checkpoint', '/audit/signing-key', '/audit/proofs/consistency?from_size=1'] as const) {
      const res = await server.api('GET', path, { key });
      expect(res.status, path).toBe(403);
      expect(res.body.error.code).toBe('insufficient_permission');
    }
  });
});
