/**
 * Witness cosignatures of checkpoints, C2SP tlog-cosignature (https://c2sp.org/tlog-cosignature)
 * with Ed25519, signature type 0x04 (`cosignature/v1`):
 *
 * - key id: SHA-256(name ‖ 0x0A ‖ 0x04 ‖ public key)[:4]; vkey `<name>+<hex id>+<base64(0x04 ‖ key)>`;
 * - signature line `— <name> base64(key id ‖ uint64 big-endian timestamp ‖ Ed25519 signature)`;
 * - the signed message: `cosignature/v1\ntime <timestamp>\n` and the whole checkpoint text.
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
  cosignatureParts,
  cosignedMessage,
  formatSignatureLine,
  formatVerifierKeyText,
  keyId,
  type NoteVerifier,
  type OpenedNote,
  parseKeyOfType,
  type SigningKey,
} from './checkpoint.ts';

/** `<name>+<hex key id>+<base64(0x04 ‖ public key)>`: what a log and a verifier are configured with. */
export function formatCosignerKey(name: string, publicKey: Uint8Array): string {
  checkKeyName(name);
  return formatVerifierKeyText(name, keyId(name, publicKey, COSIGNATURE_V1), COSIGNATURE_V1, publicKey);
}

export interface CosignatureVerifier extends NoteVerifier {
  /** The witness's vkey, as given. */
  vkey: string;
}

/** Parses a witness vkey (type 0x04), checking its key id against its name and key. */
export function parseCosignerKey(vkey: string): CosignatureVerifier {
  const { name, keyId: id, publicKey, key } = parseKeyOfType(vkey, COSIGNATURE_V1);
  return {
    name,
    keyId: id,
    publicKey,
    vkey: vkey.trim(),
    verify(text, signature) {
      const parts = cosignatureParts(signature);
      // the spec forbids omitting the time on a checkpoint cosignature
      return (
        parts !== undefined && parts.seconds > 0n && verify(null, Buffer.from(cosignedMessage(text, parts.seconds)), key, parts.ed25519)
      );
    },
  };
}

/** One cosignature line (`— <name> <base64>\n`) on the checkpoint text, timestamped `time`. */
export function cosignatureLine(key: SigningKey, name: string, text: string, time: Date): string {
  const seconds = BigInt(Math.floor(time.getTime() / 1000));
  const signature = Buffer.alloc(8 + 64);
  signature.writeBigUInt64BE(seconds, 0);
  sign(null, Buffer.from(cosignedMessage(text, seconds), 'utf8'), key.privateKey).copy(signature, 8);
  return formatSignatureLine(name, keyId(name, key.publicKey, COSIGNATURE_V1), signature);
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

/** The policy from witness vkeys and k (default: all of them). */
export function witnessPolicy(vkeys: readonly string[], quorum = vkeys.length): WitnessPolicy {
  const witnesses = vkeys.map(parseCosignerKey);
  if (new Set(witnesses.map((w) => `${w.name}+${w.keyId}`)).size !== witnesses.length)
    throw new AuditProofError('invalid_argument', 'the same witness key is given twice');
  if (!Number.isSafeInteger(quorum) || quorum < 0 || quorum > witnesses.length)
    throw new AuditProofError('invalid_argument', `a witness quorum is between 0 and the ${witnesses.length} witness keys given`);
  return { witnesses, quorum };
}

/** The witnesses of the policy whose cosignatures verified on an opened note (see openNote). */
export function cosignersOf(opened: OpenedNote, policy: WitnessPolicy): CosignatureVerifier[] {
  return policy.witnesses.filter((w) => opened.verified.some((s) => s.name === w.name && s.keyId === w.keyId));
}

/** Whether these cosigners meet the policy: k of its witnesses, and its rule over groups when it has one. */
export const quorumOf = (policy: WitnessPolicy, cosigners: readonly CosignatureVerifier[]): boolean =>
  cosigners.length >= policy.quorum && (policy.met === undefined || policy.met(cosigners));

/** Throws `unwitnessed` unless the opened note carries the policy's quorum of cosignatures. */
export function requireQuorum(opened: OpenedNote, policy: WitnessPolicy): CosignatureVerifier[] {
  const cosigners = cosignersOf(opened, policy);
  if (!quorumOf(policy, cosigners))
    throw new AuditProofError(
      'unwitnessed',
      `the checkpoint's ${cosigners.length} witness cosignatures do not meet the policy's quorum (${policy.met ? 'its groups' : `${policy.quorum} of ${policy.witnesses.length}`})`,
    );
  return cosigners;
}
