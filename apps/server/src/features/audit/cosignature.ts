/**
 * Witness cosignatures of checkpoints, C2SP tlog-cosignature (https://c2sp.org/tlog-cosignature),
 * of either type, by the witness key's algorithm:
 *
 * - Ed25519, type 0x04 (`cosignature/v1`): the signed message is `cosignature/v1\ntime <timestamp>\n`
 *   and the whole checkpoint text;
 * - ML-DSA-44, type 0x06 (what the spec says new deployments SHOULD use): the binary `subtree/v1`
 *   message, which names the witness, the origin, the size and the root (not extension lines);
 * - key id: SHA-256(name ‖ 0x0A ‖ type ‖ public key)[:4]; vkey `<name>+<hex id>+<base64(type ‖ key)>`;
 * - signature line `— <name> base64(key id ‖ uint64 big-endian timestamp ‖ signature)`.
 *
 * A cosignature says: as of that time, this is the largest consistent tree the witness saw for
 * the origin. A witness policy (k of n witness keys) is what a verifier needs to rule out a split
 * view: a log that shows two histories needs k witnesses to sign both.
 */
import { sign, verify } from 'node:crypto';
import {
  AuditProofError,
  COSIGNATURE_V1,
  checkKeyName,
  cosignedMessage,
  formatSignatureLine,
  formatVerifierKeyText,
  keyId,
  ML_DSA_44,
  type NoteVerifier,
  type OpenedNote,
  parseKeyOfType,
  type SigningKey,
  signSubtree,
  timestamped,
  timestampedParts,
  verifiesSubtree,
  witnessKeyType,
} from './checkpoint.ts';

/** `<name>+<hex key id>+<base64(type ‖ public key)>`: what a log and a verifier are configured with. */
export function formatCosignerKey(name: string, publicKey: Uint8Array): string {
  checkKeyName(name);
  const type = witnessKeyType(publicKey);
  return formatVerifierKeyText(name, keyId(name, publicKey, type), type, publicKey);
}

export interface CosignatureVerifier extends NoteVerifier {
  /** The witness's vkey, as given. */
  vkey: string;
}

/** Parses a witness vkey (type 0x04 or 0x06), checking its key id against its name and key. */
export function parseCosignerKey(vkey: string): CosignatureVerifier {
  const { name, keyId: id, type, publicKey, key } = parseKeyOfType(vkey, [COSIGNATURE_V1, ML_DSA_44]);
  return {
    name,
    keyId: id,
    publicKey,
    vkey: vkey.trim(),
    verify(text, signature) {
      if (type === ML_DSA_44) return verifiesSubtree(key, name, text, signature, 'witness');
      const parts = timestampedParts(signature, COSIGNATURE_V1);
      // the spec forbids omitting the time on a checkpoint cosignature
      return (
        parts !== undefined && parts.seconds > 0n && verify(null, Buffer.from(cosignedMessage(text, parts.seconds)), key, parts.signature)
      );
    },
  };
}

/** One cosignature line (`— <name> <base64>\n`) on the checkpoint text, timestamped `time`, of the key's type. */
export function cosignatureLine(key: SigningKey, name: string, text: string, time: Date): string {
  const seconds = BigInt(Math.floor(time.getTime() / 1000));
  const signature =
    key.algorithm === 'ml-dsa-44'
      ? signSubtree(key, name, text, seconds)
      : timestamped(seconds, sign(null, Buffer.from(cosignedMessage(text, seconds), 'utf8'), key.privateKey));
  return formatSignatureLine(name, keyId(name, key.publicKey, witnessKeyType(key.publicKey)), signature);
}

/**
 * k of n witness keys: a checkpoint is trusted with at least `quorum` of their cosignatures —
 * or, from a C2SP tlog-policy, when its quorum over groups is `met` by those that cosigned.
 */
export interface WitnessPolicy {
  witnesses: CosignatureVerifier[];
  quorum: number;
  met?: (cosigners: readonly CosignatureVerifier[]) => boolean;
}

/** The policy from witness vkeys and k (default: all the witnesses they name). */
export function witnessPolicy(vkeys: readonly string[], quorum?: number): WitnessPolicy {
  const witnesses = vkeys.map(parseCosignerKey);
  quorum ??= distinct(witnesses);
  if (new Set(witnesses.map((w) => `${w.name}+${w.keyId}`)).size !== witnesses.length)
    throw new AuditProofError('invalid_argument', 'the same witness key is given twice');
  if (!Number.isSafeInteger(quorum) || quorum < 0 || quorum > distinct(witnesses))
    throw new AuditProofError('invalid_argument', `a witness quorum is between 0 and the ${distinct(witnesses)} witnesses given`);
  return { witnesses, quorum };
}

/** The witnesses of the policy whose cosignatures verified on an opened note (see openNote). */
export function cosignersOf(opened: OpenedNote, policy: WitnessPolicy): CosignatureVerifier[] {
  // a line under the checkpoint's origin is the log's own (its ML-DSA-44 one reads like a cosignature): never a witness's
  const origin = opened.text.slice(0, opened.text.indexOf('\n'));
  return policy.witnesses.filter((w) => w.name !== origin && opened.verified.some((s) => s.name === w.name && s.keyId === w.keyId));
}

/** How many witnesses cosigned: one witness's keys (Ed25519 and ML-DSA-44, while it moves) count once. */
const distinct = (cosigners: readonly CosignatureVerifier[]) => new Set(cosigners.map((c) => c.name)).size;

/** Whether these cosigners meet the policy: k of its witnesses, and its rule over groups when it has one. */
export const quorumOf = (policy: WitnessPolicy, cosigners: readonly CosignatureVerifier[]): boolean =>
  distinct(cosigners) >= policy.quorum && (policy.met === undefined || policy.met(cosigners));

/** Throws `unwitnessed` unless the opened note carries the policy's quorum of cosignatures. */
export function requireQuorum(opened: OpenedNote, policy: WitnessPolicy): CosignatureVerifier[] {
  const cosigners = cosignersOf(opened, policy);
  if (!quorumOf(policy, cosigners))
    throw new AuditProofError(
      'unwitnessed',
      `the checkpoint's ${distinct(cosigners)} witness cosignatures do not meet the policy's quorum (${policy.met ? 'its groups' : `${policy.quorum} of ${policy.witnesses.length}`})`,
    );
  return cosigners;
}
