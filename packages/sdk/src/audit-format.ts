/**
 * The text formats of Warden's audit log, once for every party that reads or writes them: the
 * SDK's verifiers, and the server, its CLI and its witness (which import this file). No
 * cryptography here: hashing and signatures stay with each caller (Web Crypto in the SDK,
 * node:crypto in the server, which signs and needs synchronous calls).
 *
 * - C2SP signed-note (https://c2sp.org/signed-note): the text, a blank line, signature lines
 *   `— <key name> base64(key id ‖ signature)`; verifier keys `<name>+<hex key id>+<base64(type ‖ key)>`
 *   with key id SHA-256(name ‖ 0x0A ‖ type ‖ key)[:4]. Types: 0x01 Ed25519, 0x04 cosignature/v1.
 * - C2SP tlog-checkpoint (https://c2sp.org/tlog-checkpoint): origin, size, base64 root hash, then
 *   extension lines; Warden's first is `time <POSIX seconds>`.
 * - C2SP tlog-cosignature (https://c2sp.org/tlog-cosignature): the signed message
 *   `cosignature/v1\ntime <t>\n` and the checkpoint text; the signature `uint64 t ‖ Ed25519`.
 */
import { AuditProofError } from './audit-errors.js';

export const ED25519 = 0x01;
export const COSIGNATURE_V1 = 0x04;
export const HASH_SIZE = 32;
/** More than a log and its witnesses ever attach, and a bound on the work one note can cause. */
export const MAX_SIGNATURES = 100;
const TIME_LINE = /^time (0|[1-9][0-9]*)$/;
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
  publicKey: Uint8Array<ArrayBuffer>;
}

/** Parses `<name>+<hex key id>+<base64(type ‖ 32-byte Ed25519 key)>` for one signature type. */
export function parseVerifierKeyText(vkey: string, type: number): VerifierKeyParts {
  const what = type === ED25519 ? 'vkey' : 'witness vkey';
  // split at the first two '+': the base64 may contain '+' itself
  const first = vkey.indexOf('+');
  const second = vkey.indexOf('+', first + 1);
  const name = vkey.slice(0, first);
  const id = vkey.slice(first + 1, second);
  if (first < 0 || second < 0 || !isValidKeyName(name) || !/^[0-9a-f]{8}$/.test(id))
    fail('invalid_argument', `a ${what} is <name>+<8 hex digits>+<base64 key>`);
  const material = decodeBase64(vkey.slice(second + 1));
  if (material?.length !== 33 || material[0] !== type)
    fail(
      'invalid_argument',
      `the ${what} is not a 32-byte Ed25519 key of type 0x0${type} (${type === ED25519 ? 'note' : 'cosignature/v1'})`,
    );
  return { name, keyId: Number.parseInt(id, 16), publicKey: material!.slice(1) };
}

export function formatVerifierKeyText(name: string, keyId: number, type: number, publicKey: Uint8Array): string {
  if (!isValidKeyName(name)) fail('invalid_argument', `invalid key name ${JSON.stringify(name)}`);
  if (publicKey.length !== 32) fail('invalid_argument', 'an Ed25519 public key is 32 bytes');
  const material = new Uint8Array(33);
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
    if (!Number.isSafeInteger(seconds * 1000)) fail('malformed_checkpoint', 'the time is out of range');
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

/** A cosignature's parts: the timestamp it states and the Ed25519 signature; undefined when it is not 72 bytes. */
export function cosignatureParts(signature: Uint8Array): { seconds: bigint; ed25519: Uint8Array } | undefined {
  if (signature.length !== 8 + 64) return undefined;
  return { seconds: new DataView(signature.buffer, signature.byteOffset, 8).getBigUint64(0), ed25519: signature.subarray(8) };
}
