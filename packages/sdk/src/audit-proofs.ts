/**
 * Verification of Warden's audit log proofs (inclusion, consistency), on Web Crypto
 * only (SHA-256 and Ed25519), so it runs unchanged in Node 20+, browsers, Deno, Bun and edge
 * runtimes.
 *
 * (Checkpoints and their signatures: audit-checkpoints.ts; the text formats: audit-format.ts.)
 * - The tree is RFC 9162's (§2.1): leaf hash SHA-256(0x00 ‖ event bytes), node hash
 *   SHA-256(0x01 ‖ left ‖ right). Inclusion and consistency proofs are verified with the
 *   algorithms of RFC 9162 §2.1.3.2 and §2.1.4.2.
 *
 * Hashes are accepted as bytes, base64 or hex.
 */

import { AuditProofError, type AuditProofErrorCode } from './audit-errors.js';
import { decodeBase64, HASH_SIZE } from './audit-format.js';

/** A SHA-256 hash: 32 bytes, or their standard base64 or hex encoding. */
export type HashInput = Uint8Array | string;

export interface VerifyInclusionInput {
  /** The event's leaf hash, or give `eventBytes` (the canonical event) and it is computed. */
  leafHash?: HashInput;
  /** The canonical event bytes (a string is encoded as UTF-8). */
  eventBytes?: Uint8Array | string;
  /** The event's leaf index, from 0. */
  index: number;
  /** The tree size of the checkpoint the proof is against. */
  size: number;
  /** The inclusion path, leaf level first. */
  proof: readonly HashInput[];
  /** The root hash of that checkpoint. */
  rootHash: HashInput;
}

export interface VerifyConsistencyInput {
  oldSize: number;
  newSize: number;
  oldRoot: HashInput;
  newRoot: HashInput;
  proof: readonly HashInput[];
}

const encoder = new TextEncoder();

function fail(code: AuditProofErrorCode, message: string): never {
  throw new AuditProofError(code, message);
}

function concat(...parts: Uint8Array[]): Uint8Array<ArrayBuffer> {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let offset = 0;
  for (const part of parts) {
    out.set(part, offset);
    offset += part.length;
  }
  return out;
}

export async function sha256(data: Uint8Array<ArrayBuffer>): Promise<Uint8Array<ArrayBuffer>> {
  return new Uint8Array(await crypto.subtle.digest('SHA-256', data));
}

function equal(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  let difference = 0;
  for (let i = 0; i < a.length; i++) difference |= a[i]! ^ b[i]!;
  return difference === 0;
}

function toHash(value: HashInput, what: string): Uint8Array<ArrayBuffer> {
  let bytes: Uint8Array<ArrayBuffer> | undefined;
  if (typeof value !== 'string') {
    bytes = new Uint8Array(value);
  } else if (/^[0-9a-fA-F]{64}$/.test(value)) {
    bytes = new Uint8Array(HASH_SIZE);
    for (let i = 0; i < HASH_SIZE; i++) bytes[i] = Number.parseInt(value.slice(2 * i, 2 * i + 2), 16);
  } else {
    bytes = decodeBase64(value);
  }
  if (bytes?.length !== HASH_SIZE) fail('invalid_argument', `${what} is not a SHA-256 hash (32 bytes, base64 or hex)`);
  return bytes;
}

function checkCount(value: number, what: string, min: number): void {
  if (!Number.isSafeInteger(value) || value < min) fail('invalid_argument', `${what} must be an integer ≥ ${min}`);
}

/** SHA-256(0x00 ‖ bytes): the leaf hash of an event's canonical bytes (a string is encoded as UTF-8). */
export async function leafHash(bytes: Uint8Array | string): Promise<Uint8Array> {
  return sha256(concat(Uint8Array.of(0x00), typeof bytes === 'string' ? encoder.encode(bytes) : bytes));
}

function nodeHash(left: Uint8Array, right: Uint8Array): Promise<Uint8Array<ArrayBuffer>> {
  return sha256(concat(Uint8Array.of(0x01), left, right));
}

// The RFC's LSB and right shift, in arithmetic: bitwise operators truncate above 2^31.
const isOdd = (n: number) => n % 2 === 1;
const half = (n: number) => Math.floor(n / 2);

