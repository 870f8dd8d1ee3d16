/** The one error of the audit log verifiers and formats (audit-format.ts, audit-checkpoints.ts, audit-proofs.ts). */

export type AuditProofErrorCode =
  /** An argument is not what the function takes (a vkey, a hash, a size, an index). */
  | 'invalid_argument'
  /** The text is not a signed note. */
  | 'malformed_note'
  /** The note has no signature by the given key(s). */
  | 'unknown_key'
  /** A signature by the given key does not verify: the note was altered or forged. */
  | 'bad_signature'
  /** The checkpoint lacks the witness cosignatures the policy requires (`witnesses`, `quorum`). */
  | 'unwitnessed'
  /** The signed text is not a checkpoint. */
  | 'malformed_checkpoint'
  /** The checkpoint is from another log than the `origin` asked for. */
  | 'origin_mismatch'
  /** The proof has the wrong number of hashes for the sizes (and index) given. */
  | 'invalid_proof'
  /** The proof does not lead to the expected root hash(es). */
  | 'root_mismatch';

/** Thrown by the audit proof verifiers; branch on `code`. */
export class AuditProofError extends Error {
  override readonly name = 'AuditProofError';
  readonly code: AuditProofErrorCode;

  constructor(code: AuditProofErrorCode, message: string) {
    super(message);
    this.code = code;
  }
}

export function isAuditProofError(value: unknown): value is AuditProofError {
  return value instanceof AuditProofError;
}
