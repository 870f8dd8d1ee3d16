/**
 * Signed checkpoints of the audit Merkle tree, in the formats other transparency-log tooling
 * reads: a C2SP tlog-checkpoint body (https://c2sp.org/tlog-checkpoint) signed as a C2SP signed
 * note (https://c2sp.org/signed-note) with an Ed25519 key (signature type 0x01) and, beside it,
 * an ML-DSA-44 key (type 0x06, the timestamped `subtree/v1` signature of c2sp.org/tlog-cosignature,
 * which tlog-checkpoint says logs SHOULD use; it signs origin, size, root and its timestamp — the
 * time line's — but no extension line). Verifiers that know one of the two keys ignore the other
 * line, as signed-note requires (docs/decisions/0034-ml-dsa-44-signatures.md).
 *
 *     warden/audit/0b6f2f4e-5d1c-4a55-9d0e-6f2b8c1e7a10
 *     42
 *     sV/ZxKUjUFToxHJMzaCss838Z0c1h8JHWfDVsLfEZQ8=
 *     time 1767323045
 *
 *     — warden/audit/0b6f2f4e-5d1c-4a55-9d0e-6f2b8c1e7a10 SANKPAA0yt2wYn5k/ReHqmfMq+KpYI3Cn5vCigdrbqLCVNjxCDV3rXu4UqzjYFzOSetQO4eVidjWqaBYuysUCylv9wE=
 *
 * (a vector of checkpoint.unit.test.ts, whose key's vkey is
 * `warden/audit/0b6f2f4e-5d1c-4a55-9d0e-6f2b8c1e7a10+48034a3c+AepKbGPinFIKvvVQexMuxfmVR3auvr57kkIe6mkURtIs`).
 *
 * Time: carried as the checkpoint's first extension line, `time <POSIX seconds>` (the spelling of
 * the timestamp line of c2sp.org/tlog-cosignature). tlog-checkpoint allows opaque extension lines
 * (NOT RECOMMENDED only because monitors cannot audit them, which holds for any time a log
 * asserts); the line is covered by the log's one signature, so any signed-note verifier holding
 * the vkey authenticates it, and checkpoint parsers that ignore extensions still read origin,
 * size and root. The alternative, a timestamped tlog-cosignature (type 0x04) by the log itself,
 * would need a second key (signed-note: one key SHOULD NOT serve two signature types) and states
 * a witness's observation, not the log's own commitment.
 *
 * The text formats (notes, checkpoints, verifier keys) are the SDK's (packages/sdk/src/audit-format.ts),
 * shared with every verifier; here are the keys and the synchronous node:crypto signing and
 * verifying the server, its CLI and its witness need.
 *
 * Key name: tlog-checkpoint says the signature's key name SHOULD be the origin; with one origin
 * per workspace, sign with `noteSigner(key, origin)` (the key id, and so the vkey, is then per
 * workspace, derived from the one public key).
 */

import { createHash, createPrivateKey, createPublicKey, generateKeyPairSync, type KeyObject, sign, verify } from 'node:crypto';
import { AuditProofError, isAuditProofError } from '../../../../../packages/sdk/src/audit-errors.ts';
import {
  type CheckpointText,
  COSIGNATURE_V1,
  checkNoteText,
  decodeBase64,
  ED25519,
  formatCheckpointText,
  formatSignatureLine,
  formatVerifierKeyText,
  isValidKeyName,
  keyIdInput,
  keyIdOf,
  ML_DSA_44,
  parseCheckpointText,
  parseVerifierKeyText,
  type SignatureType,
  splitNote,
  subtreeMessage,
  timestampedParts,
  unsignedLines,
} from '../../../../../packages/sdk/src/audit-format.ts';

export { AuditProofError, type AuditProofErrorCode, isAuditProofError } from '../../../../../packages/sdk/src/audit-errors.ts';
export {
  COSIGNATURE_V1,
  cosignedMessage,
  decodeBase64,
  ED25519,
  formatSignatureLine,
  formatVerifierKeyText,
  isValidKeyName,
  ML_DSA_44,
  type SignatureType,
  subtreeMessage,
  timestampedParts,
} from '../../../../../packages/sdk/src/audit-format.ts';

