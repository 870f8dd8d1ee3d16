/**
 * The text formats of Warden's audit log, once for every party that reads or writes them: the
 * SDK's verifiers, and the server, its CLI and its witness (which import this file). No
 * cryptography here: hashing and signatures stay with each caller (Web Crypto in the SDK,
 * node:crypto in the server, which signs and needs synchronous calls).
 *
 * - C2SP signed-note (https://c2sp.org/signed-note): the text, a blank line, signature lines
 *   `— <key name> base64(key id ‖ signature)`; verifier keys `<name>+<hex key id>+<base64(type ‖ key)>`
 *   with key id SHA-256(name ‖ 0x0A ‖ type ‖ key)[:4]. Types: 0x01 Ed25519, 0x04 cosignature/v1
 *   (timestamped Ed25519), 0x06 timestamped ML-DSA-44 subtree/v1 (a witness's, or a log's own).
 * - C2SP tlog-checkpoint (https://c2sp.org/tlog-checkpoint): origin, size, base64 root hash, then
 *   extension lines; Warden's first is `time <POSIX seconds>`.
 * - C2SP tlog-cosignature (https://c2sp.org/tlog-cosignature): the signed message
 *   `cosignature/v1\ntime <t>\n` and the checkpoint text; the signature `uint64 t ‖ Ed25519`.
 *   ML-DSA-44 (type 0x06) signs a binary `subtree/v1` message instead (subtreeMessage), which
 *   names the signer but not the checkpoint's extension lines.
 */
import { AuditProofError } from './audit-errors.js';

export const ED25519 = 0x01;
export const COSIGNATURE_V1 = 0x04;
export const ML_DSA_44 = 0x06;
export type SignatureType = typeof ED25519 | typeof COSIGNATURE_V1 | typeof ML_DSA_44;
/** Public key bytes per signature type. */
const KEY_SIZE: Record<SignatureType, number> = { [ED25519]: 32, [COSIGNATURE_V1]: 32, [ML_DSA_44]: 1312 };
const TYPE_NAME: Record<SignatureType, string> = {
  [ED25519]: 'Ed25519 note key (0x01)',
  [COSIGNATURE_V1]: 'Ed25519 cosignature/v1 key (0x04)',
  [ML_DSA_44]: 'ML-DSA-44 subtree/v1 key (0x06)',
};
/** Signature bytes after the key id: timestamp and signature for the timestamped types. */
export const SIGNATURE_SIZE: Record<SignatureType, number> = { [ED25519]: 64, [COSIGNATURE_V1]: 8 + 64, [ML_DSA_44]: 8 + 2420 };
export const HASH_SIZE = 32;
/** More than a log and its witnesses ever attach, and a bound on the work one note can cause. */
export const MAX_SIGNATURES = 100;
const TIME_LINE = /^time (0|[1-9][0-9]*)$/;
const MAX_SECONDS = 8.64e12;
const EM_DASH = '\u2014 ';

const fail = (code: 'invalid_argument' | 'malformed_note' | 'malformed_checkpoint', message: string): never => {
  throw new AuditProofError(code, message);
};

/** Control characters other than newline, or lone surrogates (the text would not be valid UTF-8). */
export function hasForbiddenCharacter(text: string): boolean {
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    if (code < 0x20 && code !== 0x0a) return true;
    if (code >= 0xd800 && code <= 0xdbff) {
      const next = text.charCodeAt(i + 1);
      if (!(next >= 0xdc00 && next <= 0xdfff)) return true;
      i++;
    } else if (code >= 0xdc00 && code <= 0xdfff) {
      return true;
    }
  }
  return false;
}

/** Key names are non-empty, without Unicode spaces or '+' (signed-note), nor control characters. */
export const isValidKeyName = (name: string): boolean => name.length > 0 && !/[\s\u0085+]/u.test(name) && !hasForbiddenCharacter(name);

/** Strict standard base64 (RFC 4648 §4, padded, canonical): one spelling per value. */
export function decodeBase64(text: string): Uint8Array<ArrayBuffer> | undefined {
  if (text.length % 4 !== 0 || !/^[A-Za-z0-9+/]*={0,2}$/.test(text)) return undefined;
  let binary: string;
  try {
    binary = atob(text);
  } catch {
    return undefined;
  }
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return encodeBase64(bytes) === text ? bytes : undefined;
}

