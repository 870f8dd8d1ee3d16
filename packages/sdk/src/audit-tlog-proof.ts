/**
 * C2SP `tlog-proof` (c2sp.org/tlog-proof@v1): an event's inclusion in the log as one text file
 * that anyone verifies offline against the log's pinned key — the signed checkpoint (with its
 * witnesses' cosignatures), the event's index and the inclusion proof up to the checkpoint's root.
 * Warden puts the event's canonical bytes (the bytes its leaf hashes) in the `extra` line, so the
 * file proves the event itself: `extra` is not trusted as such, it is hashed and must reach the
 * signed root.
 */
import { AuditProofError } from './audit-errors.js';
import { decodeBase64, encodeBase64, HASH_SIZE } from './audit-format.js';
import { verifyInclusion } from './audit-proofs.js';
import { type ProveOptions, type VerifiedInclusion, verifyPinned } from './audit-prove.js';

export const TLOG_PROOF_HEADER = 'c2sp.org/tlog-proof@v1';
/** Larger is not a proof of this log (an event is bounded far below; a proof of 2^63 leaves has 63 hashes). */
const MAX_PROOF_BYTES = 1 << 20;

const hexToBytes = (hex: string) => Uint8Array.from(hex.match(/../g) ?? [], (pair) => Number.parseInt(pair, 16));
const bytesToHex = (bytes: Uint8Array) => Array.from(bytes, (byte) => byte.toString(16).padStart(2, '0')).join('');

/** The proof `warden.audit.prove` verified, as a tlog-proof file. */
export function formatTlogProof(inclusion: VerifiedInclusion): string {
  const leaf = new TextEncoder().encode(inclusion.leaf);
  return [
    TLOG_PROOF_HEADER,
    `extra ${encodeBase64(leaf)}`,
    `index ${inclusion.leafIndex}`,
    ...inclusion.proof.map((hash) => encodeBase64(hexToBytes(hash))),
    '',
    inclusion.note,
  ].join('\n');
}

const malformed = (why: string) => new AuditProofError('invalid_proof', `not a tlog-proof: ${why}`);

/**
 * Verifies a tlog-proof offline: the checkpoint with the pinned key (and witnesses, as
 * `prove` does) or a tlog-policy, then the event's bytes (the `extra` line, or `options.leaf`) up the proof to
 * its root. Answers what was proven; throws AuditProofError otherwise.
 */
export async function verifyTlogProof(
  proof: string,
  options: Omit<ProveOptions, 'waitMs'> & { leaf?: string },
): Promise<VerifiedInclusion> {
  if (typeof proof !== 'string' || proof.length > MAX_PROOF_BYTES) throw malformed('not a text of at most 1 MiB');
  const split = proof.indexOf('\n\n');
  if (split < 0) throw malformed('no empty line before the checkpoint');
  const lines = proof.slice(0, split).split('\n');
  const note = proof.slice(split + 2);
  if (lines.shift() !== TLOG_PROOF_HEADER) throw malformed(`the first line is not ${TLOG_PROOF_HEADER}`);
  let extra: Uint8Array | undefined;
  if (lines[0]?.startsWith('extra ')) {
    extra = decodeBase64(lines.shift()!.slice('extra '.length));
    if (!extra) throw malformed('its extra line is not base64');
  }
  const index = /^index (0|[1-9]\d{0,15})$/.exec(lines.shift() ?? '');
  if (!index) throw malformed('no index line');
  const hashes = lines.map((line) => {
    const hash = decodeBase64(line);
    if (!hash || hash.length !== HASH_SIZE) throw malformed('a proof line is not a base64 SHA-256 hash');
    return hash;
  });
  let leaf = options.leaf;
  if (leaf === undefined && extra) {
    try {
      // the bytes as they are: no BOM taken off, no invalid UTF-8 mended
      leaf = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(extra);
    } catch {
      throw malformed('its extra line is not UTF-8 text');
    }
  }
  if (leaf === undefined) throw new AuditProofError('invalid_argument', 'the proof carries no event bytes: give `leaf`');
  const checkpoint = await verifyPinned(note, options);
  const leafIndex = Number(index[1]);
  await verifyInclusion({ eventBytes: leaf, index: leafIndex, size: checkpoint.size, proof: hashes, rootHash: checkpoint.rootHash });
  let fields: unknown;
  try {
    fields = JSON.parse(leaf);
  } catch {
    throw malformed('the event bytes are not the JSON array of an event');
  }
  const eventId = Array.isArray(fields) && typeof fields[1] === 'string' ? fields[1] : '';
  return { eventId, leaf, leafIndex, checkpoint, proof: hashes.map(bytesToHex), note };
}