import { verifyConsistency } from '../../../../../packages/sdk/src/audit-proofs.ts';

const PKCS8_ED25519_PREFIX = Buffer.from('302e020100300506032b657004220420', 'hex');
/** PKCS#8 of an ML-DSA-44 key as its 32-byte seed (RFC 9881's `seed` choice). */
const PKCS8_ML_DSA_44_PREFIX = Buffer.from('3034020100300b060960864801650304031104228020', 'hex');
const SPKI_ML_DSA_44_PREFIX = Buffer.from('30820532300b06096086480165030403110382052100', 'hex');
const ML_DSA_44_KEY_BYTES = 1312;

const invalid = (message: string): never => {
  throw new AuditProofError('invalid_argument', message);
};

export type KeyAlgorithm = 'ed25519' | 'ml-dsa-44';

/** A key pair; `publicKey` is the raw encoding: 32 bytes for Ed25519 (RFC 8032), 1,312 for ML-DSA-44 (FIPS 204). */
export interface SigningKey {
  algorithm: KeyAlgorithm;
  privateKey: KeyObject;
  publicKey: Buffer;
}

/** The algorithm of a raw public key, by its length. */
export const algorithmOf = (publicKey: Uint8Array): KeyAlgorithm => (publicKey.length === ML_DSA_44_KEY_BYTES ? 'ml-dsa-44' : 'ed25519');
/** The signature type of a log's key (0x01 Ed25519, 0x06 ML-DSA-44) or a witness's (0x04, 0x06). */
export const logKeyType = (publicKey: Uint8Array): SignatureType => (algorithmOf(publicKey) === 'ml-dsa-44' ? ML_DSA_44 : ED25519);
export const witnessKeyType = (publicKey: Uint8Array): SignatureType =>
  algorithmOf(publicKey) === 'ml-dsa-44' ? ML_DSA_44 : COSIGNATURE_V1;

/** The seconds a checkpoint text's time line states (0 without one), which an ML-DSA-44 signature carries. */
const secondsOf = (checkpoint: CheckpointText): bigint => (checkpoint.time === undefined ? 0n : BigInt(checkpoint.time.getTime() / 1000));

/** `uint64 seconds ‖ signature`: tlog-cosignature's timestamped_signature. */
export function timestamped(seconds: bigint, signature: Uint8Array): Buffer {
  const out = Buffer.alloc(8 + signature.length);
  out.writeBigUInt64BE(seconds, 0);
  out.set(signature, 8);
  return out;
}

/** Whether an ML-DSA-44 `subtree/v1` signature by `name` verifies for the checkpoint `text`; `log`: the signer is the log. */
export function verifiesSubtree(key: KeyObject, name: string, text: string, signature: Uint8Array, role: 'log' | 'witness'): boolean {
  const parts = timestampedParts(signature, ML_DSA_44);
  if (parts === undefined) return false;
  let checkpoint: CheckpointText;
  try {
    checkpoint = parseCheckpointText(text);
  } catch {
    return false;
  }
  // a log's signature must cover every line shown; a witness's always states when it saw the tree
  if (role === 'log' ? unsignedLines(checkpoint, parts.seconds) !== undefined : parts.seconds === 0n) return false;
  return verify(null, subtreeMessage(name, parts.seconds, checkpoint), key, parts.signature);
}

/** The ML-DSA-44 `subtree/v1` signature by `name` of a checkpoint text, timestamped `seconds`. */
export function signSubtree(key: SigningKey, name: string, text: string, seconds: bigint): Buffer {
  return timestamped(seconds, sign(null, subtreeMessage(name, seconds, parseCheckpointText(text)), key.privateKey));
}

/** A log's own ML-DSA-44 signature: its time line's seconds, and never over lines it would not cover. */
function signAsLog(key: SigningKey, name: string, text: string): Buffer {
  const checkpoint = parseCheckpointText(text);
  const seconds = secondsOf(checkpoint);
  const unsigned = unsignedLines(checkpoint, seconds);
  if (unsigned !== undefined) invalid(`an ML-DSA-44 log signature would leave ${unsigned}`);
  return signSubtree(key, name, text, seconds);
}

