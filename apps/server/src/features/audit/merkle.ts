/**
 * The audit log's Merkle tree, as RFC 9162 §2.1 defines it (the RFC 6962 tree of Certificate
 * Transparency): leaf hash = SHA-256(0x00 ‖ event bytes), node hash = SHA-256(0x01 ‖ left ‖ right),
 * a tree of n > 1 leaves splitting at the largest power of two below n.
 *
 * Storage model: only *aligned perfect subtrees* are stored, keyed (level, index): node (k, j)
 * covers leaves [j·2^k, (j+1)·2^k) and is written once, when its last leaf is appended, and never
 * changes after. Every subtree hash RFC 9162 uses (MTH(D[a:b]) in MTH, PATH and SUBPROOF) covers a
 * range whose start is a multiple of a power of two at least its length, so it is the right fold
 * of at most log2(n) stored nodes. Serving a root or a proof is therefore two steps, both
 * independent of history size: `nodesFor…` lists the O(log n) keys to fetch in one batched query,
 * and `rootFrom` / `inclusionProof` / `consistencyProof` compute from the fetched map.
 *
 * Sizes and indexes are plain numbers (safe integers), with arithmetic rather than bitwise
 * operators, which would truncate above 2^31.
 */
import { createHash } from 'node:crypto';

export const HASH_SIZE = 32;

/** (level, index) of an aligned perfect subtree: level 0 holds leaf hashes. */
export interface NodeId {
  level: number;
  index: number;
}

export interface MerkleNode extends NodeId {
  hash: Buffer;
}

/** Fetched node hashes, keyed by {@link nodeKey}. */
export type NodeHashes = ReadonlyMap<string, Uint8Array>;

/** MTH({}): the hash of the empty string (RFC 9162 §2.1.1). */
export const EMPTY_ROOT: Buffer = createHash('sha256').digest();

export function leafHash(bytes: Uint8Array): Buffer {
  return createHash('sha256').update(LEAF_PREFIX).update(bytes).digest();
}

export function nodeHash(left: Uint8Array, right: Uint8Array): Buffer {
  return createHash('sha256').update(NODE_PREFIX).update(left).update(right).digest();
}

const LEAF_PREFIX = Uint8Array.of(0x00);
const NODE_PREFIX = Uint8Array.of(0x01);

export function nodeKey(level: number, index: number): string {
  return `${level}:${index}`;
}

/** Builds the map the compute functions read from rows as stored (e.g. a batched SELECT). */
export function nodeMap(rows: Iterable<{ level: number; index: number; hash: Uint8Array }>): Map<string, Uint8Array> {
  const map = new Map<string, Uint8Array>();
  for (const row of rows) map.set(nodeKey(row.level, row.index), row.hash);
  return map;
}

function checkSize(name: string, value: number, min: number): void {
  if (!Number.isSafeInteger(value) || value < min) throw new RangeError(`${name} must be an integer ≥ ${min}, got ${value}`);
}

/** Largest power of two strictly below n (n ≥ 2): where RFC 9162 splits a tree of n leaves. */
function splitPoint(n: number): number {
  let k = 1;
  while (k * 2 < n) k *= 2;
  return k;
}

/**
 * The stored nodes that cover [start, end), left to right, by decreasing level. `start` must be a
 * multiple of a power of two at least end − start (true of every range RFC 9162 hashes), so
 * each piece is aligned and the range's MTH is their right fold.
 */
export function rangeNodes(start: number, end: number): NodeId[] {
  checkSize('start', start, 0);
  checkSize('end', end, start);
  const ids: NodeId[] = [];
  let position = start;
  let remaining = end - start;
  while (remaining > 0) {
    let width = 1;
    let level = 0;
    while (width * 2 <= remaining) {
      width *= 2;
      level++;
    }
    if (position % width !== 0) throw new RangeError(`[${start}, ${end}) is not an RFC 9162 subtree range`);
    ids.push({ level, index: position / width });
    position += width;
    remaining -= width;
  }
  return ids;
}

