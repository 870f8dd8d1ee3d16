/**
 * Verification of signed checkpoints with the log's verifier key and, optionally, a witness
 * policy (k of n witness keys), on Web Crypto only.
 *
 * - Checkpoints are C2SP tlog-checkpoints (https://c2sp.org/tlog-checkpoint) signed as C2SP
 *   signed notes (https://c2sp.org/signed-note) with Ed25519 (type 0x01); the time the log signed
 *   is the extension line `time <POSIX seconds>`.
 * - Witness cosignatures are C2SP tlog-cosignatures (https://c2sp.org/tlog-cosignature), Ed25519
 *   `cosignature/v1` (type 0x04): signature `uint64 timestamp ‖ Ed25519 signature` over
 *   `cosignature/v1\ntime <timestamp>\n` and the checkpoint text. With a policy, a checkpoint
 *   short of `quorum` distinct witnesses is refused (`unwitnessed`): a log that shows two
 *   histories then needs that many witness keys as well as its own.
 */
import { concat, decodeBase64, encoder, fail, HASH_SIZE, sha256 } from './audit-proofs.js';

const ED25519 = 0x01;
const COSIGNATURE_V1 = 0x04;
const MAX_SIGNATURES = 100;

export interface VerifiedCheckpoint {
  /** The log's identity, e.g. `warden/audit/<workspace id>`. */
  origin: string;
  /** Number of events in the tree. */
  size: number;
  rootHash: Uint8Array;
  /** When the log signed the checkpoint, to the second (absent if the checkpoint carries no time). */
  time: Date | undefined;
  /** Extension lines other than the time line. */
  extensions: string[];
  /** The signed text (final newline included). */
  text: string;
  /** Name and key id of the key whose signature verified. */
  keyName: string;
  keyId: number;
  /** The policy's witnesses whose cosignatures verified, with the time each states it saw the checkpoint. */
  cosignatures: { name: string; keyId: number; time: Date }[];
}

export interface VerifyCheckpointOptions {
  /** Rejects (`origin_mismatch`) a checkpoint of another log. */
  origin?: string;
  /**
   * Witness vkeys `<name>+<key id>+<base64(0x04 ‖ key)>` (GET /audit/signing-key `witnesses`):
   * the checkpoint must carry cosignatures by `quorum` of them, else `unwitnessed`.
   */
  witnesses?: readonly string[];
  /** How many of `witnesses` must have cosigned (default: all of them). */
  quorum?: number;
}

interface Verifier {
  name: string;
  keyId: number;
  key: CryptoKey;
  type: typeof ED25519 | typeof COSIGNATURE_V1;
}

/** Control characters other than newline, or lone surrogates (the note would not be valid UTF-8). */
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

const isValidKeyName = (name: string) => name.length > 0 && !/[\s\u0085+]/u.test(name) && !hasForbiddenCharacter(name);

async function keyIdOf(name: string, type: number, publicKey: Uint8Array): Promise<number> {
  const digest = await sha256(concat(encoder.encode(name), Uint8Array.of(0x0a, type), publicKey));
  return new DataView(digest.buffer).getUint32(0);
}

/** `<name>+<hex key id>+<base64(type ‖ Ed25519 public key)>`, checked against its key id. */
async function parseVerifierKey(vkey: string, type: Verifier['type']): Promise<Verifier> {
  const what = type === ED25519 ? 'vkey' : 'witness vkey';
  const first = vkey.indexOf('+');
  const second = vkey.indexOf('+', first + 1);
  const name = vkey.slice(0, first);
  const id = vkey.slice(first + 1, second);
  if (first < 0 || second < 0 || !isValidKeyName(name) || !/^[0-9a-f]{8}$/.test(id))
    fail('invalid_argument', `a ${what} is <name>+<8 hex digits>+<base64 key>`);
  const material = decodeBase64(vkey.slice(second + 1));
  if (material?.length !== 33 || material[0] !== type)
    fail('invalid_argument', `the ${what} is not an Ed25519 key of type 0x0${type} (${type === ED25519 ? 'note' : 'cosignature/v1'})`);
  const publicKey = material.slice(1);
  const keyId = await keyIdOf(name, type, publicKey);
  if (keyId !== Number.parseInt(id, 16)) fail('invalid_argument', `the ${what}’s key id does not match its name and key`);
  const key = await crypto.subtle.importKey('raw', publicKey, { name: 'Ed25519' }, false, ['verify']);
  return { name, keyId, key, type };
}

interface Verified {
  verifier: Verifier;
  /** For a cosignature: the time the witness states. */
  time?: Date;
}

/** Whether one signature by `verifier` verifies on the note text (a cosignature: over its timestamped message). */
async function verifies(verifier: Verifier, signature: Uint8Array<ArrayBuffer>, text: string): Promise<Verified | undefined> {
  if (verifier.type === ED25519) {
    const ok = signature.length === 64 && (await crypto.subtle.verify('Ed25519', verifier.key, signature, encoder.encode(text)));
    return ok ? { verifier } : undefined;
  }
  if (signature.length !== 72) return undefined;
  const seconds = new DataView(signature.buffer, signature.byteOffset).getBigUint64(0);
  const message = encoder.encode(`cosignature/v1\ntime ${seconds}\n${text}`);
  const ok = seconds > 0n && (await crypto.subtle.verify('Ed25519', verifier.key, signature.slice(8), message));
  return ok ? { verifier, time: new Date(Number(seconds) * 1000) } : undefined;
}

