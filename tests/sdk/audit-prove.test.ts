/**
 * The SDK has a typed method for every v1 operation (enumerated from spec/dist/openapi.json),
 * and `warden.audit.prove(eventId, { publicKey })` proves an event's inclusion against a pinned
 * key in one call on a real server: while events are being sealed and checkpoints signed
 * around it, with the key pinned from before, and rejecting another key, a forged checkpoint
 * and a tampered proof (answers altered on the way, through the client's `fetch`).
 */
import { createHash, generateKeyPairSync } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { beforeAll, describe, expect, it } from 'vitest';
import { AuditProofError, createWarden, OPERATION_METHODS, operations, type Warden } from '../../packages/sdk/src/index.ts';
import { useTestServer } from '../support/server.ts';

const server = useTestServer({ auditCheckpointIntervalMs: 200 });
let warden: Warden;
let pinned: string;

beforeAll(async () => {
  warden = createWarden({ apiKey: server.key, baseUrl: server.url });
  pinned = (await warden.audit.signingKey()).verifier_key;
});

const spec = JSON.parse(readFileSync(new URL('../../spec/dist/openapi.json', import.meta.url), 'utf8')) as {
  paths: Record<string, Record<string, { operationId?: string }>>;
};
const specOperationIds = Object.values(spec.paths).flatMap((item) =>
  Object.values(item).flatMap((node) => (typeof node === 'object' && node?.operationId ? [node.operationId] : [])),
);

/** The function at a dotted path of the client, or undefined. */
function methodAt(client: object, path: string): unknown {
  return path.split('.').reduce<unknown>((at, name) => (at as Record<string, unknown> | undefined)?.[name], client);
}

/** A verifier key (C2SP signed-note vkey) of a fresh Ed25519 key under `name`: key id = SHA-256(name ‖ \n ‖ 0x01 ‖ key)[:4]. */
function otherVerifierKey(name: string): string {
  const jwk = generateKeyPairSync('ed25519').publicKey.export({ format: 'jwk' });
  const key = Buffer.concat([Buffer.from([0x01]), Buffer.from(jwk.x as string, 'base64url')]);
  const id = createHash('sha256')
    .update(Buffer.concat([Buffer.from(`${name}\n`), key]))
    .digest()
    .subarray(0, 4);
  return `${name}+${id.toString('hex')}+${key.toString('base64')}`;
}

/** The SDK's rejection of `promise`, which must be an AuditProofError. */
async function proofError(promise: Promise<unknown>): Promise<AuditProofError> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(AuditProofError);
  return error as AuditProofError;
}

/** A client whose answers to `path` are rewritten by `change` on the way (a man in the middle). */
function tampered(path: string, change: (data: Record<string, unknown>) => void): Warden {
  return createWarden({
    apiKey: server.key,
    baseUrl: server.url,
    fetch: async (input, init) => {
      const response = await fetch(input, init);
      const url = new URL(input instanceof Request ? input.url : String(input));
      if (!url.pathname.endsWith(path) || response.status !== 200) return response;
      const body = (await response.json()) as { data: Record<string, unknown> };
      change(body.data);
      return new Response(JSON.stringify(body), { status: 200, headers: { 'content-type': 'application/json' } });
    },
  });
}

const record = async (n: number) =>
  (await warden.audit.record({ action: 'sdk.prove', result: 'blocked', severity: 'low', context: { n } })).id;

