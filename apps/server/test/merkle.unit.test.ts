/**
 * The audit Merkle tree (merkle.ts) against RFC 9162 itself: published vectors, a naive recursive
 * MTH / PATH / SUBPROOF and the RFC's verification algorithms, all written here from the RFC text
 * (BigInt arithmetic, nothing shared with merkle.ts), over every index and size pair of small
 * trees and a few sizes past 2^32.
 */
import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { isConsistent } from '../src/features/audit/checkpoint.ts';
import {
  consistencyProof,
  EMPTY_ROOT,
  Frontier,
  inclusionProof,
  leafHash,
  type MerkleNode,
  type NodeId,
  nodeHash,
  nodeKey,
  nodeMap,
  nodesForConsistency,
  nodesForInclusion,
  nodesForRoot,
  rangeNodes,
  rootFrom,
} from '../src/features/audit/merkle.ts';

const hex = (bytes: Uint8Array) => Buffer.from(bytes).toString('hex');
const unhex = (text: string) => Buffer.from(text, 'hex');

// ---- an independent reference, from RFC 9162 §2.1 -------------------------------------------------

const sha256 = (...parts: Uint8Array[]) => {
  const h = createHash('sha256');
  for (const part of parts) h.update(part);
  return h.digest();
};
const refLeaf = (data: Uint8Array) => sha256(Uint8Array.of(0), data);
const refNode = (left: Uint8Array, right: Uint8Array) => sha256(Uint8Array.of(1), left, right);
/** The largest power of two smaller than n (n > 1). */
const split = (n: number) => 2 ** Math.ceil(Math.log2(n) - 1);

/** MTH(D[n]) over leaf hashes (§2.1.1), memoised per leaf array since the proofs below recompute subtrees. */
const memo = new WeakMap<readonly Buffer[], Map<string, Buffer>>();
function mth(leaves: readonly Buffer[], lo = 0, hi = leaves.length): Buffer {
  let cache = memo.get(leaves);
  if (!cache) {
    cache = new Map();
    memo.set(leaves, cache);
  }
  const key = `${lo}:${hi}`;
  const cached = cache.get(key);
  if (cached) return cached;
  let hash: Buffer;
  if (hi === lo) hash = sha256();
  else if (hi - lo === 1) hash = leaves[lo]!;
  else {
    const k = split(hi - lo);
    hash = refNode(mth(leaves, lo, lo + k), mth(leaves, lo + k, hi));
  }
  cache.set(key, hash);
  return hash;
}

/** PATH(m, D[lo:hi]) (§2.1.3.1), m relative to lo. */
function path(m: number, leaves: readonly Buffer[], lo = 0, hi = leaves.length): Buffer[] {
  if (hi - lo === 1) return [];
  const k = split(hi - lo);
  return m < k ? [...path(m, leaves, lo, lo + k), mth(leaves, lo + k, hi)] : [...path(m - k, leaves, lo + k, hi), mth(leaves, lo, lo + k)];
}

/** SUBPROOF(m, D[lo:hi], b) (§2.1.4.1), m relative to lo. */
function subproof(m: number, leaves: readonly Buffer[], b: boolean, lo = 0, hi = leaves.length): Buffer[] {
  if (m === hi - lo) return b ? [] : [mth(leaves, lo, hi)];
  const k = split(hi - lo);
  return m <= k
    ? [...subproof(m, leaves, b, lo, lo + k), mth(leaves, lo + k, hi)]
    : [...subproof(m - k, leaves, false, lo + k, hi), mth(leaves, lo, lo + k)];
}

const lsb = (n: bigint) => (n & 1n) === 1n;