function isPowerOfTwo(n: number): boolean {
  let p = 1;
  while (p < n) p *= 2;
  return p === n;
}

/**
 * Verifies that an event is in the tree of a checkpoint (RFC 9162 §2.1.3.2).
 * @throws AuditProofError `invalid_argument`, `invalid_proof` or `root_mismatch`.
 */
export async function verifyInclusion(input: VerifyInclusionInput): Promise<void> {
  const { index, size } = input;
  checkCount(size, 'size', 1);
  checkCount(index, 'index', 0);
  if (index >= size) fail('invalid_argument', `index ${index} is outside a tree of ${size}`);
  if ((input.leafHash === undefined) === (input.eventBytes === undefined)) fail('invalid_argument', 'give either leafHash or eventBytes');
  const root = toHash(input.rootHash, 'rootHash');
  const proof = input.proof.map((p, i) => toHash(p, `proof[${i}]`));

  let r: Uint8Array = input.leafHash === undefined ? await leafHash(input.eventBytes!) : toHash(input.leafHash, 'leafHash');
  let fn = index;
  let sn = size - 1;
  for (const p of proof) {
    if (sn === 0) fail('invalid_proof', 'the proof is longer than the tree is deep');
    if (isOdd(fn) || fn === sn) {
      r = await nodeHash(p, r);
      if (!isOdd(fn)) {
        while (!isOdd(fn) && fn !== 0) {
          fn = half(fn);
          sn = half(sn);
        }
      }
    } else {
      r = await nodeHash(r, p);
    }
    fn = half(fn);
    sn = half(sn);
  }
  if (sn !== 0) fail('invalid_proof', 'the proof is too short for the tree');
  if (!equal(r, root)) fail('root_mismatch', 'the inclusion proof does not lead to the root hash');
}

/**
 * Verifies that the tree of `newSize` extends the tree of `oldSize` (RFC 9162 §2.1.4.2): every
 * event of the old checkpoint is in the new one, unchanged and in place. Equal sizes need an
 * empty proof and equal roots. `oldSize` must be at least 1 (every tree extends the empty one).
 * @throws AuditProofError `invalid_argument`, `invalid_proof` or `root_mismatch`.
 */
export async function verifyConsistency(input: VerifyConsistencyInput): Promise<void> {
  const { oldSize, newSize } = input;
  checkCount(oldSize, 'oldSize', 1);
  checkCount(newSize, 'newSize', oldSize);
  const oldRoot = toHash(input.oldRoot, 'oldRoot');
  const newRoot = toHash(input.newRoot, 'newRoot');
  const path = input.proof.map((p, i) => toHash(p, `proof[${i}]`));

  if (oldSize === newSize) {
    if (path.length > 0) fail('invalid_proof', 'equal sizes take an empty proof');
    if (!equal(oldRoot, newRoot)) fail('root_mismatch', 'equal sizes but different roots');
    return;
  }
  // 1. An empty proof fails.
  if (path.length === 0) fail('invalid_proof', 'empty consistency proof');
  // 2. If the old size is a power of two, the old root is the proof's implicit first element.
  if (isPowerOfTwo(oldSize)) path.unshift(oldRoot);
  // 3, 4.
  let fn = oldSize - 1;
  let sn = newSize - 1;
  while (isOdd(fn)) {
    fn = half(fn);
    sn = half(sn);
  }
  // 5.
  let fr: Uint8Array = path[0]!;
  let sr: Uint8Array = path[0]!;
  // 6.
  for (const c of path.slice(1)) {
    if (sn === 0) fail('invalid_proof', 'the proof is longer than the trees need');
    if (isOdd(fn) || fn === sn) {
      fr = await nodeHash(c, fr);
      sr = await nodeHash(c, sr);
      if (!isOdd(fn)) {
        while (!isOdd(fn) && fn !== 0) {
          fn = half(fn);
          sn = half(sn);
        }
      }
    } else {
      sr = await nodeHash(sr, c);
    }
    fn = half(fn);
    sn = half(sn);
  }
  // 7.
  if (sn !== 0) fail('invalid_proof', 'the proof is too short for the trees');
  if (!equal(fr, oldRoot)) fail('root_mismatch', 'the consistency proof does not lead to the old root');
  if (!equal(sr, newRoot)) fail('root_mismatch', 'the consistency proof does not lead to the new root');
}