export interface NoteSigner {
  name: string;
  /** uint32 key id: SHA-256(name ‖ 0x0A ‖ type ‖ public key)[:4], big-endian. */
  keyId: number;
  publicKey: Buffer;
  sign(text: string): Uint8Array;
}

export interface NoteVerifier {
  name: string;
  keyId: number;
  publicKey: Uint8Array;
  verify(text: string, signature: Uint8Array): boolean;
}

export interface NoteSignature {
  name: string;
  keyId: number;
  signature: Uint8Array;
}

export interface OpenedNote {
  /** The signed text, final newline included. */
  text: string;
  /** Signatures that verified with a given key. */
  verified: NoteSignature[];
  /** Signatures from keys not given (ignored, as the spec requires). */
  unverified: NoteSignature[];
}

export interface Checkpoint {
  origin: string;
  /** Number of leaves. */
  size: number;
  rootHash: Uint8Array;
  /** When the log signed; written as the `time` extension line, to the second. */
  time?: Date | undefined;
  /** Further extension lines (discouraged by the spec; each non-empty, without newlines). */
  extensions?: readonly string[] | undefined;
}

export type ParsedCheckpoint = Omit<CheckpointText, 'rootHash'> & { rootHash: Buffer };

// ---- keys ---------------------------------------------------------------------------------------

export function checkKeyName(name: string): void {
  if (!isValidKeyName(name)) invalid(`invalid key name ${JSON.stringify(name)}`);
}

/** SHA-256(name ‖ 0x0A ‖ type ‖ public key)[:4] as a uint32 (signed-note; by default the log key's type). */
export function keyId(name: string, publicKey: Uint8Array, type: SignatureType = logKeyType(publicKey)): number {
  return keyIdOf(
    createHash('sha256')
      .update(keyIdInput(name, type, publicKey))
      .digest(),
  );
}

export const hex32 = (id: number): string => id.toString(16).padStart(8, '0');

/** A log's vkey: type 0x01 for an Ed25519 key, 0x06 for an ML-DSA-44 one. */
export function formatVerifierKey(name: string, publicKey: Uint8Array): string {
  checkKeyName(name);
  return formatVerifierKeyText(name, keyId(name, publicKey), logKeyType(publicKey), publicKey);
}

export function publicKeyObject(publicKey: Uint8Array): KeyObject {
  if (algorithmOf(publicKey) === 'ml-dsa-44')
    return createPublicKey({ key: Buffer.concat([SPKI_ML_DSA_44_PREFIX, publicKey]), format: 'der', type: 'spki' });
  return createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: Buffer.from(publicKey).toString('base64url') }, format: 'jwk' });
}

/** Parses a vkey of one of `types`, checking that its key id is the one its name and key give. */
export function parseKeyOfType(
  vkey: string,
  types: readonly SignatureType[],
): { name: string; keyId: number; type: SignatureType; publicKey: Buffer; key: KeyObject } {
  const { name, keyId: id, type, publicKey } = parseVerifierKeyText(vkey.trim(), types);
  if (keyId(name, publicKey, type) !== id) invalid('the vkey’s key id does not match its name and key');
  return { name, keyId: id, type, publicKey: Buffer.from(publicKey), key: publicKeyObject(publicKey) };
}

/** Parses a log's vkey (type 0x01 Ed25519 or 0x06 ML-DSA-44). */
export function parseVerifierKey(vkey: string): NoteVerifier {
  const { name, keyId: id, type, publicKey, key } = parseKeyOfType(vkey, [ED25519, ML_DSA_44]);
  return {
    name,
    keyId: id,
    publicKey,
    verify:
      type === ML_DSA_44
        ? (text, signature) => verifiesSubtree(key, name, text, signature, 'log')
        : (text, signature) => signature.length === 64 && verify(null, Buffer.from(text, 'utf8'), key, signature),
  };
}