/** §2.1.3.2. */
function refVerifyInclusion(
  index: number | bigint,
  size: number | bigint,
  leaf: Uint8Array,
  proof: readonly Uint8Array[],
  root: Uint8Array,
): boolean {
  let fn = BigInt(index);
  let sn = BigInt(size) - 1n;
  if (fn > sn) return false;
  let r = Buffer.from(leaf);
  for (const p of proof) {
    if (sn === 0n) return false;
    if (lsb(fn) || fn === sn) {
      r = refNode(p, r);
      while (!lsb(fn) && fn !== 0n) {
        fn >>= 1n;
        sn >>= 1n;
      }
    } else {
      r = refNode(r, p);
    }
    fn >>= 1n;
    sn >>= 1n;
  }
  return sn === 0n && r.equals(root);
}

/** §2.1.4.2 (with first = second accepted for an empty proof and equal roots). */
function refVerifyConsistency(
  first: number | bigint,
  second: number | bigint,
  firstHash: Uint8Array,
  secondHash: Uint8Array,
  proof: readonly Uint8Array[],
): boolean {
  const m = BigInt(first);
  const n = BigInt(second);
  if (m <= 0n || m > n) return false;
  if (m === n) return proof.length === 0 && Buffer.from(firstHash).equals(secondHash);
  if (proof.length === 0) return false;
  const p = (m & (m - 1n)) === 0n ? [firstHash, ...proof] : [...proof];
  let fn = m - 1n;
  let sn = n - 1n;
  while (lsb(fn)) {
    fn >>= 1n;
    sn >>= 1n;
  }
  let fr = Buffer.from(p[0]!);
  let sr = Buffer.from(p[0]!);
  for (const c of p.slice(1)) {
    if (sn === 0n) return false;
    if (lsb(fn) || fn === sn) {
      fr = refNode(c, fr);
      sr = refNode(c, sr);
      while (!lsb(fn) && fn !== 0n) {
        fn >>= 1n;
        sn >>= 1n;
      }
    } else {
      sr = refNode(sr, c);
    }
    fn >>= 1n;
    sn >>= 1n;
  }
  return sn === 0n && fr.equals(firstHash) && sr.equals(secondHash);
}

// ---- fixtures -----------------------------------------------------------------------------------

/** Every node a log of `count` leaves stores, as the Frontier produces them. */
function store(leaves: readonly Buffer[]): Map<string, Uint8Array> {
  const frontier = new Frontier();
  return nodeMap(frontier.appendAll(leaves));
}

/** Only the listed nodes, so a computation that reads any other node fails. */
function only(nodes: Map<string, Uint8Array>, ids: readonly NodeId[]): Map<string, Uint8Array> {
  return new Map(ids.map(({ level, index }) => [nodeKey(level, index), nodes.get(nodeKey(level, index))!]));
}

const isComplete = ({ level, index }: NodeId, size: number) => (index + 1) * 2 ** level <= size;

const N = 70;
const leaves = Array.from({ length: N }, (_, i) => leafHash(Buffer.from(`event ${i}`)));
const full = store(leaves);

const flipBit = (bytes: Uint8Array, bit: number) => {
  const copy = Buffer.from(bytes);
  copy[bit >> 3]! ^= 1 << (bit & 7);
  return copy;
};

// ---- published vectors --------------------------------------------------------------------------

describe('hashes: RFC 6962 vectors of transparency-dev/merkle (rfc6962_test.go)', () => {
  it('empty tree, empty leaf, a leaf and a node', () => {
    expect(hex(EMPTY_ROOT)).toBe('e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855');
    expect(hex(rootFrom(0, new Map()))).toBe(hex(EMPTY_ROOT));
    expect(hex(leafHash(new Uint8Array()))).toBe('6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d');
    expect(hex(leafHash(Buffer.from('L123456')))).toBe('395aa064aa4c29f7010acfe3f25db9485bbd4b91897b6ad7ad547639252b4d56');
    expect(hex(nodeHash(Buffer.from('N123'), Buffer.from('N456')))).toBe(
      'aa217fe888e47007fa15edab33c2b492a722cb106c64667fc2b044444de66bbb',
    );
    for (const data of ['', 'a', 'event 0'].map((t) => Buffer.from(t))) expect(hex(leafHash(data))).toBe(hex(refLeaf(data)));
  });

  it('domain separation: a leaf never hashes like a node of the same bytes', () => {
    const a = Buffer.alloc(32, 1);
    expect(hex(leafHash(Buffer.concat([a, a])))).not.toBe(hex(nodeHash(a, a)));
  });
});

