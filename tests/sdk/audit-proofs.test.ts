/**
 * The SDK's audit proof verifiers (Web Crypto only) against published vectors and against what
 * the server produces (merkle.ts proofs, checkpoint.ts notes): every index and size pair of
 * small trees, sizes past 2^32, tampering, and every rejection.
 */
import { describe, expect, it } from 'vitest';
import { noteSigner, generateSigningKey as serverKey, signCheckpoint, signNote } from '../../apps/server/src/features/audit/checkpoint.ts';
import {
  consistencyProof,
  Frontier,
  inclusionProof,
  rootFrom,
  leafHash as serverLeafHash,
  nodeHash as serverNodeHash,
} from '../../apps/server/src/features/audit/merkle.ts';
import {
  AuditProofError,
  type AuditProofErrorCode,
  isAuditProofError,
  leafHash,
  verifyCheckpoint,
  verifyConsistency,
  verifyInclusion,
} from '../../packages/sdk/src/index.ts';

const hex = (bytes: Uint8Array) => Buffer.from(bytes).toString('hex');
const unhex = (text: string) => new Uint8Array(Buffer.from(text, 'hex'));
const flip = (bytes: Uint8Array, at: number) => {
  const copy = Buffer.from(bytes);
  copy[at]! ^= 1;
  return copy;
};

async function rejection(code: AuditProofErrorCode, promise: Promise<unknown>) {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(AuditProofError);
  expect(isAuditProofError(error)).toBe(true);
  expect((error as AuditProofError).code).toBe(code);
}

/** Whether the promise fails with AuditProofError (of any code: tampering may show as either). */
const fails = (promise: Promise<unknown>) =>
  promise.then(
    () => false,
    (e: unknown) => e instanceof AuditProofError && (e.code === 'root_mismatch' || e.code === 'invalid_proof'),
  );

describe('leafHash', () => {
  it('RFC 6962 vectors of transparency-dev/merkle', async () => {
    expect(hex(await leafHash(new Uint8Array()))).toBe('6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d');
    expect(hex(await leafHash('L123456'))).toBe('395aa064aa4c29f7010acfe3f25db9485bbd4b91897b6ad7ad547639252b4d56');
    expect(hex(await leafHash(new TextEncoder().encode('L123456')))).toBe(
      '395aa064aa4c29f7010acfe3f25db9485bbd4b91897b6ad7ad547639252b4d56',
    );
  });
});