function fromPrivateKey(privateKey: KeyObject, expected?: KeyAlgorithm): SigningKey {
  const algorithm = privateKey.asymmetricKeyType;
  if ((algorithm !== 'ed25519' && algorithm !== 'ml-dsa-44') || (expected !== undefined && algorithm !== expected))
    return invalid(
      `the signing key is not an ${expected === 'ml-dsa-44' ? 'ML-DSA-44' : expected === 'ed25519' ? 'Ed25519' : 'Ed25519 or ML-DSA-44'} key`,
    );
  const jwk = createPublicKey(privateKey).export({ format: 'jwk' }) as { x?: string; pub?: string };
  return { algorithm, privateKey, publicKey: Buffer.from((algorithm === 'ed25519' ? jwk.x : jwk.pub)!, 'base64url') };
}

function fromSeed(seed: Uint8Array, algorithm: KeyAlgorithm): SigningKey {
  const prefix = algorithm === 'ed25519' ? PKCS8_ED25519_PREFIX : PKCS8_ML_DSA_44_PREFIX;
  return fromPrivateKey(createPrivateKey({ key: Buffer.concat([prefix, seed]), format: 'der', type: 'pkcs8' }), algorithm);
}

export function generateSigningKey(algorithm: KeyAlgorithm = 'ed25519'): SigningKey {
  return fromPrivateKey(algorithm === 'ed25519' ? generateKeyPairSync('ed25519').privateKey : generateKeyPairSync('ml-dsa-44').privateKey);
}

/** The private key as one line (base64 PKCS#8 DER), for a secret store or an environment variable. */
export function exportSigningKey(key: SigningKey): string {
  return key.privateKey.export({ format: 'der', type: 'pkcs8' }).toString('base64');
}

/**
 * Loads a private key from a PKCS#8 PEM, base64 PKCS#8 DER (as {@link exportSigningKey} writes),
 * a base64 32-byte seed (of `expected`, by default Ed25519), or — Ed25519 only — the signed-note
 * private key of Go's golang.org/x/mod/sumdb/note (`PRIVATE+KEY+<name>+<hex id>+<base64(0x01 ‖
 * seed)>`, whose id is checked). With `expected`, a key of the other algorithm is refused.
 */
export function loadSigningKey(value: string, expected?: KeyAlgorithm): SigningKey {
  const text = value.trim();
  try {
    if (text.startsWith('-----BEGIN')) return fromPrivateKey(createPrivateKey({ key: text, format: 'pem' }), expected);
    if (text.startsWith('PRIVATE+KEY+')) {
      // the same layout as a vkey, with the seed where the public key would be
      let parts: ReturnType<typeof parseVerifierKeyText>;
      try {
        parts = parseVerifierKeyText(text.slice('PRIVATE+KEY+'.length), ED25519);
      } catch {
        return invalid('malformed signed-note private key');
      }
      const { name, keyId: id, publicKey: seed } = parts;
      const key = fromSeed(seed, 'ed25519');
      if (expected === 'ml-dsa-44') invalid('a PRIVATE+KEY+ key is an Ed25519 key, not an ML-DSA-44 one');
      if (keyId(name, key.publicKey) !== id) invalid('the private key’s id does not match its name and key');
      return key;
    }
    const bytes = decodeBase64(text.replace(/\s+/g, ''));
    if (bytes?.length === 32) return fromSeed(bytes, expected ?? 'ed25519');
    if (bytes !== undefined) return fromPrivateKey(createPrivateKey({ key: Buffer.from(bytes), format: 'der', type: 'pkcs8' }), expected);
  } catch (error) {
    if (error instanceof AuditProofError) throw error;
  }
  return invalid(
    `not an ${expected === 'ml-dsa-44' ? 'ML-DSA-44' : 'Ed25519'} private key (PEM, base64 PKCS#8, base64 seed${expected === 'ml-dsa-44' ? '' : ' or PRIVATE+KEY+…'})`,
  );
}

/**
 * A signer under key name `name` (for checkpoints, the origin): Ed25519 signs any note; ML-DSA-44
 * signs checkpoints only, timestamped with their time line.
 */
export function noteSigner(key: SigningKey, name: string): NoteSigner & { vkey: string } {
  checkKeyName(name);
  return {
    name,
    keyId: keyId(name, key.publicKey),
    publicKey: key.publicKey,
    vkey: formatVerifierKey(name, key.publicKey),
    sign:
      key.algorithm === 'ml-dsa-44'
        ? (text) => signAsLog(key, name, text)
        : (text) => sign(null, Buffer.from(text, 'utf8'), key.privateKey),
  };
}