export function encodeBase64(bytes: Uint8Array): string {
  let binary = '';
  for (const byte of bytes) binary += String.fromCharCode(byte);
  return btoa(binary);
}

const hex32 = (id: number) => id.toString(16).padStart(8, '0');

/** What the key id hashes: name ‖ 0x0A ‖ type ‖ public key (SHA-256, first four bytes, big-endian). */
export function keyIdInput(name: string, type: number, publicKey: Uint8Array): Uint8Array<ArrayBuffer> {
  const head = new TextEncoder().encode(name);
  const out = new Uint8Array(head.length + 2 + publicKey.length);
  out.set(head);
  out.set([0x0a, type], head.length);
  out.set(publicKey, head.length + 2);
  return out;
}

/** The first four bytes of a SHA-256 digest, as a key id. */
export const keyIdOf = (digest: Uint8Array) => new DataView(digest.buffer, digest.byteOffset, 4).getUint32(0);

/** A verifier key's parts; its key id is as written (the caller checks it against the hash of keyIdInput). */
export interface VerifierKeyParts {
  name: string;
  keyId: number;
  type: SignatureType;
  publicKey: Uint8Array<ArrayBuffer>;
}

/** Parses `<name>+<hex key id>+<base64(type ‖ public key)>` of one of the signature types given. */
export function parseVerifierKeyText(vkey: string, types: SignatureType | readonly SignatureType[]): VerifierKeyParts {
  const allowed: readonly SignatureType[] = typeof types === 'number' ? [types] : types;
  const what = allowed.map((type) => TYPE_NAME[type]).join(' or ');
  // split at the first two '+': the base64 may contain '+' itself
  const first = vkey.indexOf('+');
  const second = vkey.indexOf('+', first + 1);
  const name = vkey.slice(0, first);
  const id = vkey.slice(first + 1, second);
  if (first < 0 || second < 0 || !isValidKeyName(name) || !/^[0-9a-f]{8}$/.test(id))
    fail('invalid_argument', `a vkey is <name>+<8 hex digits>+<base64 key>, here an ${what}`);
  const material = decodeBase64(vkey.slice(second + 1));
  const type = allowed.find((t) => material?.[0] === t);
  if (type === undefined || material!.length !== 1 + KEY_SIZE[type]) fail('invalid_argument', `the vkey is not an ${what}`);
  return { name, keyId: Number.parseInt(id, 16), type: type!, publicKey: material!.slice(1) };
}

export function formatVerifierKeyText(name: string, keyId: number, type: SignatureType, publicKey: Uint8Array): string {
  if (!isValidKeyName(name)) fail('invalid_argument', `invalid key name ${JSON.stringify(name)}`);
  if (publicKey.length !== KEY_SIZE[type]) fail('invalid_argument', `an ${TYPE_NAME[type]} is ${KEY_SIZE[type]} bytes`);
  const material = new Uint8Array(1 + publicKey.length);
  material[0] = type;
  material.set(publicKey, 1);
  return `${name}+${hex32(keyId)}+${encodeBase64(material)}`;
}

export interface SignatureLine {
  name: string;
  keyId: number;
  /** What follows the key id: the signature (for a cosignature, timestamp and signature). */
  signature: Uint8Array<ArrayBuffer>;
}