function lookup(nodes: NodeHashes, id: NodeId): Uint8Array {
  const hash = nodes.get(nodeKey(id.level, id.index));
  if (hash === undefined) throw new Error(`Merkle node (level ${id.level}, index ${id.index}) is missing`);
  return hash;
}

/** MTH(D[start:end]) from the stored nodes of the range. */
function rangeHash(start: number, end: number, nodes: NodeHashes): Buffer {
  if (start === end) return EMPTY_ROOT;
  const ids = rangeNodes(start, end);
  let hash: Buffer = Buffer.from(lookup(nodes, ids[ids.length - 1]!));
  for (let i = ids.length - 2; i >= 0; i--) hash = nodeHash(lookup(nodes, ids[i]!), hash);
  return hash;
}

type Range = readonly [start: number, end: number];

function keysOf(ranges: readonly Range[]): NodeId[] {
  const seen = new Set<string>();
  const ids: NodeId[] = [];
  for (const [start, end] of ranges) {
    for (const id of rangeNodes(start, end)) {
      const key = nodeKey(id.level, id.index);
      if (seen.has(key)) continue;
      seen.add(key);
      ids.push(id);
    }
  }
  return ids;
}

/**
 * RFC 9162 §2.1.3.1 PATH(m, D[start:end]) with absolute leaf indexes, as the ranges whose MTH
 * are the proof's elements, leaf level first.
 */
function pathRanges(m: number, start: number, end: number): Range[] {
  const ranges: Range[] = [];
  // Descend from the root, collecting siblings top-down, then reverse: the RFC lists them bottom-up.
  while (end - start > 1) {
    const k = splitPoint(end - start);
    if (m < start + k) {
      ranges.push([start + k, end]);
      end = start + k;
    } else {
      ranges.push([start, start + k]);
      start += k;
    }
  }
  return ranges.reverse();
}

/**
 * RFC 9162 §2.1.4.1 SUBPROOF(m, D[start:end], b) with absolute indexes (the old tree is D[0:m],
 * start < m ≤ end), as the ranges whose MTH are the proof's elements, in the RFC's order.
 */
function subproofRanges(m: number, start: number, end: number): Range[] {
  const ranges: Range[] = [];
  let complete = true;
  while (m !== end) {
    const k = splitPoint(end - start);
    if (m <= start + k) {
      ranges.push([start + k, end]);
      end = start + k;
    } else {
      ranges.push([start, start + k]);
      start += k;
      complete = false;
    }
  }
  // SUBPROOF(m, D[m], false) = {MTH(D[m])}: the old tree's own root is not sent (b = true).
  if (!complete) ranges.push([start, end]);
  return ranges.reverse();
}

function checkInclusion(index: number, size: number): void {
  checkSize('size', size, 1);
  checkSize('index', index, 0);
  if (index >= size) throw new RangeError(`leaf index ${index} is outside a tree of ${size}`);
}

function checkConsistency(m: number, n: number): void {
  // Every tree extends the empty tree, so a proof from size 0 proves nothing (RFC 9162 requires 0 < m).
  checkSize('old size', m, 1);
  checkSize('new size', n, m);
}

/** The stored nodes whose hashes {@link rootFrom} needs: the compact range [0, size). */
export function nodesForRoot(size: number): NodeId[] {
  checkSize('size', size, 0);
  return rangeNodes(0, size);
}

/** MTH(D[0:size]) from the nodes listed by {@link nodesForRoot}. */
export function rootFrom(size: number, nodes: NodeHashes): Buffer {
  checkSize('size', size, 0);
  return rangeHash(0, size, nodes);
}

/** The stored nodes {@link inclusionProof} needs for leaf `index` in the tree of `size` leaves. */
export function nodesForInclusion(index: number, size: number): NodeId[] {
  checkInclusion(index, size);
  return keysOf(pathRanges(index, 0, size));
}