/** Splits and checks a signed note; verifies every signature by a given key (others are ignored, as signed-note requires). */
async function openNote(note: string, verifiers: Verifier[]): Promise<{ text: string; verified: Verified[] }> {
  if (hasForbiddenCharacter(note)) fail('malformed_note', 'the note has a control character or is not UTF-8');
  const split = note.lastIndexOf('\n\n');
  if (split < 0) fail('malformed_note', 'no blank line before the signatures');
  const text = note.slice(0, split + 1);
  const block = note.slice(split + 2);
  if (block.length === 0 || !block.endsWith('\n')) fail('malformed_note', 'the signatures must end with a newline');
  const lines = block.slice(0, -1).split('\n');
  if (lines.length > MAX_SIGNATURES) fail('malformed_note', `more than ${MAX_SIGNATURES} signatures`);
  const verified: Verified[] = [];
  for (const line of lines) {
    if (!line.startsWith('\u2014 ')) fail('malformed_note', 'a signature line must start with "— "');
    const rest = line.slice(2);
    const space = rest.indexOf(' ');
    const name = rest.slice(0, space);
    const bytes = space < 0 ? undefined : decodeBase64(rest.slice(space + 1));
    if (!isValidKeyName(name) || bytes === undefined || bytes.length < 5) fail('malformed_note', 'malformed signature line');
    const id = new DataView(bytes.buffer).getUint32(0);
    const verifier = verifiers.find((v) => v.name === name && v.keyId === id);
    if (verifier === undefined) continue;
    const ok = await verifies(verifier, bytes.slice(4), text);
    if (!ok) fail('bad_signature', `the signature by ${name} does not verify`);
    if (!verified.some((v) => v.verifier === verifier)) verified.push(ok);
  }
  return { text, verified };
}

/**
 * Verifies a signed checkpoint with the log's verifier key(s) and, with `witnesses`, its witness
 * cosignatures; returns its contents. Trust nothing in the note before this returns.
 *
 * @param note the checkpoint as served (a C2SP signed note).
 * @param vkey the log's verifier key `<name>+<key id>+<key>` (from the API or configuration);
 *   several during a key rotation.
 * @throws AuditProofError `invalid_argument` (bad vkey or policy), `malformed_note`,
 *   `unknown_key`, `bad_signature`, `unwitnessed`, `malformed_checkpoint` or `origin_mismatch`.
 */
export async function verifyCheckpoint(
  note: string,
  vkey: string | readonly string[],
  options: VerifyCheckpointOptions = {},
): Promise<VerifiedCheckpoint> {
  const vkeys: readonly string[] = typeof vkey === 'string' ? [vkey] : vkey;
  if (vkeys.length === 0) fail('invalid_argument', 'no vkey given');
  const logKeys = await Promise.all(vkeys.map((k) => parseVerifierKey(k, ED25519)));
  const witnessKeys = await Promise.all((options.witnesses ?? []).map((k) => parseVerifierKey(k, COSIGNATURE_V1)));
  if (new Set(witnessKeys.map((w) => `${w.name}+${w.keyId}`)).size !== witnessKeys.length)
    fail('invalid_argument', 'the same witness key is given twice');
  const quorum = options.quorum ?? witnessKeys.length;
  if (!Number.isSafeInteger(quorum) || quorum < 0 || quorum > witnessKeys.length)
    fail('invalid_argument', `quorum must be between 0 and the ${witnessKeys.length} witnesses given`);

  const { text, verified } = await openNote(note, [...logKeys, ...witnessKeys]);
  const signer = verified.find((v) => v.verifier.type === ED25519)?.verifier;
  if (signer === undefined) fail('unknown_key', 'the note has no signature by the given key');
  const cosignatures = verified
    .filter((v) => v.verifier.type === COSIGNATURE_V1)
    .map((v) => ({ name: v.verifier.name, keyId: v.verifier.keyId, time: v.time! }));
  if (cosignatures.length < quorum)
    fail('unwitnessed', `the checkpoint has ${cosignatures.length} of the ${quorum} witness cosignatures required`);

  const lines = text.slice(0, -1).split('\n');
  const [origin, sizeLine, rootLine] = lines;
  if (origin === undefined || sizeLine === undefined || rootLine === undefined || lines.some((line) => line.length === 0))
    fail('malformed_checkpoint', 'a checkpoint has at least three non-empty lines');
  if (!/^(0|[1-9][0-9]*)$/.test(sizeLine) || !Number.isSafeInteger(Number(sizeLine)))
    fail('malformed_checkpoint', 'the size line is not a decimal integer without leading zeroes (or is too large)');
  const rootHash = decodeBase64(rootLine);
  if (rootHash?.length !== HASH_SIZE) fail('malformed_checkpoint', 'the root hash line is not a base64 SHA-256 hash');
  let time: Date | undefined;
  const extensions: string[] = [];
  for (const line of lines.slice(3)) {
    const match = /^time (0|[1-9][0-9]*)$/.exec(line);
    if (match === null) {
      extensions.push(line);
      continue;
    }
    if (time !== undefined) fail('malformed_checkpoint', 'more than one time line');
    const seconds = Number(match[1]);
    if (!Number.isSafeInteger(seconds * 1000)) fail('malformed_checkpoint', 'the time is out of range');
    time = new Date(seconds * 1000);
  }
  if (options.origin !== undefined && origin !== options.origin)
    fail('origin_mismatch', `the checkpoint is from ${JSON.stringify(origin)}`);
  return { origin, size: Number(sizeLine), rootHash, time, extensions, text, keyName: signer.name, keyId: signer.keyId, cosignatures };
}
