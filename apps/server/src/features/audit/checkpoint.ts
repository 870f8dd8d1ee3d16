/**
 * Signed checkpoints of the audit Merkle tree, in the formats other transparency-log tooling
 * reads: a C2SP tlog-checkpoint body (https://c2sp.org/tlog-checkpoint) signed as a C2SP signed
 * note (https://c2sp.org/signed-note) with an Ed25519 key (signature type 0x01).
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
 * Key name: tlog-checkpoint says the signature's key name SHOULD be the origin; with one origin
 * per workspace, sign with `noteSigner(key, origin)` (the key id, and so the vkey, is then per
 * workspace, derived from the one public key).
 */
import { createHash, createPrivateKey, createPublicKey, generateKeyPairSync, type KeyObject, sign, verify } from 'node:crypto';

export const ED25519_SIGNATURE_TYPE = 0x01;
const EM_DASH_PREFIX = '\u2014 ';
/** More than a log and its witnesses ever attach, and a bound on the work one note can cause. */
const MAX_SIGNATURES = 100;
const ROOT_HASH_SIZE = 32;
const PKCS8_ED25519_PREFIX = Buffer.from('302e020100300506032b657004220420', 'hex');
const TIME_LINE = /^time (0|[1-9][0-9]*)$/;

export type CheckpointErrorCode =
  | 'invalid_key'
  | 'malformed_note'
  | 'unknown_key'
  | 'bad_signature'
  | 'malformed_checkpoint'
  | 'origin_mismatch'
  /** Fewer witness cosignatures than the policy's quorum. */
  | 'unwitnessed';

/** A note or checkpoint that cannot be formatted, parsed or verified; branch on `code`. */
export class CheckpointError extends Error {
  override readonly name = 'CheckpointError';
  constructor(
    readonly code: CheckpointErrorCode,
    message: string,
  ) {
    super(message);
  }
}

/** An Ed25519 key pair; `publicKey` is the 32-byte RFC 8032 encoding. */
export interface SigningKey {
  privateKey: KeyObject;
  publicKey: Buffer;
}

export interface NoteSigner {
  name: string;
  /** uint32 key id: SHA-256(name ‖ 0x0A ‖ 0x01 ‖ public key)[:4], big-endian. */
  keyId: number;
  publicKey: Buffer;
  /** `<name>+<hex key id>+<base64(0x01 ‖ public key)>`, what verifiers are configured with. */
  vkey: string;
  sign(text: string): Buffer;
}

export interface NoteVerifier {
  name: string;
  keyId: number;
  publicKey: Buffer;
  verify(text: string, signature: Uint8Array): boolean;
}

export interface NoteSignature {
  name: string;
  keyId: number;
  signature: Buffer;
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

export interface ParsedCheckpoint {
  origin: string;
  size: number;
  rootHash: Buffer;
  time: Date | undefined;
  /** Extension lines other than the time line. */
  extensions: string[];
}

// ---- keys ---------------------------------------------------------------------------------------

/** Whether the text has an ASCII control character other than newline, or a lone surrogate (not UTF-8). */
function hasForbiddenCharacter(text: string): boolean {
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
export function isValidKeyName(name: string): boolean {
  return name.length > 0 && !/[\s\u0085+]/u.test(name) && !hasForbiddenCharacter(name);
}

export function checkKeyName(name: string): void {
  if (!isValidKeyName(name)) throw new CheckpointError('invalid_key', `invalid key name ${JSON.stringify(name)}`);
}

/** SHA-256(name ‖ 0x0A ‖ type ‖ public key)[:4] as a uint32 (signed-note; type 0x01 Ed25519, 0x04 cosignature/v1). */
export function keyId(name: string, publicKey: Uint8Array, type = ED25519_SIGNATURE_TYPE): number {
  return createHash('sha256').update(name).update(Uint8Array.of(0x0a, type)).update(publicKey).digest().readUInt32BE(0);
}

export function hex32(id: number): string {
  return id.toString(16).padStart(8, '0');
}

export function formatVerifierKey(name: string, publicKey: Uint8Array): string {
  checkKeyName(name);
  if (publicKey.length !== 32) throw new CheckpointError('invalid_key', 'an Ed25519 public key is 32 bytes');
  return `${name}+${hex32(keyId(name, publicKey))}+${Buffer.concat([Uint8Array.of(ED25519_SIGNATURE_TYPE), publicKey]).toString('base64')}`;
}

/** Strict standard base64 (RFC 4648 §4, padded): what the formats specify, and one spelling per value. */
export function decodeBase64(text: string): Buffer | undefined {
  if (text.length % 4 !== 0 || !/^[A-Za-z0-9+/]*={0,2}$/.test(text)) return undefined;
  const bytes = Buffer.from(text, 'base64');
  return bytes.toString('base64') === text ? bytes : undefined;
}

export function publicKeyObject(publicKey: Uint8Array): KeyObject {
  return createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: Buffer.from(publicKey).toString('base64url') }, format: 'jwk' });
}