describe('the SDK covers the v1 API', () => {
  it('has a typed method for every operation of spec/dist/openapi.json', () => {
    expect(specOperationIds.length).toBeGreaterThan(30);
    expect(Object.keys(OPERATION_METHODS).sort()).toEqual([...specOperationIds].sort());
    expect(Object.keys(operations).sort()).toEqual([...specOperationIds].sort());
    const client = createWarden({ apiKey: 'wk_only_looked_at' });
    const missing = specOperationIds.filter(
      (id) => typeof methodAt(client, OPERATION_METHODS[id as keyof typeof OPERATION_METHODS]) !== 'function',
    );
    expect(missing).toEqual([]);
  });

  it('reads and changes settings, and reads the signing key, checkpoints and proofs', async () => {
    const before = await warden.settings.get();
    const changed = await warden.settings.update({ default_decision: { staging: 'block' } });
    expect(changed.default_decision.staging).toBe('block');
    expect(await warden.settings.get()).toEqual(changed);
    await warden.settings.update({ default_decision: before.default_decision });

    expect(pinned).toMatch(/^warden\/audit\/[0-9a-f-]{36}\+[0-9a-f]{8}\+/);
    const id = await record(0);
    const proven = await warden.audit.prove(id, { publicKey: pinned });
    const checkpoint = await warden.audit.checkpoint({ tree_size: proven.checkpoint.size });
    expect(checkpoint.tree_size).toBe(proven.checkpoint.size);
    const raw = await warden.audit.inclusionProof({ event_id: id, tree_size: checkpoint.tree_size });
    expect(raw).toMatchObject({ event_id: id, leaf_index: proven.leafIndex, tree_size: checkpoint.tree_size });
    expect(await warden.audit.consistencyProof({ from_size: 1, to_size: checkpoint.tree_size })).toMatchObject({
      from_size: 1,
      to_size: checkpoint.tree_size,
    });
    expect(await warden.audit.verify({ full: true })).toMatchObject({ valid: true });
  });
});

describe('warden.audit.prove(eventId, { publicKey })', () => {
  it('returns the inclusion verified against the pinned key, events sealed and checkpoints signed meanwhile', async () => {
    // events recorded while others are proven: each proof races the next checkpoint
    const ids = await Promise.all(Array.from({ length: 8 }, (_, n) => record(n + 1)));
    const proofs = await Promise.all(
      ids.map(async (id, n) => {
        await record(100 + n);
        return warden.audit.prove(id, { publicKey: pinned, waitMs: 30_000 });
      }),
    );
    for (const [n, proven] of proofs.entries()) {
      const id = ids[n] as string;
      expect(proven.eventId).toBe(id);
      expect(proven.leafIndex).toBeLessThan(proven.checkpoint.size);
      // checked here, without the SDK: the leaf names the event, and its hash is the proof's leaf hash
      const leaf = JSON.parse(proven.leaf) as unknown[];
      expect(leaf[1]).toBe(id);
      const raw = await warden.audit.inclusionProof({ event_id: id, tree_size: proven.checkpoint.size });
      expect(
        createHash('sha256')
          .update(Buffer.concat([Buffer.from([0]), Buffer.from(proven.leaf)]))
          .digest('hex'),
      ).toBe(raw.leaf_hash);
      expect(Buffer.from(proven.checkpoint.rootHash).toString('hex')).toBe(raw.root_hash);
      expect(`${proven.checkpoint.keyName}+${proven.checkpoint.keyId.toString(16).padStart(8, '0')}`).toBe(
        pinned.split('+').slice(0, 2).join('+'),
      );
    }
  });

  it('rejects another pinned key (unknown_key), and needs one', async () => {
    const id = await record(200);
    const name = pinned.split('+')[0] as string;
    expect((await proofError(warden.audit.prove(id, { publicKey: otherVerifierKey(name) }))).code).toBe('unknown_key');
    expect((await proofError(warden.audit.prove(id, { publicKey: '' }))).code).toBe('invalid_argument');
    // the right key among others (a rotation) verifies
    expect((await warden.audit.prove(id, { publicKey: [otherVerifierKey(name), pinned] })).eventId).toBe(id);
  });

  it('rejects a checkpoint altered on the way (bad_signature) and a tampered proof (root_mismatch)', async () => {
    const id = await record(300);
    await warden.audit.prove(id, { publicKey: pinned });
    const forged = tampered('/audit/checkpoint', (data) => {
      const lines = String(data.note).split('\n');
      lines[1] = String(Number(lines[1]) + 1); // another size, same signature
      data.note = lines.join('\n');
    });
    expect((await proofError(forged.audit.prove(id, { publicKey: pinned }))).code).toBe('bad_signature');
    const rewritten = tampered('/audit/proofs/inclusion', (data) => {
      const proof = data.proof as string[];
      if (proof.length > 0) proof[0] = (proof[0] as string).replace(/^./, (c) => (c === '0' ? '1' : '0'));
      else data.leaf = String(data.leaf).replace('sdk.prove', 'sdk.prov3');
    });
    expect(['root_mismatch', 'invalid_proof']).toContain((await proofError(rewritten.audit.prove(id, { publicKey: pinned }))).code);
  });
});
