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
  CheckpointError,
  checkKeyName,
  decodeBase64,
  hex32,
  isValidKeyName,
  keyId,
  type NoteVerifier,
  type OpenedNote,
  publicKeyObject,
  type SigningKey,
  splitKey,
} from './checkpoint.ts';

export const COSIGNATURE_V1 = 0x04;
const TIMESTAMP_SIZE = 8;
const SIGNATURE_SIZE = 64;

const message = (text: string, seconds: bigint) => Buffer.from(`cosignature/v1\ntime ${seconds}\n${text}`, 'utf8');

/** `<name>+<hex key id>+<base64(0x04 ‖ public key)>`: what a log and a verifier are configured with. */
export function formatCosignerKey(name: string, publicKey: Uint8Array): string {
  checkKeyName(name);
  if (publicKey.length !== 32) throw new CheckpointError('invalid_key', 'an Ed25519 public key is 32 bytes');
  const material = Buffer.concat([Uint8Array.of(COSIGNATURE_V1), publicKey]).toString('base64');
  return `${name}+${hex32(keyId(name, publicKey, COSIGNATURE_V1))}+${material}`;
}

export interface CosignatureVerifier extends NoteVerifier {
  /** The witness's vkey, as given. */
  vkey: string;
}

/** Parses a witness vkey (type 0x04), checking its key id against its name and key. */
export function parseCosignerKey(vkey: string): CosignatureVerifier {
  const parts = splitKey(vkey.trim());
  if (parts === undefined || !isValidKeyName(parts[0]) || !/^[0-9a-f]{8}$/.test(parts[1]))
    throw new CheckpointError('invalid_key', 'a witness vkey is <name>+<8 hex digits>+<base64 key>');
  const [name, id, material] = parts;
  const bytes = decodeBase64(material);
  if (bytes === undefined || bytes.length !== 33 || bytes[0] !== COSIGNATURE_V1)
    throw new CheckpointError('invalid_key', 'the witness vkey is not a 32-byte Ed25519 cosignature/v1 key (type 0x04)');
  const publicKey = bytes.subarray(1);
  if (keyId(name, publicKey, COSIGNATURE_V1) !== Number.parseInt(id, 16))
    throw new CheckpointError('invalid_key', 'the witness vkey’s key id does not match its name and key');
  const key = publicKeyObject(publicKey);
  return {
    name,
    keyId: Number.parseInt(id, 16),
    publicKey,
    vkey: vkey.trim(),
    verify(text, signature) {
      if (signature.length !== TIMESTAMP_SIZE + SIGNATURE_SIZE) return false;
      const seconds = Buffer.from(signature).readBigUInt64BE(0);
      // the spec forbids omitting the time on a checkpoint cosignature
      return seconds > 0n && verify(null, message(text, seconds), key, signature.subarray(TIMESTAMP_SIZE));
    },
  };
}

/** One cosignature line (`— <name> <base64>\n`) on the checkpoint text, timestamped `time`. */
export function cosignatureLine(key: SigningKey, name: string, text: string, time: Date): string {
  const seconds = BigInt(Math.floor(time.getTime() / 1000));
  const head = Buffer.alloc(4 + TIMESTAMP_SIZE);
  head.writeUInt32BE(keyId(name, key.publicKey, COSIGNATURE_V1), 0);
  head.writeBigUInt64BE(seconds, 4);
  const signature = sign(null, message(text, seconds), key.privateKey);
  return `\u2014 ${name} ${Buffer.concat([head, signature]).toString('base64')}\n`;
}

/** k of n witness keys: a checkpoint is trusted with at least `quorum` of their cosignatures. */
export interface WitnessPolicy {
  witnesses: CosignatureVerifier[];
  quorum: number;
}

/** The policy from witness vkeys and k (default: all of them). */
export function witnessPolicy(vkeys: readonly string[], quorum = vkeys.length): WitnessPolicy {
  const witnesses = vkeys.map(parseCosignerKey);
  if (new Set(witnesses.map((w) => `${w.name}+${w.keyId}`)).size !== witnesses.length)
    throw new CheckpointError('invalid_key', 'the same witness key is given twice');
  if (!Number.isSafeInteger(quorum) || quorum < 0 || quorum > witnesses.length)
    throw new CheckpointError('invalid_key', `a witness quorum is between 0 and the ${witnesses.length} witness keys given`);
  return { witnesses, quorum };
}

/** The witnesses of the policy whose cosignatures verified on an opened note (see openNote). */
export function cosignersOf(opened: OpenedNote, policy: WitnessPolicy): CosignatureVerifier[] {
  return policy.witnesses.filter((w) => opened.verified.some((s) => s.name === w.name && s.keyId === w.keyId));
}

/** Throws `unwitnessed` unless the opened note carries the policy's quorum of cosignatures. */
export function requireQuorum(opened: OpenedNote, policy: WitnessPolicy): CosignatureVerifier[] {
  const cosigners = cosignersOf(opened, policy);
  if (cosigners.length < policy.quorum)
    throw new CheckpointError(
      'unwitnessed',
      `the checkpoint has ${cosigners.length} of the ${policy.quorum} witness cosignatures the policy requires`,
    );
  return cosigners;
}