/** transparency-dev/merkle's 8-leaf tree (testonly/constants.go, cmd/proofgen/main.go, with 0-based leaf indexes). */
describe('the transparency-dev 8-leaf vectors', () => {
  const leaves = [
    '6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d',
    '96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7',
    '0298d122906dcfc10892cb53a73992fc5b9f493ea4c9badb27b791b4127a7fe7',
    '07506a85fd9dd2f120eb694f86011e5bb4662e5c415a62917033d4a9624487e7',
    'bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b',
    '4271a26be0d8a84f0bd54c8c302e7cb3a3b5d1fa6780a40bcce2873477dab658',
  ];
  const roots: Record<number, string> = {
    1: '6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d',
    2: 'fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125',
    3: 'aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77',
    5: '4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4',
    6: '76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef',
    7: 'ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c',
    8: '5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328',
  };
  const inclusion: [number, number, string[]][] = [
    [0, 1, []],
    [
      0,
      8,
      [
        '96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7',
        '5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e',
        '6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4',
      ],
    ],
    [
      5,
      8,
      [
        'bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b',
        'ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0',
        'd37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7',
      ],
    ],
    [2, 3, ['fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125']],
    [
      1,
      5,
      [
        '6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d',
        '5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e',
        'bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b',
      ],
    ],
  ];
  const consistency: [number, number, string[]][] = [
    [1, 1, []],
    [
      1,
      8,
      [
        '96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7',
        '5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e',
        '6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4',
      ],
    ],
    [
      6,
      8,
      [
        '0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a',
        'ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0',
        'd37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7',
      ],
    ],
    [
      2,
      5,
      [
        '5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e',
        'bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b',
      ],
    ],
    [
      6,
      7,
      [
        '0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a',
        'b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f',
        'd37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7',
      ],
    ],
  ];

  it('inclusion proofs verify, from the leaf hash or the leaf bytes, in any hash encoding', async () => {
    for (const [index, size, proof] of inclusion) {
      await verifyInclusion({ leafHash: leaves[index]!, index, size, proof, rootHash: roots[size]! });
      await verifyInclusion({
        leafHash: unhex(leaves[index]!),
        index,
        size,
        proof: proof.map((p) => Buffer.from(p, 'hex').toString('base64')),
        rootHash: unhex(roots[size]!),
      });
    }
    // Leaf 5's input is 0x40414243.
    await verifyInclusion({ eventBytes: unhex('40414243'), index: 5, size: 8, proof: inclusion[2]![2], rootHash: roots[8]! });
    await rejection(
      'root_mismatch',
      verifyInclusion({ leafHash: leaves[4]!, index: 5, size: 8, proof: inclusion[2]![2], rootHash: roots[8]! }),
    );
  });

  it('consistency proofs verify', async () => {
    for (const [oldSize, newSize, proof] of consistency)
      await verifyConsistency({ oldSize, newSize, oldRoot: roots[oldSize]!, newRoot: roots[newSize]!, proof });
  });

  it('rejections of transparency-dev’s testdata/*/additional', async () => {
    const empty = 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855';
    await rejection('invalid_argument', verifyInclusion({ leafHash: leaves[0]!, index: 0, size: 0, proof: [], rootHash: empty }));
    await rejection('invalid_argument', verifyInclusion({ leafHash: leaves[0]!, index: 2, size: 1, proof: [], rootHash: empty }));
    await rejection('root_mismatch', verifyInclusion({ leafHash: leaves[1]!, index: 0, size: 1, proof: [], rootHash: empty }));
    await rejection('invalid_argument', verifyConsistency({ oldSize: 0, newSize: 1, oldRoot: empty, newRoot: empty, proof: [empty] }));
    await rejection('invalid_argument', verifyConsistency({ oldSize: 2, newSize: 1, oldRoot: empty, newRoot: empty, proof: [] }));
    await rejection('invalid_proof', verifyConsistency({ oldSize: 1, newSize: 1, oldRoot: empty, newRoot: empty, proof: [empty] }));
    await rejection('root_mismatch', verifyConsistency({ oldSize: 1, newSize: 1, oldRoot: empty, newRoot: leaves[1]!, proof: [] }));
    await rejection('invalid_proof', verifyConsistency({ oldSize: 1, newSize: 2, oldRoot: empty, newRoot: leaves[1]!, proof: [] }));
  });
});