/** Splits a signed note into its text (final newline included) and its signature lines, checking their form. */
export function splitNote(note: string): { text: string; signatures: SignatureLine[] } {
  if (hasForbiddenCharacter(note)) fail('malformed_note', 'the note has a control character or is not UTF-8');
  // The text ends at the last blank line; what follows is the signature block.
  const split = note.lastIndexOf('\n\n');
  if (split < 0) fail('malformed_note', 'no blank line before the signatures');
  const text = note.slice(0, split + 1);
  const block = note.slice(split + 2);
  if (block.length === 0 || !block.endsWith('\n')) fail('malformed_note', 'the signatures must end with a newline');
  const lines = block.slice(0, -1).split('\n');
  if (lines.length > MAX_SIGNATURES) fail('malformed_note', `more than ${MAX_SIGNATURES} signatures`);
  const signatures = lines.map((line) => {
    if (!line.startsWith(EM_DASH)) fail('malformed_note', 'a signature line must start with "— "');
    const rest = line.slice(EM_DASH.length);
    const space = rest.indexOf(' ');
    const name = rest.slice(0, space);
    const bytes = space < 0 ? undefined : decodeBase64(rest.slice(space + 1));
    if (!isValidKeyName(name) || bytes === undefined || bytes.length < 5) fail('malformed_note', 'malformed signature line');
    return { name, keyId: keyIdOf(bytes!), signature: bytes!.slice(4) };
  });
  return { text, signatures };
}

/** One signature line: `— <name> base64(key id ‖ signature)` and a newline. */
export function formatSignatureLine(name: string, keyId: number, signature: Uint8Array): string {
  const bytes = new Uint8Array(4 + signature.length);
  new DataView(bytes.buffer).setUint32(0, keyId);
  bytes.set(signature, 4);
  return `${EM_DASH}${name} ${encodeBase64(bytes)}\n`;
}

/** The note text must be newline-terminated UTF-8 without control characters. */
export function checkNoteText(text: string): void {
  if (!text.endsWith('\n')) fail('malformed_note', 'the note text must end with a newline');
  if (hasForbiddenCharacter(text)) fail('malformed_note', 'the note text has a control character or is not UTF-8');
}

export interface CheckpointText {
  origin: string;
  size: number;
  rootHash: Uint8Array<ArrayBuffer>;
  /** When the log signed, to the second (the `time` extension line), if it says. */
  time: Date | undefined;
  /** Extension lines other than the time line. */
  extensions: string[];
}

/** Parses a checkpoint's text (the note's text, not its signatures). */
export function parseCheckpointText(text: string): CheckpointText {
  if (!text.endsWith('\n') || hasForbiddenCharacter(text)) fail('malformed_checkpoint', 'a checkpoint is newline-terminated lines of text');
  const lines = text.slice(0, -1).split('\n');
  const [origin, sizeLine, rootLine] = lines;
  if (origin === undefined || sizeLine === undefined || rootLine === undefined || lines.some((line) => line.length === 0))
    fail('malformed_checkpoint', 'a checkpoint has at least three non-empty lines');
  if (!/^(0|[1-9][0-9]*)$/.test(sizeLine!) || !Number.isSafeInteger(Number(sizeLine)))
    fail('malformed_checkpoint', 'the size line is not a decimal integer without leading zeroes (or is too large)');
  const rootHash = decodeBase64(rootLine!);
  if (rootHash?.length !== HASH_SIZE) fail('malformed_checkpoint', 'the root hash line is not a base64 SHA-256 hash');
  let time: Date | undefined;
  const extensions: string[] = [];
  for (const line of lines.slice(3)) {
    const match = TIME_LINE.exec(line);
    if (match === null) {
      extensions.push(line);
      continue;
    }
    if (time !== undefined) fail('malformed_checkpoint', 'more than one time line');
    const seconds = Number(match[1]);
    // a Date holds ±8.64e15 ms: beyond it the time would be no time at all
    if (seconds > MAX_SECONDS) fail('malformed_checkpoint', 'the time is out of range');
    time = new Date(seconds * 1000);
  }
  return { origin: origin!, size: Number(sizeLine), rootHash: rootHash!, time, extensions };
}

function checkLine(what: string, line: string): void {
  if (line.length === 0 || line.includes('\n') || hasForbiddenCharacter(line))
    fail('malformed_checkpoint', `the ${what} must be one non-empty line without control characters`);
}

