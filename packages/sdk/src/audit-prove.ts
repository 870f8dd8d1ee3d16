/**
 * `warden.audit.prove(eventId, { publicKey })`: one call from an event id to its inclusion in
 * the log, verified against a pinned key — the latest signed checkpoint, checked with the key
 * you pinned; the inclusion proof asked for at exactly that checkpoint's size (so a checkpoint
 * signed meanwhile cannot make the two disagree); the event's bytes hashed here and carried up
 * the proof to the signed root. An event not sealed or not yet in a checkpoint is waited for,
 * bounded.
 */
import { type VerifiedCheckpoint, verifyCheckpoint } from './audit-checkpoints.js';
import { AuditProofError } from './audit-errors.js';
import { verifyInclusion } from './audit-proofs.js';
import { type TlogPolicy, verifyCheckpointWithPolicy } from './audit-tlog-policy.js';
import { WardenError } from './errors.js';
import type * as T from './generated/types.gen.js';

export interface ProveOptions {
  /**
   * The log's verifier key (`GET /audit/signing-key` → `verifier_key`), pinned: kept from
   * before, not fetched with the proof. Several during a key rotation.
   */
  publicKey?: string | readonly string[];
  /**
   * A C2SP tlog-policy (text or `parseTlogPolicy`'s result) in place of `publicKey`,
   * `witnesses` and `quorum`: the logs and witnesses trusted, and the quorum over groups.
   */
  policy?: string | TlogPolicy;
  /** Rejects (`origin_mismatch`) a checkpoint of another log, e.g. `warden/audit/<workspace id>`. */
  origin?: string;
  /** Witness vkeys (`GET /audit/signing-key` → `witnesses[].verifier_key`), pinned: the checkpoint must carry `quorum` of their cosignatures. */
  witnesses?: readonly string[];
  /** How many of `witnesses` must have cosigned (default: all). */
  quorum?: number;
  /** How long to wait for the event to be sealed and covered by a checkpoint (default 15 000 ms; events seal within about a second). */
  waitMs?: number;
}

export interface VerifiedInclusion {
  eventId: string;
  /** The event's canonical bytes (UTF-8 JSON array, see `AuditInclusionProof.leaf`), whose hash was verified into the root. */
  leaf: string;
  leafIndex: number;
  /** The checkpoint the event is proven in, its signature verified with the pinned key. */
  checkpoint: VerifiedCheckpoint;
  /** The inclusion proof (hex SHA-256 hashes, the leaf's sibling first), verified up to the checkpoint's root. */
  proof: string[];
  /** The checkpoint as the log signed it (its witnesses' cosignature lines included): what a tlog-proof file carries. */
  note: string;
}

/** What prove needs of the API. */
export interface ProofSource {
  checkpoint: () => Promise<T.AuditCheckpoint>;
  inclusionProof: (query: { event_id: string; tree_size: number }) => Promise<T.AuditInclusionProof>;
}

export const DEFAULT_PROVE_WAIT_MS = 15_000;
const POLL_MS = 250;

/** Not there yet: no checkpoint (404), the event not sealed (404) or not within the checkpoint (400). */
const notYet = (error: unknown) => error instanceof WardenError && (error.status === 404 || error.status === 400);

export async function prove(source: ProofSource, eventId: string, options: ProveOptions): Promise<VerifiedInclusion> {
  if (typeof eventId !== 'string' || eventId === '') throw new AuditProofError('invalid_argument', 'prove: an event id is required');
  if (!options?.policy && (!options?.publicKey || options.publicKey.length === 0))
    throw new AuditProofError('invalid_argument', 'prove: `publicKey`, the pinned verifier key, or a `policy` is required');
  const deadline = Date.now() + (options.waitMs ?? DEFAULT_PROVE_WAIT_MS);
  for (;;) {
    try {
      const served = await source.checkpoint();
      // The signature first: nothing of a checkpoint counts before the pinned key verified it.
      const checkpoint = await verifyPinned(served.note, options);
      const proof = await source.inclusionProof({ event_id: eventId, tree_size: checkpoint.size });
      if (proof.event_id !== eventId || proof.tree_size !== checkpoint.size)
        throw new AuditProofError(
          'invalid_proof',
          `the proof is of ${proof.event_id} in a tree of ${proof.tree_size}, not of ${eventId} in ${checkpoint.size}`,
        );
      if (leafEventId(proof.leaf) !== eventId) throw new AuditProofError('invalid_proof', 'the proof’s leaf is of another event');
      await verifyInclusion({
        eventBytes: proof.leaf,
        index: proof.leaf_index,
        size: checkpoint.size,
        proof: proof.proof,
        rootHash: checkpoint.rootHash,
      });
      return { eventId, leaf: proof.leaf, leafIndex: proof.leaf_index, checkpoint, proof: proof.proof, note: served.note };
    } catch (error) {
      if (!notYet(error) || Date.now() + POLL_MS > deadline) throw error;
      await new Promise((later) => setTimeout(later, POLL_MS));
    }
  }
}

/** A checkpoint verified as the options pin it: by a policy, or by keys, witnesses and quorum. */
export function verifyPinned(note: string, options: Omit<ProveOptions, 'waitMs'>): Promise<VerifiedCheckpoint> {
  const { origin, witnesses, quorum, policy, publicKey } = options;
  if (policy) {
    if (publicKey || witnesses || quorum !== undefined)
      throw new AuditProofError('invalid_argument', 'a policy names the keys: give it instead of publicKey, witnesses and quorum');
    return verifyCheckpointWithPolicy(note, policy, origin ? { origin } : {});
  }
  return verifyCheckpoint(note, publicKey ?? [], {
    ...(origin ? { origin } : {}),
    ...(witnesses ? { witnesses } : {}),
    ...(quorum !== undefined ? { quorum } : {}),
  });
}

/** The event id the leaf's bytes name (their second element). */
function leafEventId(leaf: string): unknown {
  try {
    const fields = JSON.parse(leaf) as unknown;
    return Array.isArray(fields) ? fields[1] : undefined;
  } catch {
    return undefined;
  }
}
