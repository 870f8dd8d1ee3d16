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
import { AuditProofError } from './audit-errors.js';
import {
  COSIGNATURE_V1,
  cosignatureParts,
  cosignedMessage,
  ED25519,
  keyIdInput,
  keyIdOf,
  parseCheckpointText,
  parseVerifierKeyText,
  splitNote,
} from './audit-format.js';
import { sha256 } from './audit-proofs.js';

const encoder = new TextEncoder();
const fail = (code: ConstructorParameters<typeof AuditProofError>[0], message: string): never => {
  throw new AuditProofError(code, message);
};

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

/** A verifier key, its key id checked against its name and key. */
async function parseVerifierKey(vkey: string, type: Verifier['type']): Promise<Verifier> {
  const { name, keyId, publicKey } = parseVerifierKeyText(vkey, type);
  if (keyIdOf(await sha256(keyIdInput(name, type, publicKey))) !== keyId)
    fail('invalid_argument', `the ${type === ED25519 ? 'vkey' : 'witness vkey'}’s key id does not match its name and key`);
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
  const parts = cosignatureParts(signature);
  if (!parts || parts.seconds === 0n) return undefined; // a checkpoint's cosignature always states its time
  const ok = await crypto.subtle.verify(
    'Ed25519',
    verifier.key,
    parts.ed25519.slice(),
    encoder.encode(cosignedMessage(text, parts.seconds)),
  );
  return ok ? { verifier, time: new Date(Number(parts.seconds) * 1000) } : undefined;
}

/** Verifies every signature of the note by a given key (those by other keys are ignored, as signed-note requires). */
async function openNote(note: string, verifiers: Verifier[]): Promise<{ text: string; verified: Verified[] }> {
  const { text, signatures } = splitNote(note);
  const verified: Verified[] = [];
  for (const { name, keyId, signature } of signatures) {
    const verifier = verifiers.find((v) => v.name === name && v.keyId === keyId);
    if (verifier === undefined) continue;
    const ok = await verifies(verifier, signature, text);
    if (!ok) fail('bad_signature', `the signature by ${name} does not verify`);
    if (!verified.some((v) => v.verifier === verifier)) verified.push(ok!);
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

  const { origin, size, rootHash, time, extensions } = parseCheckpointText(text);
  if (options.origin !== undefined && origin !== options.origin)
    fail('origin_mismatch', `the checkpoint is from ${JSON.stringify(origin)}`);
  return { origin, size, rootHash, time, extensions, text, keyName: signer!.name, keyId: signer!.keyId, cosignatures };
}