describe('the server’s proofs (merkle.ts) verify', () => {
  const N = 70;
  const leaves = Array.from({ length: N }, (_, i) => serverLeafHash(Buffer.from(`event ${i}`)));
  const frontier = new Frontier();
  const nodes = new Map<string, Uint8Array>();
  const roots = [frontier.root()];
  for (const leaf of leaves) {
    for (const node of frontier.append(leaf)) nodes.set(`${node.level}:${node.index}`, node.hash);
    roots.push(frontier.root());
  }
  // Web Crypto digests are asynchronous and slow one by one: each tree size's cases run
  // concurrently, and tampering (exhaustive in merkle.unit.test.ts against the RFC's verifier) is
  // tried on the small sizes and around powers of two only.
  const TAMPERED_SIZES = new Set([...Array.from({ length: 17 }, (_, i) => i), 31, 33, 64, 70]);

  it(`inclusion, every index of every size up to ${N}; tampered proofs fail`, async () => {
    const failures: string[] = [];
    for (let size = 1; size <= N; size++) {
      const cases: Promise<unknown>[] = [];
      for (let index = 0; index < size; index++) {
        const proof = inclusionProof(index, size, nodes);
        const input = { leafHash: leaves[index]!, index, size, proof, rootHash: roots[size]! };
        cases.push(verifyInclusion(input).catch(() => failures.push(`${index}/${size}`)));
        if (!TAMPERED_SIZES.has(size)) continue;
        const tampered = [
          { ...input, leafHash: flip(input.leafHash, 0) },
          ...proof.map((_, i) => ({ ...input, proof: proof.map((p, j) => (i === j ? flip(p, 31) : p)) })),
          { ...input, proof: [...proof, roots[size]!] },
          ...(proof.length > 0 ? [{ ...input, proof: proof.slice(1) }] : []),
          ...(size > 1 ? [{ ...input, index: (index + 1) % size }] : []),
        ];
        for (const [t, bad] of tampered.entries())
          cases.push(fails(verifyInclusion(bad)).then((ok) => ok || failures.push(`${index}/${size} tampered #${t}`)));
      }
      await Promise.all(cases);
    }
    expect(failures).toEqual([]);
  });

  it(`consistency, every pair of sizes up to ${N}; tampered proofs fail`, async () => {
    const failures: string[] = [];
    for (let newSize = 1; newSize <= N; newSize++) {
      const cases: Promise<unknown>[] = [];
      for (let oldSize = 1; oldSize <= newSize; oldSize++) {
        const proof = consistencyProof(oldSize, newSize, nodes);
        const input = { oldSize, newSize, oldRoot: roots[oldSize]!, newRoot: roots[newSize]!, proof };
        cases.push(verifyConsistency(input).catch(() => failures.push(`${oldSize}→${newSize}`)));
        if (!TAMPERED_SIZES.has(newSize)) continue;
        const tampered = [
          { ...input, oldRoot: flip(input.oldRoot, 0) },
          { ...input, newRoot: flip(input.newRoot, 0) },
          ...proof.map((_, i) => ({ ...input, proof: proof.map((p, j) => (i === j ? flip(p, 31) : p)) })),
          ...(oldSize < newSize
            ? [
                { ...input, proof: proof.slice(0, -1) },
                { ...input, proof: [...proof, roots[1]!] },
              ]
            : []),
        ];
        for (const [t, bad] of tampered.entries())
          cases.push(fails(verifyConsistency(bad)).then((ok) => ok || failures.push(`${oldSize}→${newSize} tampered #${t}`)));
      }
      await Promise.all(cases);
    }
    expect(failures).toEqual([]);
  });

  it('sizes past 2^32 (a tree of identical leaves, whose level hashes are all alike)', async () => {
    const leaf = serverLeafHash(Buffer.from('same'));
    const perfect = [leaf];
    for (let level = 1; level <= 53; level++) perfect.push(serverNodeHash(perfect[level - 1]!, perfect[level - 1]!));
    const uniform = { get: (key: string) => perfect[Number(key.split(':')[0])] } as unknown as ReadonlyMap<string, Uint8Array>;
    for (const size of [2 ** 32 + 5, 2 ** 40 + 12_345, Number.MAX_SAFE_INTEGER]) {
      const root = rootFrom(size, uniform);
      for (const index of [0, 2 ** 31, 2 ** 32 + 1, size - 1])
        await verifyInclusion({ leafHash: leaf, index, size, proof: inclusionProof(index, size, uniform), rootHash: root });
      for (const oldSize of [1, 2 ** 31 + 1, 2 ** 32, size - 1]) {
        const oldRoot = rootFrom(oldSize, uniform);
        await verifyConsistency({ oldSize, newSize: size, oldRoot, newRoot: root, proof: consistencyProof(oldSize, size, uniform) });
      }
    }
  });

  it('an inner node passed off as a leaf, with the rest of its path, fails', async () => {
    // Node (1, 0) of the 4-leaf tree with its sibling (1, 1) does hash to the root: only the
    // path's length, checked against the size, exposes it.
    const inner = nodes.get('1:0')!;
    const proof = inclusionProof(0, 4, nodes).slice(1);
    expect(hex(serverNodeHash(inner, proof[0]!))).toBe(hex(roots[4]!));
    await rejection('invalid_proof', verifyInclusion({ leafHash: inner, index: 0, size: 4, proof, rootHash: roots[4]! }));
  });

  it('rejects hashes that are not 32 bytes and both or neither of leafHash and eventBytes', async () => {
    const base = { index: 0, size: 1, proof: [], rootHash: roots[1]! };
    await verifyInclusion({ ...base, eventBytes: 'event 0' });
    await rejection('invalid_argument', verifyInclusion({ ...base, leafHash: leaves[0]!.subarray(1) }));
    await rejection('invalid_argument', verifyInclusion({ ...base, leafHash: 'not a hash' }));
    await rejection('invalid_argument', verifyInclusion(base));
    await rejection('invalid_argument', verifyInclusion({ ...base, leafHash: leaves[0]!, eventBytes: 'event 0' }));
    await rejection('invalid_argument', verifyInclusion({ ...base, leafHash: leaves[0]!, index: 0.5 }));
    await rejection(
      'invalid_argument',
      verifyConsistency({ oldSize: 1, newSize: 2, oldRoot: roots[1]!, newRoot: roots[2]!, proof: ['AAAA'] }),
    );
  });
});

