/**
 * Verification of signed checkpoints with the log's verifier key and, optionally, a witness
 * policy (k of n witness keys), in any JavaScript runtime (Web Crypto, and for ML-DSA-44
 * @noble/post-quantum, which browsers need: their Web Crypto has no ML-DSA yet).
 *
 * - Checkpoints are C2SP tlog-checkpoints (https://c2sp.org/tlog-checkpoint) signed as C2SP
 *   signed notes (https://c2sp.org/signed-note), by the log with Ed25519 (type 0x01: over the
 *   whole text, so also the extension line `time <POSIX seconds>`) and/or with ML-DSA-44 (type
 *   0x06, tlog-checkpoint's SHOULD: a timestamped `subtree/v1` signature over origin, size and
 *   root; the text may then carry no extension line but the time it signs).
 * - Witness cosignatures are C2SP tlog-cosignatures (https://c2sp.org/tlog-cosignature): Ed25519
 *   `cosignature/v1` (type 0x04), `uint64 timestamp ‖ Ed25519 signature` over
 *   `cosignature/v1\ntime <timestamp>\n` and the checkpoint text, or ML-DSA-44 (type 0x06). With
 *   a policy, a checkpoint short of `quorum` distinct witnesses (by name: one witness's two keys
 *   count once) is refused (`unwitnessed`): a log that shows two histories then needs that many
 *   witness keys as well as its own.
 */
import { ml_dsa44 } from '@noble/post-quantum/ml-dsa.js';
import { AuditProofError } from './audit-errors.js';
import {
  type CheckpointText,
  COSIGNATURE_V1,
  cosignedMessage,
  ED25519,
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
  /** Name and key id of the log key whose signature verified (the first given, when several did). */
  keyName: string;
  keyId: number;
  /** The policy's witnesses whose cosignatures verified, with the time each states it saw the checkpoint. */
  cosignatures: { name: string; keyId: number; time: Date }[];
}

export interface VerifyCheckpointOptions {
  /** Rejects (`origin_mismatch`) a checkpoint of another log. */
  origin?: string;
  /**
   * Witness vkeys `<name>+<key id>+<base64(type ‖ key)>`, Ed25519 (0x04) or ML-DSA-44 (0x06)
   * (GET /audit/signing-key `witnesses`): the checkpoint must carry cosignatures by `quorum`
   * of them, else `unwitnessed`.
   */
  witnesses?: readonly string[];
  /** How many distinct witnesses must have cosigned (default: all of them). */
  quorum?: number;
}

type Role = 'log' | 'witness';
const TYPES: Record<Role, readonly SignatureType[]> = { log: [ED25519, ML_DSA_44], witness: [COSIGNATURE_V1, ML_DSA_44] };

interface Verifier {
  name: string;
  keyId: number;
  type: SignatureType;
  role: Role;
  publicKey: Uint8Array<ArrayBuffer>;
  /** The Web Crypto key, for Ed25519. */
  key?: CryptoKey;
}

/** A verifier key, its key id checked against its name and key. */
async function parseVerifierKey(vkey: string, role: Role): Promise<Verifier> {
  const { name, keyId, type, publicKey } = parseVerifierKeyText(vkey, TYPES[role]);
  if (keyIdOf(await sha256(keyIdInput(name, type, publicKey))) !== keyId)
    fail('invalid_argument', `the ${role === 'log' ? 'vkey' : 'witness vkey'}’s key id does not match its name and key`);
  const key = type === ML_DSA_44 ? undefined : await crypto.subtle.importKey('raw', publicKey, { name: 'Ed25519' }, false, ['verify']);
  return { name, keyId, type, role, publicKey, ...(key ? { key } : {}) };
}

interface Verified {
  verifier: Verifier;
  /** For a cosignature: the time the witness states. */
  time?: Date;
}

/**
 * Whether one signature by `verifier` verifies on the note text (a timestamped one: over its
 * message); `checkpoint` is the text parsed, undefined when it is no checkpoint (then no ML-DSA-44
 * signature, which signs a checkpoint's parts, can be over it).
 */