function verifierFor(name: string, publicKey: Buffer): NoteVerifier {
  const key = publicKeyObject(publicKey);
  return {
    name,
    keyId: keyId(name, publicKey),
    publicKey,
    verify: (text, signature) => signature.length === 64 && verify(null, Buffer.from(text, 'utf8'), key, signature),
  };
}

/** Splits `<name>+<id>+<base64>` at its first two '+' (base64 may itself contain '+'). */
export function splitKey(text: string): [name: string, id: string, material: string] | undefined {
  const first = text.indexOf('+');
  const second = text.indexOf('+', first + 1);
  if (first < 0 || second < 0) return undefined;
  return [text.slice(0, first), text.slice(first + 1, second), text.slice(second + 1)];
}

/** Parses a vkey, checking that its key id is the one its name and key give. */
export function parseVerifierKey(vkey: string): NoteVerifier {
  const parts = splitKey(vkey);
  if (parts === undefined || !isValidKeyName(parts[0]) || !/^[0-9a-f]{8}$/.test(parts[1]))
    throw new CheckpointError('invalid_key', 'a vkey is <name>+<8 hex digits>+<base64 key>');
  const [name, id, material] = parts;
  const bytes = decodeBase64(material);
  if (bytes === undefined || bytes.length !== 33 || bytes[0] !== ED25519_SIGNATURE_TYPE)
    throw new CheckpointError('invalid_key', 'the vkey is not a 32-byte Ed25519 key (type 0x01)');
  const verifier = verifierFor(name, bytes.subarray(1));
  if (verifier.keyId !== Number.parseInt(id, 16))
    throw new CheckpointError('invalid_key', 'the vkey’s key id does not match its name and key');
  return verifier;
}

function fromPrivateKey(privateKey: KeyObject): SigningKey {
  if (privateKey.asymmetricKeyType !== 'ed25519') throw new CheckpointError('invalid_key', 'the signing key is not an Ed25519 key');
  const jwk = createPublicKey(privateKey).export({ format: 'jwk' });
  return { privateKey, publicKey: Buffer.from(jwk.x!, 'base64url') };
}

function fromSeed(seed: Uint8Array): SigningKey {
  return fromPrivateKey(createPrivateKey({ key: Buffer.concat([PKCS8_ED25519_PREFIX, seed]), format: 'der', type: 'pkcs8' }));
}

export function generateSigningKey(): SigningKey {
  return fromPrivateKey(generateKeyPairSync('ed25519').privateKey);
}

/** The private key as one line (base64 PKCS#8 DER), for a secret store or an environment variable. */
export function exportSigningKey(key: SigningKey): string {
  return key.privateKey.export({ format: 'der', type: 'pkcs8' }).toString('base64');
}

/**
 * Loads an Ed25519 private key from a PKCS#8 PEM, base64 PKCS#8 DER (as {@link exportSigningKey}
 * writes), a base64 32-byte seed, or the signed-note private key of Go's golang.org/x/mod/sumdb/note
 * (`PRIVATE+KEY+<name>+<hex id>+<base64(0x01 ‖ seed)>`, whose id is checked).
 */