describe('verifyCheckpoint', () => {
  const origin = 'warden/audit/0b6f2f4e-5d1c-4a55-9d0e-6f2b8c1e7a10';
  // The frozen vector of checkpoint.unit.test.ts.
  const VKEY = 'warden/audit/0b6f2f4e-5d1c-4a55-9d0e-6f2b8c1e7a10+48034a3c+AepKbGPinFIKvvVQexMuxfmVR3auvr57kkIe6mkURtIs';
  const BODY = `${origin}\n42\nsV/ZxKUjUFToxHJMzaCss838Z0c1h8JHWfDVsLfEZQ8=\ntime 1767323045\n`;
  const NOTE = `${BODY}\n— ${origin} SANKPAA0yt2wYn5k/ReHqmfMq+KpYI3Cn5vCigdrbqLCVNjxCDV3rXu4UqzjYFzOSetQO4eVidjWqaBYuysUCylv9wE=\n`;

  it('accepts the server’s note and returns its contents', async () => {
    const checkpoint = await verifyCheckpoint(NOTE, VKEY, { origin });
    expect(checkpoint).toMatchObject({
      origin,
      size: 42,
      time: new Date('2026-01-02T03:04:05Z'),
      extensions: [],
      text: BODY,
      keyName: origin,
      keyId: 0x48034a3c,
    });
    expect(Buffer.from(checkpoint.rootHash).toString('base64')).toBe('sV/ZxKUjUFToxHJMzaCss838Z0c1h8JHWfDVsLfEZQ8=');

    const signer = noteSigner(serverKey(), 'example.com/log');
    const note = signCheckpoint({ origin: 'example.com/log', size: 7, rootHash: Buffer.alloc(32, 9), extensions: ['other'] }, signer);
    expect(await verifyCheckpoint(note, signer.vkey)).toMatchObject({
      origin: 'example.com/log',
      size: 7,
      time: undefined,
      extensions: ['other'],
    });
  });

  it('verifies the signature of the C2SP and Go examples, then finds they are not checkpoints', async () => {
    await rejection(
      'malformed_checkpoint',
      verifyCheckpoint(
        'This is an example message.\n\n— example.com/foo Uw2QOkn8srV1yJGh2VYRlL1Tnagv1YEq6TfXppzi2ONncAlTgK7Ztg1ERYNZXsYjOBH3mFXmRKuwHjG1Yu72IneyaQM=\n',
        'example.com/foo+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k',
      ),
    );
    const go =
      "If you think cryptography is the answer to your problem,\nthen you don't know what your problem is.\n\n— PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n";
    await rejection('malformed_checkpoint', verifyCheckpoint(go, 'PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW'));
    await rejection(
      'bad_signature',
      verifyCheckpoint(go.replace('cryptography', 'cryptoqraphy'), 'PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW'),
    );
  });

  it('tampered body or signature: bad_signature', async () => {
    await rejection('bad_signature', verifyCheckpoint(NOTE.replace('\n42\n', '\n43\n'), VKEY));
    await rejection('bad_signature', verifyCheckpoint(NOTE.replace('time 1767323045', 'time 1767323046'), VKEY));
    await rejection('bad_signature', verifyCheckpoint(NOTE.replace('wE=\n', 'wA=\n'), VKEY));
  });

  it('other keys, rotation and witnesses', async () => {
    const other = noteSigner(serverKey(), origin);
    await rejection('unknown_key', verifyCheckpoint(NOTE, other.vkey));
    expect((await verifyCheckpoint(NOTE, [other.vkey, VKEY])).keyId).toBe(0x48034a3c);
    const witness = noteSigner(serverKey(), 'witness.example/w1');
    const cosigned = `${NOTE}${signNote(BODY, witness).slice(BODY.length + 1)}`;
    expect((await verifyCheckpoint(cosigned, VKEY)).size).toBe(42);
    expect((await verifyCheckpoint(cosigned, witness.vkey)).keyName).toBe('witness.example/w1');
    await rejection('origin_mismatch', verifyCheckpoint(NOTE, VKEY, { origin: 'warden/audit/other' }));
  });

  it('malformed notes and vkeys', async () => {
    await rejection('malformed_note', verifyCheckpoint(BODY, VKEY));
    await rejection('malformed_note', verifyCheckpoint(NOTE.slice(0, -1), VKEY));
    await rejection('malformed_note', verifyCheckpoint(NOTE.replace('42', '4\u00002'), VKEY));
    await rejection('malformed_note', verifyCheckpoint(NOTE.replace('SANK', 'SA*K'), VKEY));
    await rejection('invalid_argument', verifyCheckpoint(NOTE, VKEY.replace('+48034a3c+', '+48034a3d+')));
    await rejection('invalid_argument', verifyCheckpoint(NOTE, 'nonsense'));
    await rejection('invalid_argument', verifyCheckpoint(NOTE, []));
  });
});