async function verifies(
  verifier: Verifier,
  signature: Uint8Array<ArrayBuffer>,
  text: string,
  checkpoint: () => CheckpointText | undefined,
): Promise<Verified | undefined> {
  if (verifier.type === ED25519) {
    const ok = signature.length === 64 && (await crypto.subtle.verify('Ed25519', verifier.key!, signature, encoder.encode(text)));
    return ok ? { verifier } : undefined;
  }
  const parts = timestampedParts(signature, verifier.type);
  // a witness's cosignature of a checkpoint always states its time
  if (!parts || (verifier.role === 'witness' && parts.seconds === 0n)) return undefined;
  if (verifier.type === COSIGNATURE_V1) {
    const message = encoder.encode(cosignedMessage(text, parts.seconds));
    if (!(await crypto.subtle.verify('Ed25519', verifier.key!, parts.signature.slice(), message))) return undefined;
  } else {
    const parsed = checkpoint();
    if (parsed === undefined || (verifier.role === 'log' && unsignedLines(parsed, parts.seconds))) return undefined;
    if (!ml_dsa44.verify(parts.signature, subtreeMessage(verifier.name, parts.seconds, parsed), verifier.publicKey)) return undefined;
  }
  return verifier.role === 'witness' ? { verifier, time: new Date(Number(parts.seconds) * 1000) } : { verifier };
}

/** Verifies every signature of the note by a given key (those by other keys are ignored, as signed-note requires). */
async function openNote(note: string, verifiers: Verifier[]): Promise<{ text: string; verified: Verified[] }> {
  const { text, signatures } = splitNote(note);
  let parsed: CheckpointText | null | undefined;
  const checkpoint = () => {
    if (parsed === undefined) {
      try {
        parsed = parseCheckpointText(text);
      } catch {
        parsed = null;
      }
    }
    return parsed ?? undefined;
  };
  const verified: Verified[] = [];
  for (const { name, keyId, signature } of signatures) {
    const verifier = verifiers.find((v) => v.name === name && v.keyId === keyId);
    if (verifier === undefined) continue;
    const ok = await verifies(verifier, signature, text, checkpoint);
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
  const logKeys = await Promise.all(vkeys.map((k) => parseVerifierKey(k, 'log')));
  const witnessKeys = await Promise.all((options.witnesses ?? []).map((k) => parseVerifierKey(k, 'witness')));
  if (new Set(witnessKeys.map((w) => `${w.name}+${w.keyId}`)).size !== witnessKeys.length)
    fail('invalid_argument', 'the same witness key is given twice');
  // the log's own ML-DSA-44 line is a subtree/v1 signature like a witness's: never count it as one
  if (witnessKeys.some((w) => logKeys.some((log) => log.name === w.name)))
    fail('invalid_argument', 'a witness key is named as the log: the log cannot witness itself');
  const witnesses = new Set(witnessKeys.map((w) => w.name)).size;
  const quorum = options.quorum ?? witnesses;
  if (!Number.isSafeInteger(quorum) || quorum < 0 || quorum > witnesses)
    fail('invalid_argument', `quorum must be between 0 and the ${witnesses} witnesses given`);

  const { text, verified } = await openNote(note, [...logKeys, ...witnessKeys]);
  const signer = logKeys.find((key) => verified.some((v) => v.verifier === key));
  if (signer === undefined) fail('unknown_key', 'the note has no signature by the given key');
  const { origin, size, rootHash, time, extensions } = parseCheckpointText(text);
  const cosignatures = verified
    .filter((v) => v.verifier.role === 'witness' && v.verifier.name !== origin)
    .map((v) => ({ name: v.verifier.name, keyId: v.verifier.keyId, time: v.time! }));
  const witnessed = new Set(cosignatures.map((c) => c.name)).size;
  if (witnessed < quorum) fail('unwitnessed', `the checkpoint has ${witnessed} of the ${quorum} witness cosignatures required`);

  if (options.origin !== undefined && origin !== options.origin)
    fail('origin_mismatch', `the checkpoint is from ${JSON.stringify(origin)}`);
  return { origin, size, rootHash, time, extensions, text, keyName: signer!.name, keyId: signer!.keyId, cosignatures };
}