export function loadSigningKey(value: string): SigningKey {
  const text = value.trim();
  try {
    if (text.startsWith('-----BEGIN')) return fromPrivateKey(createPrivateKey({ key: text, format: 'pem' }));
    if (text.startsWith('PRIVATE+KEY+')) {
      const parts = splitKey(text.slice('PRIVATE+KEY+'.length));
      const bytes = parts === undefined ? undefined : decodeBase64(parts[2]);
      if (parts === undefined || bytes === undefined || bytes.length !== 33 || bytes[0] !== ED25519_SIGNATURE_TYPE)
        throw new CheckpointError('invalid_key', 'malformed signed-note private key');
      const key = fromSeed(bytes.subarray(1));
      if (parts[1] !== hex32(keyId(parts[0], key.publicKey)))
        throw new CheckpointError('invalid_key', 'the private key’s id does not match its name and key');
      return key;
    }
    const bytes = decodeBase64(text.replace(/\s+/g, ''));
    if (bytes?.length === 32) return fromSeed(bytes);
    if (bytes !== undefined) return fromPrivateKey(createPrivateKey({ key: bytes, format: 'der', type: 'pkcs8' }));
  } catch (error) {
    if (error instanceof CheckpointError) throw error;
  }
  throw new CheckpointError('invalid_key', 'not an Ed25519 private key (PEM, base64 PKCS#8, base64 seed or PRIVATE+KEY+…)');
}

/** A signer for notes under key name `name` (for checkpoints, the origin). */
export function noteSigner(key: SigningKey, name: string): NoteSigner {
  checkKeyName(name);
  return {
    name,
    keyId: keyId(name, key.publicKey),
    publicKey: key.publicKey,
    vkey: formatVerifierKey(name, key.publicKey),
    sign: (text) => sign(null, Buffer.from(text, 'utf8'), key.privateKey),
  };
}

// ---- signed notes -------------------------------------------------------------------------------

function checkNoteText(text: string): void {
  if (!text.endsWith('\n')) throw new CheckpointError('malformed_note', 'the note text must end with a newline');
  if (hasForbiddenCharacter(text)) throw new CheckpointError('malformed_note', 'the note text has a control character or is not UTF-8');
}

/** The signed note: the text, a blank line, then one signature line per signer. */
export function signNote(text: string, ...signers: NoteSigner[]): string {
  checkNoteText(text);
  if (signers.length === 0) throw new TypeError('signNote needs at least one signer');
  let note = `${text}\n`;
  for (const signer of signers) {
    const id = Buffer.alloc(4);
    id.writeUInt32BE(signer.keyId);
    note += `${EM_DASH_PREFIX}${signer.name} ${Buffer.concat([id, signer.sign(text)]).toString('base64')}\n`;
  }
  return note;
}

/**
 * Verifies a signed note: every signature by a given verifier must verify, and at least one must
 * be present; signatures by other keys are ignored (returned as `unverified`).
 */
export function openNote(note: string, verifiers: NoteVerifier | string | ReadonlyArray<NoteVerifier | string>): OpenedNote {
  const known = (Array.isArray(verifiers) ? verifiers : [verifiers]).map((v: NoteVerifier | string) =>
    typeof v === 'string' ? parseVerifierKey(v) : v,
  );
  if (hasForbiddenCharacter(note)) throw new CheckpointError('malformed_note', 'the note has a control character or is not UTF-8');
  // The text ends at the last blank line; what follows is the signature block.
  const split = note.lastIndexOf('\n\n');
  if (split < 0) throw new CheckpointError('malformed_note', 'no blank line before the signatures');
  const text = note.slice(0, split + 1);
  const block = note.slice(split + 2);
  if (block.length === 0 || !block.endsWith('\n')) throw new CheckpointError('malformed_note', 'the signatures must end with a newline');
  const lines = block.slice(0, -1).split('\n');
  if (lines.length > MAX_SIGNATURES) throw new CheckpointError('malformed_note', `more than ${MAX_SIGNATURES} signatures`);

  const verified: NoteSignature[] = [];
  const unverified: NoteSignature[] = [];
  const seen = new Set<string>();
  for (const line of lines) {
    if (!line.startsWith(EM_DASH_PREFIX)) throw new CheckpointError('malformed_note', 'a signature line must start with "— "');
    const rest = line.slice(EM_DASH_PREFIX.length);
    const space = rest.indexOf(' ');
    const name = rest.slice(0, space);
    const bytes = space < 0 ? undefined : decodeBase64(rest.slice(space + 1));
    if (!isValidKeyName(name) || bytes === undefined || bytes.length < 5)
      throw new CheckpointError('malformed_note', 'malformed signature line');
    const id = bytes.readUInt32BE(0);
    const signature: NoteSignature = { name, keyId: id, signature: bytes.subarray(4) };
    const verifier = known.find((v) => v.name === name && v.keyId === id);
    if (verifier === undefined) {
      unverified.push(signature);
      continue;
    }
    const identity = `${name}+${id}`;
    if (seen.has(identity)) continue;
    seen.add(identity);
    if (!verifier.verify(text, signature.signature)) throw new CheckpointError('bad_signature', `the signature by ${name} does not verify`);
    verified.push(signature);
  }
  if (verified.length === 0) throw new CheckpointError('unknown_key', 'the note has no signature by a known key');
  return { text, verified, unverified };
}

