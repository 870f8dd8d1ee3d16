/**
 * A verifier of C2SP tlog-cosignature written in the tests from the spec alone (node:crypto, none
 * of the server's or the SDK's audit code): Ed25519 `cosignature/v1` (type 0x04) over
 * `cosignature/v1\ntime <t>\n` and the checkpoint text, and ML-DSA-44 (type 0x06) over the binary
 * `subtree/v1` message laid out field by field. Used to check what Warden's witness and log sign.
 */
import { createHash, createPublicKey, type KeyObject, verify } from 'node:crypto';

export const ED25519_SPKI_PREFIX = Buffer.from('302a300506032b6570032100', 'hex');
export const ML_DSA_44_SPKI_PREFIX = Buffer.from('30820532300b06096086480165030403110382052100', 'hex');

/** signed-note key id: SHA-256(name ‖ 0x0A ‖ type ‖ public key)[:4]. */
export const noteKeyId = (name: string, type: number, raw: Buffer) =>
  createHash('sha256')
    .update(`${name}\n`)
    .update(Buffer.from([type]))
    .update(raw)
    .digest()
    .subarray(0, 4);

export interface Cosigner {
  name: string;
  id: Buffer;
  type: 0x04 | 0x06;
  key: KeyObject;
}

/** Parses `<name>+<hex keyid>+<base64(type ‖ key)>` (0x04 Ed25519, 0x06 ML-DSA-44); throws when the key id is not the key's. */
export function parseCosignerVkey(vkey: string): Cosigner {
  // names have no '+', but base64 may: only the first two '+' separate the fields
  const [name, hex] = vkey.split('+', 2) as [string, string];
  const bytes = Buffer.from(vkey.slice(name.length + hex.length + 2), 'base64');
  const type = bytes[0];
  if ((type !== 0x04 || bytes.length !== 33) && (type !== 0x06 || bytes.length !== 1313)) throw new Error(`not a cosigner vkey: ${vkey}`);
  const raw = bytes.subarray(1);
  if (noteKeyId(name, type, raw).toString('hex') !== hex) throw new Error(`the key id of ${vkey} is not its key's`);
  const prefix = type === 0x04 ? ED25519_SPKI_PREFIX : ML_DSA_44_SPKI_PREFIX;
  return {
    name,
    id: Buffer.from(hex, 'hex'),
    type,
    key: createPublicKey({ key: Buffer.concat([prefix, raw]), format: 'der', type: 'spki' }),
  };
}

/** tlog-cosignature's ML-DSA-44 `cosigned_message` for a checkpoint text (start 0, end its size). */
export function subtreeMessage(signer: string, timestamp: bigint, text: string): Buffer {
  const [origin, size, root] = text.split('\n') as [string, string, string];
  const u8 = (n: number) => Buffer.from([n]);
  const u64 = (n: bigint) => {
    const out = Buffer.alloc(8);
    out.writeBigUInt64BE(n);
    return out;
  };
  return Buffer.concat([
    Buffer.from('subtree/v1\n\0', 'latin1'),
    u8(Buffer.byteLength(signer)),
    Buffer.from(signer),
    u64(timestamp),
    u8(Buffer.byteLength(origin)),
    Buffer.from(origin),
    u64(0n),
    u64(BigInt(size)),
    Buffer.from(root, 'base64'),
  ]);
}

/** What a cosignature of the cosigner's type at `timestamp` signs for the checkpoint `text`. */
export const cosignedMessage = (cosigner: Pick<Cosigner, 'name' | 'type'>, timestamp: bigint, text: string) =>
  cosigner.type === 0x04 ? Buffer.from(`cosignature/v1\ntime ${timestamp}\n${text}`) : subtreeMessage(cosigner.name, timestamp, text);

/** The cosigner's signature line on `note` checked: the timestamp it states when it verifies, else undefined. */
export function cosignatureTime(note: string, cosigner: Cosigner): bigint | undefined {
  const text = note.slice(0, note.lastIndexOf('\n\n') + 1);
  for (const line of note.split('\n').filter((l) => l.startsWith(`\u2014 ${cosigner.name} `))) {
    const bytes = Buffer.from(line.slice(`\u2014 ${cosigner.name} `.length), 'base64');
    if (bytes.length !== 4 + 8 + (cosigner.type === 0x04 ? 64 : 2420) || !bytes.subarray(0, 4).equals(cosigner.id)) continue;
    const timestamp = bytes.readBigUInt64BE(4);
    return verify(null, cosignedMessage(cosigner, timestamp, text), cosigner.key, bytes.subarray(12)) ? timestamp : undefined;
  }
  return undefined;
}