/** A checkpoint's text: origin, size, base64 root hash, then the time line and other extension lines. */
export function formatCheckpointText(checkpoint: {
  origin: string;
  size: number;
  rootHash: Uint8Array;
  time?: Date | undefined;
  extensions?: readonly string[] | undefined;
}): string {
  const { origin, size, rootHash, time, extensions = [] } = checkpoint;
  checkLine('origin', origin);
  if (!Number.isSafeInteger(size) || size < 0) fail('malformed_checkpoint', 'the size must be a non-negative integer');
  if (rootHash.length !== HASH_SIZE) fail('malformed_checkpoint', `the root hash must be ${HASH_SIZE} bytes`);
  let text = `${origin}\n${size}\n${encodeBase64(rootHash)}\n`;
  if (time !== undefined) {
    const seconds = Math.floor(time.getTime() / 1000);
    if (!Number.isSafeInteger(seconds) || seconds < 0) fail('malformed_checkpoint', 'the time must be a valid date after 1970');
    text += `time ${seconds}\n`;
  }
  for (const line of extensions) {
    checkLine('extension line', line);
    if (TIME_LINE.test(line)) fail('malformed_checkpoint', 'pass the time as `time`, not as an extension line');
    text += `${line}\n`;
  }
  return text;
}

/** What a witness signs for a cosignature at `seconds`: the header, the time line and the checkpoint text. */
export const cosignedMessage = (text: string, seconds: bigint): string => `cosignature/v1\ntime ${seconds}\n${text}`;

/**
 * A timestamped signature's parts (tlog-cosignature: `uint64 timestamp ‖ signature`); undefined
 * when it is not the size its type gives.
 */
export function timestampedParts(signature: Uint8Array, type: typeof COSIGNATURE_V1 | typeof ML_DSA_44) {
  if (signature.length !== SIGNATURE_SIZE[type]) return undefined;
  return { seconds: new DataView(signature.buffer, signature.byteOffset, 8).getBigUint64(0), signature: signature.subarray(8) };
}

const SUBTREE_LABEL = new TextEncoder().encode('subtree/v1\n\0');

/**
 * What ML-DSA-44 signs (tlog-cosignature's `cosigned_message`): the label `subtree/v1\n\0`, the
 * signer's name and the log's origin (each with a one-byte length), and as uint64 big-endian the
 * timestamp, the first leaf and the end of the range; then the range's root hash. For a
 * checkpoint the range is the whole tree: start 0, end its size.
 */
export function subtreeMessage(
  signerName: string,
  seconds: bigint,
  checkpoint: { origin: string; size: number; rootHash: Uint8Array },
): Uint8Array<ArrayBuffer> {
  const name = new TextEncoder().encode(signerName);
  const origin = new TextEncoder().encode(checkpoint.origin);
  if (name.length === 0 || name.length > 255 || origin.length === 0 || origin.length > 255)
    fail('invalid_argument', 'an ML-DSA-44 signature names a signer and an origin of 1 to 255 bytes');
  if (checkpoint.rootHash.length !== HASH_SIZE) fail('invalid_argument', `the root hash must be ${HASH_SIZE} bytes`);
  const out = new Uint8Array(SUBTREE_LABEL.length + 1 + name.length + 8 + 1 + origin.length + 16 + HASH_SIZE);
  const view = new DataView(out.buffer);
  let at = 0;
  const put = (bytes: Uint8Array) => {
    out.set(bytes, at);
    at += bytes.length;
  };
  const putUint64 = (value: bigint) => {
    view.setBigUint64(at, value);
    at += 8;
  };
  put(SUBTREE_LABEL);
  put(Uint8Array.of(name.length));
  put(name);
  putUint64(seconds);
  put(Uint8Array.of(origin.length));
  put(origin);
  putUint64(0n);
  putUint64(BigInt(checkpoint.size));
  put(checkpoint.rootHash);
  return out;
}

/**
 * A log's own ML-DSA-44 signature covers origin, size, root and its timestamp, not the text's
 * extension lines: so the text may carry none but the time line, and that only as the signed
 * timestamp (none when it is zero). Returns why not, or undefined.
 */
export function unsignedLines(text: CheckpointText, seconds: bigint): string | undefined {
  if (text.extensions.length > 0) return 'extension lines an ML-DSA-44 signature does not cover';
  const written = text.time === undefined ? 0n : BigInt(text.time.getTime() / 1000);
  return written === seconds ? undefined : 'a time line other than the time its ML-DSA-44 signature states';
}