/**
 * The 8-leaf tree of transparency-dev/merkle (testonly/constants.go: LeafInputs, NodeHashes,
 * RootHashes; cmd/proofgen/main.go: inclusionProofs, consistencyProofs, whose leaf indexes are
 * 1-based there and 0-based here), the classic Certificate Transparency test tree.
 */
describe('the transparency-dev 8-leaf vectors', () => {
  const inputs = ['', '00', '10', '2021', '3031', '40414243', '5051525354555657', '606162636465666768696a6b6c6d6e6f'].map(unhex);
  const nodeHashes = [
    [
      '6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d',
      '96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7',
      '0298d122906dcfc10892cb53a73992fc5b9f493ea4c9badb27b791b4127a7fe7',
      '07506a85fd9dd2f120eb694f86011e5bb4662e5c415a62917033d4a9624487e7',
      'bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b',
      '4271a26be0d8a84f0bd54c8c302e7cb3a3b5d1fa6780a40bcce2873477dab658',
      'b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f',
      '46f6ffadd3d06a09ff3c5860d2755c8b9819db7df44251788c7d8e3180de8eb1',
    ],
    [
      'fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125',
      '5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e',
      '0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a',
      'ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0',
    ],
    [
      'd37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7',
      '6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4',
    ],
    ['5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328'],
  ];
  const roots = [
    'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855',
    '6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d',
    'fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125',
    'aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77',
    'd37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7',
    '4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4',
    '76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef',
    'ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c',
    '5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328',
  ];
  const inclusion: [index: number, size: number, proof: string[]][] = [
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
  const consistency: [m: number, n: number, proof: string[]][] = [
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

  const frontier = new Frontier();
  const completed = inputs.map((input) => frontier.append(leafHash(input)));
  const stored = nodeMap(completed.flat());

  it('the Frontier stores exactly the published node hashes, each when its last leaf arrives', () => {
    const expected = nodeHashes.flatMap((level, k) => level.map((hash, j) => [nodeKey(k, j), hash] as const));
    expect([...stored].map(([key, hash]) => [key, hex(hash)]).sort()).toEqual([...expected].sort());
    // Leaf 7 closes (0,7), (1,3), (2,1) and (3,0).
    expect(completed[7]!.map(({ level, index }) => [level, index])).toEqual([
      [0, 7],
      [1, 3],
      [2, 1],
      [3, 0],
    ]);
  });

  it('roots for sizes 0..8, from stored nodes and from the frontier', () => {
    for (let size = 0; size <= 8; size++) {
      expect(hex(rootFrom(size, only(stored, nodesForRoot(size))))).toBe(roots[size]);
      expect(hex(Frontier.restore(size, stored).root())).toBe(roots[size]);
    }
  });

  it('inclusion proofs', () => {
    for (const [index, size, proof] of inclusion) {
      expect(inclusionProof(index, size, only(stored, nodesForInclusion(index, size))).map(hex)).toEqual(proof);
      expect(refVerifyInclusion(index, size, leafHash(inputs[index]!), proof.map(unhex), unhex(roots[size]!))).toBe(true);
    }
  });

  it('consistency proofs', () => {
    for (const [m, n, proof] of consistency) {
      expect(consistencyProof(m, n, only(stored, nodesForConsistency(m, n))).map(hex)).toEqual(proof);
      expect(refVerifyConsistency(m, n, unhex(roots[m]!), unhex(roots[n]!), proof.map(unhex))).toBe(true);
    }
  });
});

// ---- exhaustive small trees ---------------------------------------------------------------------

describe(`every size up to ${N}`, () => {
  it('roots equal the naive MTH, reading only the listed nodes, all complete and O(log n)', () => {
    for (let size = 0; size <= N; size++) {
      const ids = nodesForRoot(size);
      expect(ids.every((id) => isComplete(id, size))).toBe(true);
      expect(ids.length).toBeLessThanOrEqual(Math.max(1, Math.ceil(Math.log2(size + 1))));
      expect(hex(rootFrom(size, only(full, ids)))).toBe(hex(mth(leaves, 0, size)));
    }
  });

  // Thousands of cases each: failures are collected and compared once, which keeps the run fast.
  it('inclusion proofs equal the RFC’s PATH and verify; tampered ones do not', () => {
    const failures: string[] = [];
    const check = (ok: boolean, what: string) => ok || failures.push(what);
    let checked = 0;
    for (let size = 1; size <= N; size++) {
      const root = mth(leaves, 0, size);
      for (let index = 0; index < size; index++) {
        const at = `index ${index}, size ${size}`;
        const ids = nodesForInclusion(index, size);
        check(
          ids.every((id) => isComplete(id, size)),
          `${at}: an incomplete node`,
        );
        check(ids.length <= 2 * Math.ceil(Math.log2(size + 1)), `${at}: ${ids.length} nodes`);
        const proof = inclusionProof(index, size, only(full, ids));
        check(proof.map(hex).join() === path(index, leaves, 0, size).map(hex).join(), `${at}: not PATH`);
        const leaf = leaves[index]!;
        check(refVerifyInclusion(index, size, leaf, proof, root), `${at}: does not verify`);
        // Tampering: the leaf, any proof element, the index, the proof's length.
        check(!refVerifyInclusion(index, size, flipBit(leaf, index % 256), proof, root), `${at}: tampered leaf verifies`);
        for (let i = 0; i < proof.length; i++) {
          const bad = proof.slice();
          bad[i] = flipBit(bad[i]!, (index * 7 + i) % 256);
          check(!refVerifyInclusion(index, size, leaf, bad, root), `${at}: tampered proof[${i}] verifies`);
        }
        if (size > 1) check(!refVerifyInclusion((index + 1) % size, size, leaf, proof, root), `${at}: verifies at another index`);
        check(!refVerifyInclusion(index, size, leaf, [...proof, root], root), `${at}: a longer proof verifies`);
        if (proof.length > 0) check(!refVerifyInclusion(index, size, leaf, proof.slice(0, -1), root), `${at}: a shorter proof verifies`);
        checked++;
      }
    }
    expect(failures).toEqual([]);
    expect(checked).toBe((N * (N + 1)) / 2);
  });

  it('consistency proofs equal the RFC’s SUBPROOF and verify (by the RFC and by isConsistent, the SDK’s verifier); tampered ones do not', async () => {
    const failures: string[] = [];
    const check = (ok: boolean, what: string) => ok || failures.push(what);
    // the verifier the signer and the witness use answers as the RFC's does, every time
    const verify = async (m: number, n: number, oldRoot: Uint8Array, newRoot: Uint8Array, proof: Buffer[]) => {
      const expected = refVerifyConsistency(m, n, oldRoot, newRoot, proof);
      check((await isConsistent(m, n, oldRoot, newRoot, proof)) === expected, `${m} → ${n}: isConsistent disagrees`);
      return expected;
    };
    let checked = 0;
    for (let n = 1; n <= N; n++) {
      const newRoot = mth(leaves, 0, n);
      // A log that rewrote history: leaf 0 of the new tree differs.
      const forked = [flipBit(leaves[0]!, 0), ...leaves.slice(1, n)];
      const forkedNodes = store(forked);
      const forkedRoot = mth(forked);
      for (let m = 1; m <= n; m++) {
        const at = `${m} → ${n}`;
        const oldRoot = mth(leaves, 0, m);
        const ids = nodesForConsistency(m, n);
        check(
          ids.every((id) => isComplete(id, n)),
          `${at}: an incomplete node`,
        );
        check(ids.length <= 2 * Math.ceil(Math.log2(n + 1)), `${at}: ${ids.length} nodes`);
        const proof = consistencyProof(m, n, only(full, ids));
        check(proof.map(hex).join() === subproof(m, leaves, true, 0, n).map(hex).join(), `${at}: not SUBPROOF`);
        check(await verify(m, n, oldRoot, newRoot, proof), `${at}: does not verify`);
        for (let i = 0; i < proof.length; i++) {
          const bad = proof.slice();
          bad[i] = flipBit(bad[i]!, (m * 13 + i) % 256);
          check(!(await verify(m, n, oldRoot, newRoot, bad)), `${at}: tampered proof[${i}] verifies`);
        }
        if (m < n) {
          check(!(await verify(m, n, flipBit(oldRoot, 3), newRoot, proof)), `${at}: another old root verifies`);
          check(!(await verify(m, n, oldRoot, flipBit(newRoot, 3), proof)), `${at}: another new root verifies`);
          check(!(await verify(m, n, oldRoot, newRoot, proof.slice(0, -1))), `${at}: a shorter proof verifies`);
          check(!(await verify(m, n, oldRoot, newRoot, [...proof, newRoot])), `${at}: a longer proof verifies`);
          check(!(await verify(m, n, oldRoot, forkedRoot, consistencyProof(m, n, forkedNodes))), `${at}: a fork verifies`);
        }
        checked++;
      }
    }
    expect(failures).toEqual([]);
    expect(checked).toBe((N * (N + 1)) / 2);
  });
});

describe('Frontier', () => {
  const COUNT = 300;
  const many = Array.from({ length: COUNT }, (_, i) => leafHash(Buffer.from(`leaf ${i}`)));

  it('stores each complete node once, with its subtree hash, and only complete ones', () => {
    const frontier = new Frontier();
    const nodes: MerkleNode[] = [];
    for (let i = 0; i < COUNT; i++) {
      const completed = frontier.append(many[i]!);
      expect(completed[0]).toMatchObject({ level: 0, index: i });
      nodes.push(...completed);
      expect(frontier.size).toBe(i + 1);
      expect(hex(frontier.root())).toBe(hex(mth(many, 0, i + 1)));
    }
    let popcount = 0;
    for (let n = COUNT; n > 0; n = Math.floor(n / 2)) popcount += n % 2;
    expect(nodes.length).toBe(2 * COUNT - popcount);
    expect(new Set(nodes.map(({ level, index }) => nodeKey(level, index))).size).toBe(nodes.length);
    for (const { level, index, hash } of nodes) {
      expect(isComplete({ level, index }, COUNT)).toBe(true);
      expect(hex(hash)).toBe(hex(mth(many, index * 2 ** level, (index + 1) * 2 ** level)));
    }
  });

  it('restored at any size, it has the same root and goes on to store the same nodes', () => {
    const stored = store(many);
    for (let size = 0; size <= COUNT; size++) {
      const restored = Frontier.restore(size, only(stored, Frontier.nodesToRestore(size)));
      expect(restored.size).toBe(size);
      expect(hex(restored.root())).toBe(hex(mth(many, 0, size)));
      if (size % 37 === 0) {
        const rest = restored.appendAll(many.slice(size));
        for (const { level, index, hash } of rest) expect(hex(hash)).toBe(hex(stored.get(nodeKey(level, index))!));
        expect(hex(restored.root())).toBe(hex(mth(many)));
      }
    }
  });

  it('rejects a leaf hash that is not 32 bytes and a missing node', () => {
    expect(() => new Frontier().append(new Uint8Array(31))).toThrow(RangeError);
    expect(() => Frontier.restore(3, new Map())).toThrow(/missing/);
  });
});

// ---- sizes past 2^32 ----------------------------------------------------------------------------

/**
 * A tree whose leaves are all the same hash: every perfect subtree of a level has the same hash,
 * so trees of any size can be served (and checked) without storing them. It exercises the index
 * arithmetic above 2^31, where bitwise operators would truncate.
 */
describe('huge trees (identical leaves)', () => {
  const leaf = leafHash(Buffer.from('same'));
  const perfect: Buffer[] = [leaf];
  for (let level = 1; level <= 53; level++) perfect.push(refNode(perfect[level - 1]!, perfect[level - 1]!));
  // Only `get` is read by the compute functions.
  const uniformNodes = { get: (key: string) => perfect[Number(key.split(':')[0])] } as unknown as ReadonlyMap<string, Uint8Array>;
  const memo = new Map<bigint, Buffer>();
  const uniformMth = (n: bigint): Buffer => {
    if (n === 1n) return leaf;
    const cached = memo.get(n);
    if (cached) return cached;
    let k = 1n;
    while (k * 2n < n) k *= 2n;
    const hash = refNode(uniformMth(k), uniformMth(n - k));
    memo.set(n, hash);
    return hash;
  };
  const sizes = [2 ** 31 - 1, 2 ** 31, 2 ** 31 + 1, 2 ** 32 + 5, 2 ** 40 + 12_345, 3 * 2 ** 45 + 7, Number.MAX_SAFE_INTEGER];

  it('roots, inclusion and consistency proofs verify with BigInt arithmetic', () => {
    for (const size of sizes) {
      const root = uniformMth(BigInt(size));
      expect(hex(rootFrom(size, uniformNodes))).toBe(hex(root));
      for (const index of [0, 1, 2 ** 31 - 1, 2 ** 31, 2 ** 32 + 1, size - 2, size - 1].filter((i) => i < size)) {
        const ids = nodesForInclusion(index, size);
        expect(ids.every((id) => isComplete(id, size))).toBe(true);
        expect(ids.length).toBeLessThanOrEqual(2 * 54);
        expect(refVerifyInclusion(index, size, leaf, inclusionProof(index, size, uniformNodes), root)).toBe(true);
      }
      for (const m of [1, 3, 2 ** 31, 2 ** 32 + 3, size - 1, size].filter((x) => x <= size)) {
        const ids = nodesForConsistency(m, size);
        expect(ids.every((id) => isComplete(id, size))).toBe(true);
        const proof = consistencyProof(m, size, uniformNodes);
        expect(refVerifyConsistency(m, size, uniformMth(BigInt(m)), root, proof)).toBe(true);
      }
    }
  });
});

describe('arguments', () => {
  it('rangeNodes decomposes aligned ranges and rejects others', () => {
    expect(rangeNodes(0, 7)).toEqual([
      { level: 2, index: 0 },
      { level: 1, index: 2 },
      { level: 0, index: 6 },
    ]);
    expect(rangeNodes(8, 13)).toEqual([
      { level: 2, index: 2 },
      { level: 0, index: 12 },
    ]);
    expect(rangeNodes(5, 5)).toEqual([]);
    expect(() => rangeNodes(2, 6)).toThrow(RangeError);
  });

  it('rejects impossible sizes and indexes', () => {
    expect(() => nodesForInclusion(3, 3)).toThrow(RangeError);
    expect(() => nodesForInclusion(0, 0)).toThrow(RangeError);
    expect(() => nodesForInclusion(-1, 3)).toThrow(RangeError);
    expect(() => nodesForInclusion(0.5, 3)).toThrow(RangeError);
    expect(() => nodesForConsistency(0, 3)).toThrow(RangeError);
    expect(() => nodesForConsistency(4, 3)).toThrow(RangeError);
    expect(() => nodesForRoot(-1)).toThrow(RangeError);
    expect(() => nodesForRoot(Number.MAX_SAFE_INTEGER + 1)).toThrow(RangeError);
    expect(() => inclusionProof(1, 3, new Map())).toThrow(/missing/);
  });
});