/** RFC 9162 §2.1.3.1 inclusion path of leaf `index` in the tree of `size` leaves, leaf level first. */
export function inclusionProof(index: number, size: number, nodes: NodeHashes): Buffer[] {
  checkInclusion(index, size);
  return pathRanges(index, 0, size).map(([start, end]) => rangeHash(start, end, nodes));
}

/** The stored nodes {@link consistencyProof} needs between sizes m and n (0 < m ≤ n). */
export function nodesForConsistency(m: number, n: number): NodeId[] {
  checkConsistency(m, n);
  return keysOf(subproofRanges(m, 0, n));
}

/** RFC 9162 §2.1.4.1 consistency proof PROOF(m, D[n]); empty when m = n. */
export function consistencyProof(m: number, n: number, nodes: NodeHashes): Buffer[] {
  checkConsistency(m, n);
  return subproofRanges(m, 0, n).map(([start, end]) => rangeHash(start, end, nodes));
}

/**
 * The compact range [0, size): the perfect subtrees along the tree's right edge, at most one per
 * level. Appending a leaf completes the leaf node and every subtree it closes, which is exactly
 * what must be stored, and the root is their right fold, so appends and roots cost O(log n)
 * whatever the history. Restore it for a stored size with {@link Frontier.restore} from the
 * nodes {@link Frontier.nodesToRestore} lists.
 */
export class Frontier {
  #size = 0;
  #nodes: MerkleNode[] = [];

  /** The nodes to fetch to restore a frontier of `size` leaves (the same as {@link nodesForRoot}). */
  static nodesToRestore(size: number): NodeId[] {
    return nodesForRoot(size);
  }

  static restore(size: number, nodes: NodeHashes): Frontier {
    const frontier = new Frontier();
    for (const id of Frontier.nodesToRestore(size)) {
      const hash = lookup(nodes, id);
      if (hash.length !== HASH_SIZE) throw new RangeError(`Merkle node (level ${id.level}, index ${id.index}) is not ${HASH_SIZE} bytes`);
      frontier.#nodes.push({ ...id, hash: Buffer.from(hash) });
    }
    frontier.#size = size;
    return frontier;
  }

  get size(): number {
    return this.#size;
  }

  /** An independent copy: appends to it leave this one as it is (a batch that may not commit). */
  clone(): Frontier {
    const copy = new Frontier();
    copy.#size = this.#size;
    copy.#nodes = [...this.#nodes];
    return copy;
  }

  /** The compact range's nodes, left to right (decreasing level). */
  get nodes(): readonly MerkleNode[] {
    return this.#nodes;
  }

  /** Appends one leaf hash; returns the nodes it completes (the leaf first), all to be stored. */
  append(leaf: Uint8Array): MerkleNode[] {
    if (leaf.length !== HASH_SIZE) throw new RangeError(`a leaf hash is ${HASH_SIZE} bytes, got ${leaf.length}`);
    if (this.#size >= Number.MAX_SAFE_INTEGER) throw new RangeError('the tree is full');
    let node: MerkleNode = { level: 0, index: this.#size, hash: Buffer.from(leaf) };
    const completed = [node];
    // A node with an odd index is a right child: it completes its parent with the left sibling.
    while (node.index % 2 === 1) {
      const left = this.#nodes.pop()!;
      node = { level: node.level + 1, index: (node.index - 1) / 2, hash: nodeHash(left.hash, node.hash) };
      completed.push(node);
    }
    this.#nodes.push(node);
    this.#size++;
    return completed;
  }

  /** Appends leaf hashes in order; returns every node they complete, in completion order. */
  appendAll(leaves: Iterable<Uint8Array>): MerkleNode[] {
    const completed: MerkleNode[] = [];
    for (const leaf of leaves) completed.push(...this.append(leaf));
    return completed;
  }

  /** MTH of the current tree. */
  root(): Buffer {
    if (this.#nodes.length === 0) return EMPTY_ROOT;
    let hash: Buffer = this.#nodes[this.#nodes.length - 1]!.hash;
    for (let i = this.#nodes.length - 2; i >= 0; i--) hash = nodeHash(this.#nodes[i]!.hash, hash);
    return hash;
  }
}