// ---- checkpoints --------------------------------------------------------------------------------

function checkLine(what: string, line: string): void {
  if (line.length === 0 || line.includes('\n') || hasForbiddenCharacter(line))
    throw new CheckpointError('malformed_checkpoint', `the ${what} must be one non-empty line without control characters`);
}

/** The tlog-checkpoint note text: origin, size, base64 root hash, then extension lines (time first). */
export function formatCheckpoint({ origin, size, rootHash, time, extensions = [] }: Checkpoint): string {
  checkLine('origin', origin);
  if (!Number.isSafeInteger(size) || size < 0) throw new CheckpointError('malformed_checkpoint', 'the size must be a non-negative integer');
  if (rootHash.length !== ROOT_HASH_SIZE)
    throw new CheckpointError('malformed_checkpoint', `the root hash must be ${ROOT_HASH_SIZE} bytes`);
  let text = `${origin}\n${size}\n${Buffer.from(rootHash).toString('base64')}\n`;
  if (time !== undefined) {
    const seconds = Math.floor(time.getTime() / 1000);
    if (!Number.isSafeInteger(seconds) || seconds < 0)
      throw new CheckpointError('malformed_checkpoint', 'the time must be a valid date after 1970');
    text += `time ${seconds}\n`;
  }
  for (const line of extensions) {
    checkLine('extension line', line);
    if (TIME_LINE.test(line)) throw new CheckpointError('malformed_checkpoint', 'pass the time as `time`, not as an extension line');
    text += `${line}\n`;
  }
  return text;
}

/** Parses a checkpoint note text (not its signatures: see {@link openCheckpoint}). */
export function parseCheckpoint(text: string): ParsedCheckpoint {
  if (!text.endsWith('\n') || hasForbiddenCharacter(text))
    throw new CheckpointError('malformed_checkpoint', 'a checkpoint is newline-terminated lines of text');
  const lines = text.slice(0, -1).split('\n');
  const [origin, sizeLine, rootLine] = lines;
  if (origin === undefined || sizeLine === undefined || rootLine === undefined || lines.some((line) => line.length === 0))
    throw new CheckpointError('malformed_checkpoint', 'a checkpoint has at least three non-empty lines');
  if (!/^(0|[1-9][0-9]*)$/.test(sizeLine) || !Number.isSafeInteger(Number(sizeLine)))
    throw new CheckpointError('malformed_checkpoint', 'the size line is not a decimal integer without leading zeroes (or is too large)');
  const rootHash = decodeBase64(rootLine);
  if (rootHash?.length !== ROOT_HASH_SIZE)
    throw new CheckpointError('malformed_checkpoint', 'the root hash line is not a base64 SHA-256 hash');
  let time: Date | undefined;
  const extensions: string[] = [];
  for (const line of lines.slice(3)) {
    const match = TIME_LINE.exec(line);
    if (match === null) {
      extensions.push(line);
      continue;
    }
    if (time !== undefined) throw new CheckpointError('malformed_checkpoint', 'more than one time line');
    const seconds = Number(match[1]);
    if (!Number.isSafeInteger(seconds * 1000)) throw new CheckpointError('malformed_checkpoint', 'the time is out of range');
    time = new Date(seconds * 1000);
  }
  return { origin, size: Number(sizeLine), rootHash, time, extensions };
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
    throw new CheckpointError('origin_mismatch', `the checkpoint is from ${JSON.stringify(checkpoint.origin)}`);
  return { ...checkpoint, note: opened };
}