// ---- signed notes -------------------------------------------------------------------------------

/** The signed note: the text, a blank line, then one signature line per signer. */
export function signNote(text: string, ...signers: NoteSigner[]): string {
  checkNoteText(text);
  if (signers.length === 0) throw new TypeError('signNote needs at least one signer');
  return `${text}\n${signers.map((signer) => formatSignatureLine(signer.name, signer.keyId, signer.sign(text))).join('')}`;
}

/**
 * Verifies a signed note: every signature by a given verifier must verify, and at least one must
 * be present; signatures by other keys are ignored (returned as `unverified`).
 */
export function openNote(note: string, verifiers: NoteVerifier | string | ReadonlyArray<NoteVerifier | string>): OpenedNote {
  const known = (Array.isArray(verifiers) ? verifiers : [verifiers]).map((v: NoteVerifier | string) =>
    typeof v === 'string' ? parseVerifierKey(v) : v,
  );
  const { text, signatures } = splitNote(note);
  const verified: NoteSignature[] = [];
  const unverified: NoteSignature[] = [];
  const seen = new Set<NoteVerifier>();
  for (const signature of signatures) {
    const verifier = known.find((v) => v.name === signature.name && v.keyId === signature.keyId);
    if (verifier === undefined) {
      unverified.push(signature);
      continue;
    }
    if (seen.has(verifier)) continue;
    seen.add(verifier);
    if (!verifier.verify(text, signature.signature))
      throw new AuditProofError('bad_signature', `the signature by ${signature.name} does not verify`);
    verified.push(signature);
  }
  if (verified.length === 0) throw new AuditProofError('unknown_key', 'the note has no signature by a known key');
  return { text, verified, unverified };
}

// ---- checkpoints --------------------------------------------------------------------------------

/** The tlog-checkpoint note text: origin, size, base64 root hash, then extension lines (time first). */
export const formatCheckpoint = (checkpoint: Checkpoint): string => formatCheckpointText(checkpoint);

/** Parses a checkpoint note text (not its signatures: see {@link openCheckpoint}). */
export function parseCheckpoint(text: string): ParsedCheckpoint {
  const parsed = parseCheckpointText(text);
  return { ...parsed, rootHash: Buffer.from(parsed.rootHash) };
}

/** Formats and signs a checkpoint (`signer.name` should be the origin). */
export function signCheckpoint(checkpoint: Checkpoint, ...signers: NoteSigner[]): string {
  return signNote(formatCheckpoint(checkpoint), ...signers);
}

/** Verifies a signed checkpoint and parses it; with `origin`, also checks the log it is from. */
export function openCheckpoint(
  note: string,
  verifiers: NoteVerifier | string | ReadonlyArray<NoteVerifier | string>,
  options: { origin?: string } = {},
): ParsedCheckpoint & { note: OpenedNote } {
  const opened = openNote(note, verifiers);
  const checkpoint = parseCheckpoint(opened.text);
  if (options.origin !== undefined && checkpoint.origin !== options.origin)
    throw new AuditProofError('origin_mismatch', `the checkpoint is from ${JSON.stringify(checkpoint.origin)}`);
  return { ...checkpoint, note: opened };
}

// ---- proofs -------------------------------------------------------------------------------------

/**
 * RFC 9162 §2.1.4.2, by the SDK's verifier: whether `proof` shows that the tree of `n` leaves with
 * root `newRoot` extends the tree of `m` leaves with root `oldRoot` (0 < m ≤ n). The signer asks
 * it of its last signed checkpoint before it signs a larger tree, a witness of the last one it
 * cosigned: a history rewritten below `m` has no such proof.
 */
export async function isConsistent(
  m: number,
  n: number,
  oldRoot: Uint8Array,
  newRoot: Uint8Array,
  proof: readonly Uint8Array[],
): Promise<boolean> {
  try {
    await verifyConsistency({ oldSize: m, newSize: n, oldRoot, newRoot, proof: [...proof] });
    return true;
  } catch (error) {
    if (isAuditProofError(error)) return false;
    throw error;
  }
}
