/**
 * The offline verifier behind `warden audit verify`: checks an export of a workspace's audit log
 * (audit-export.ts) against signed checkpoints, with nothing but the log's public key — no
 * database, no server. Every leaf is hashed from its bytes (never taken from the hash the export
 * claims) and the tree they make is compared with every checkpoint of the log, from the export
 * and from outside it. Whoever holds one checkpoint made before a tampering sees it here:
 * - a leaf whose bytes no longer give its recorded hash (an event rewritten, its hash left);
 * - a checkpoint whose root the export's leaves do not make (an event rewritten and every hash
 *   after it recomputed, or one removed from the middle and the rest moved down);
 * - a checkpoint larger than the export (the tail deleted, or the tree head rewound).
 *
 * Localisation: a signed root commits to its whole prefix and to nothing finer, so a root that
 * does not match says only that some leaf below its size differs, and the last checkpoint that
 * still matches says that none below its own size does. The first bad index is therefore bounded
 * to [last matching size, failing size − 1], and the report gives that range's start: exact when
 * checkpoints are one event apart, within the events signed between two checkpoints otherwise
 * (a checkpoint is made per interval, so the bound is what one interval wrote).
 *
 * Streaming: checkpoints are given first, then the events in order, so an export of any length
 * is verified in memory proportional to its checkpoints and log2 of its size (the tree's right
 * edge), never to its events.
 */
import { AuditProofError, formatVerifierKey, type NoteVerifier, openCheckpoint, parseVerifierKey } from './checkpoint.ts';
import { cosignersOf, quorumOf, type WitnessPolicy } from './cosignature.ts';
import { Frontier, leafHash } from './merkle.ts';

/** One line of an export (NDJSON), as `warden audit export` writes it, `type` first. */
export type ExportLine =
  | {
      type: 'log';
      /** `<log name>/audit/<workspace id>`: the checkpoints' origin and the verifier key's name. */
      origin: string;
      workspace_id: string;
      /** The tree head's size as the database holds it: the number of event lines that follow. */
      tree_size: number;
      /** The tree head's root (hex) as the database holds it: a claim, recomputed by the verifier. */
      root_hash: string;
      /** The signing key's vkey as the exporting side knows it (null when it has no key): a hint, never trusted. */
      verifier_key: string | null;
    }
  | {
      type: 'event';
      /** The leaf index (seal sequence − 1). */
      index: number;
      event_id: string;
      /** The canonical event bytes (tree.ts canonicalEvent); null when the sealed event's row is gone. */
      leaf: string | null;
      /** The leaf hash stored in its seal (hex). */
      leaf_hash: string;
    }
  | { type: 'checkpoint'; tree_size: number; note: string };

export type ProblemKind =
  /** A line of the export is not JSON or not an export line. */
  | 'malformed_line'
  /** The export is of another log than the key's. */
  | 'wrong_log'
  /** A checkpoint of this log that does not verify with the key (another key, or altered). */
  | 'bad_checkpoint'
  /** Two verified checkpoints of one size with different roots: the log signed two histories. */
  | 'fork'
  /** Nothing binds the export to the signed log: no checkpoint of it verified. */
  | 'no_checkpoint'
  /** The export skips a leaf index. */
  | 'gap'
  /** A sealed event whose row is gone (the export has its seal, not its bytes). */
  | 'missing_event'
  /** An event's bytes do not give its recorded leaf hash, or do not name the event. */
  | 'leaf_mismatch'
  /** The export's leaves do not make a signed root. */
  | 'root_mismatch'
  /** A signed checkpoint is larger than the export: events deleted, or the tree rewound. */
  | 'truncated'
  /** The export has fewer (or more) events than its header counts: the file was cut. */
  | 'incomplete_export';

export interface Problem {
  kind: ProblemKind;
  /** The first leaf index known or bounded to be bad (null when no index applies). */
  index: number | null;
  /** The last index of the range the bad index is bounded to (root mismatches, truncation); else null. */
  last_index: number | null;
  message: string;
}

export interface OfflineReport {
  valid: boolean;
  /** The log the key verifies, `<log name>/audit/<workspace id>`. */
  origin: string;
  workspace_id: string | null;
  /** Event lines read. */
  events: number;
  /** The size the export's header claims (null without a header). */
  tree_size: number | null;
  /** The root (hex) of the tree the export's leaves make. */
  root_hash: string;
  /** Distinct checkpoint sizes of this log that verified with the key. */
  checkpoints: number;
  /** Of the notes given from outside the export, those of this log that verified. */
  checkpoints_outside: number;
  /** With a witness policy: checkpoints of this log signed by its key but short of the quorum, not trusted. */
  checkpoints_unwitnessed: number;
  /** The witness policy applied: k of n (null: none given, every signed checkpoint is trusted). */
  witness_policy: { quorum: number; witnesses: string[] } | null;
  /** Notes of other logs (other workspaces in a shared checkpoint file), skipped. */
  other_logs: number;
  /** The largest checkpoint size up to which every checkpoint matches the export. */
  verified_size: number;
  first_bad_index: number | null;
  problems: Problem[];
  /** Problems found beyond those listed (the list is bounded). */
  problems_omitted: number;
  /** Things worth knowing that are not problems of the log (e.g. the export names another key). */
  warnings: string[];
}

/** More than a report can usefully show; first_bad_index still counts every problem. */
const MAX_PROBLEMS = 100;

/**
 * The notes in a checkpoint file: the server's checkpoint file (NDJSON, one `{…, "note": …}` per
 * line), an `audit.checkpoint` webhook body or a GET /audit/checkpoint response (JSON), or one
 * note as text. Throws on a JSON line that does not parse.
 */
export function notesIn(text: string): string[] {
  const trimmed = text.trim();
  if (trimmed === '') return [];
  if (!trimmed.startsWith('{') && !trimmed.startsWith('[')) return [`${trimmed}\n`];
  try {
    return notesOf(JSON.parse(trimmed));
  } catch {
    // not one JSON document: NDJSON
  }
  return trimmed.split('\n').flatMap((line, i) => {
    if (line.trim() === '') return [];
    try {
      return notesOf(JSON.parse(line));
    } catch {
      throw new Error(`line ${i + 1} is not JSON`);
    }
  });
}

/** Notes in a parsed JSON value: its `note`, or those of its `checkpoint` or `data` (webhook, API), or of its elements. */
function notesOf(value: unknown): string[] {
  if (Array.isArray(value)) return value.flatMap(notesOf);
  if (value === null || typeof value !== 'object') return [];
  const object = value as Record<string, unknown>;
  if (typeof object.note === 'string') return [object.note];
  return [...notesOf(object.checkpoint), ...notesOf(object.data)];
}

const HEX_HASH = /^[0-9a-f]{64}$/;

export class OfflineVerifier {
  readonly origin: string;
  readonly #verifier: NoteVerifier;
  #header: Extract<ExportLine, { type: 'log' }> | undefined;
  /** Signed roots by size (distinct roots: two mean a fork). */
  readonly #roots = new Map<number, Buffer[]>();
  /** The checkpoint sizes in order, fixed at the first event. */
  #sizes: number[] | undefined;
  #next = 0;
  readonly #frontier = new Frontier();
  /** After a gap the leaves' positions are unknown: nothing more is compared. */
  #broken = false;
  #mismatched = false;
  #verifiedSize = 0;
  #outside = 0;
  #outsideGiven = 0;
  #otherLogs = 0;
  #unwitnessed = 0;
  readonly #policy: WitnessPolicy | undefined;
  #firstBad: number | null = null;
  readonly #problems: Problem[] = [];
  #omitted = 0;
  readonly #warnings: string[] = [];

  /**
   * With a witness policy, a checkpoint is trusted only with its quorum of cosignatures; the
   * others are counted and set aside (a forged one is then no evidence, and no anchor either).
   * @throws AuditProofError `invalid_argument` when `verifierKey` is not a vkey.
   */
  constructor(verifierKey: string, policy?: WitnessPolicy) {
    this.#verifier = parseVerifierKey(verifierKey.trim());
    this.#policy = policy;
    // A checkpoint's key is named after its log, so the key names the log it verifies.
    this.origin = this.#verifier.name;
  }

  #problem(kind: ProblemKind, index: number | null, message: string, lastIndex: number | null = null): void {
    if (index !== null && (this.#firstBad === null || index < this.#firstBad)) this.#firstBad = index;
    if (this.#problems.length < MAX_PROBLEMS) this.#problems.push({ kind, index, last_index: lastIndex, message });
    else this.#omitted++;
  }

  malformed(lineNumber: number, message: string): void {
    this.#problem('malformed_line', null, `line ${lineNumber} of the export: ${message}`);
  }

  header(line: Extract<ExportLine, { type: 'log' }>): void {
    if (this.#header) {
      this.#problem('malformed_line', null, 'the export has more than one log header');
      return;
    }
    this.#header = line;
    if (line.origin !== this.origin) {
      this.#problem('wrong_log', null, `the export is of log ${line.origin} but the key verifies log ${this.origin}`);
    } else if (
      typeof line.verifier_key === 'string' &&
      line.verifier_key.trim() !== formatVerifierKey(this.#verifier.name, this.#verifier.publicKey)
    ) {
      this.#warnings.push(`the export names another verifier key (${line.verifier_key}); only the key given is trusted`);
    }
  }

  /** A signed checkpoint, from the export or from outside it; all are given before the first event. */
  checkpoint(note: string, from: 'export' | 'outside'): void {
    if (this.#sizes) throw new Error('checkpoints must be given before the events');
    if (from === 'outside') this.#outsideGiven++;
    // The origin is the note's first line; notes of other logs share the server's checkpoint file.
    if (note.slice(0, note.indexOf('\n')) !== this.origin) {
      this.#otherLogs++;
      return;
    }
    let checkpoint: ReturnType<typeof openCheckpoint>;
    try {
      checkpoint = openCheckpoint(note, [this.#verifier, ...(this.#policy?.witnesses ?? [])], { origin: this.origin });
      if (!checkpoint.note.verified.some((s) => s.name === this.#verifier.name && s.keyId === this.#verifier.keyId))
        throw new AuditProofError('unknown_key', 'the note has no signature by the log’s key');
    } catch (error) {
      if (!(error instanceof AuditProofError)) throw error;
      const size = /^[^\n]*\n(\d+)\n/.exec(note)?.[1];
      this.#problem(
        'bad_checkpoint',
        null,
        `a checkpoint ${from === 'export' ? 'in the export' : 'given'}${size ? ` (of size ${size})` : ''} does not verify with the key: ${error.message}`,
      );
      return;
    }
    if (this.#policy && !quorumOf(this.#policy, cosignersOf(checkpoint.note, this.#policy))) {
      this.#unwitnessed++;
      return;
    }
    if (from === 'outside') this.#outside++;
    const roots = this.#roots.get(checkpoint.size) ?? [];
    if (roots.some((root) => root.equals(checkpoint.rootHash))) return;
    if (roots.length > 0) {
      this.#problem('fork', null, `two verified checkpoints of size ${checkpoint.size} have different roots: the log signed two histories`);
    }
    this.#roots.set(checkpoint.size, [...roots, checkpoint.rootHash]);
  }

  /** The export's next event line, in leaf order. */
  event(line: Extract<ExportLine, { type: 'event' }>): void {
    if (!this.#sizes) {
      this.#sizes = [...this.#roots.keys()].sort((a, b) => a - b);
      this.#compareDue();
    }
    if (this.#broken) return;
    const index = this.#frontier.size;
    if (line.index !== index) {
      this.#broken = true;
      this.#problem('gap', index, `the export has no event at index ${index} (the next line is index ${line.index})`);
      return;
    }
    let hash: Buffer;
    if (line.leaf === null) {
      this.#problem('missing_event', index, `event ${line.event_id} (index ${index}) is sealed but its row is gone`);
      // Its seal's hash keeps the later leaves in place; a hash that is not one makes the roots fail, as they should.
      hash = HEX_HASH.test(line.leaf_hash) ? Buffer.from(line.leaf_hash, 'hex') : Buffer.alloc(32);
    } else {
      hash = leafHash(Buffer.from(line.leaf, 'utf8'));
      if (hash.toString('hex') !== line.leaf_hash) {
        this.#problem(
          'leaf_mismatch',
          index,
          `event ${line.event_id} (index ${index}) does not hash to its recorded leaf hash: its bytes were changed`,
        );
      } else if (!this.#namesEvent(line.leaf, line.event_id)) {
        this.#problem('leaf_mismatch', index, `the leaf at index ${index} is not event ${line.event_id} of this workspace`);
      }
    }
    this.#frontier.append(hash);
    this.#compareDue();
  }

  /** Whether a leaf is the canonical array of the event the line names (workspace id, then event id). */
  #namesEvent(leaf: string, eventId: string): boolean {
    try {
      const fields = JSON.parse(leaf) as unknown;
      return Array.isArray(fields) && fields[1] === eventId && (this.#header === undefined || fields[0] === this.#header.workspace_id);
    } catch {
      return false;
    }
  }

  /** Compares the tree with the checkpoints of its current size. */
  #compareDue(): void {
    const sizes = this.#sizes!;
    while (this.#next < sizes.length && sizes[this.#next]! <= this.#frontier.size) {
      const size = sizes[this.#next++]!;
      if (this.#mismatched) continue;
      const root = this.#frontier.root();
      if (this.#roots.get(size)!.every((signed) => signed.equals(root))) {
        this.#verifiedSize = size;
        continue;
      }
      this.#mismatched = true;
      const from = this.#verifiedSize;
      this.#problem(
        'root_mismatch',
        from,
        from === size - 1
          ? `the export's first ${size} events do not make the signed root of that size, and its first ${from} do: the event at index ${from} was changed or removed`
          : `the export's first ${size} events do not make the signed root of that size` +
              `${from > 0 ? `, and its first ${from} do` : ''}: an event at an index from ${from} to ${size - 1} was changed or removed` +
              ' (checkpoints closer together would name it)',
        size - 1,
      );
    }
  }

  finish(): OfflineReport {
    if (!this.#sizes) {
      this.#sizes = [...this.#roots.keys()].sort((a, b) => a - b);
      this.#compareDue();
    }
    const events = this.#frontier.size;
    const header = this.#header;
    if (!this.#broken) {
      const largest = this.#sizes[this.#sizes.length - 1];
      if (largest !== undefined && largest > events) {
        // The lost events follow the export's last one only if a checkpoint vouches for all it has.
        const from = Math.min(this.#verifiedSize, events);
        this.#problem(
          'truncated',
          from,
          `a signed checkpoint commits to ${largest} events but the export has ${events}: the log lost ` +
            (from === events
              ? `its events from index ${events} (deleted, or the tree rewound)`
              : `events (deleted, or the tree rewound), and no checkpoint vouches for its events from index ${from} on: the first lost or changed one is at an index from ${from} to ${largest - 1}`),
          largest - 1,
        );
      }
      if (header && header.tree_size !== events) {
        const at = Math.min(events, header.tree_size);
        this.#problem(
          'incomplete_export',
          at,
          events < header.tree_size
            ? `the export ends at index ${events} but its header counts ${header.tree_size} events: the file was cut short`
            : `the export has ${events} events but its header counts ${header.tree_size}`,
        );
      }
    }
    if (!header && events > 0) this.#problem('malformed_line', null, 'the export has no log header');
    if (this.#unwitnessed > 0) this.#warnings.push(`${this.#unwitnessed} signed checkpoints lack the witness quorum and were not trusted`);
    if (this.#roots.size === 0 && events > 0) {
      const witnessed = this.#policy ? ` with ${this.#policy.quorum} witness cosignatures` : '';
      this.#problem(
        'no_checkpoint',
        null,
        `no checkpoint of log ${this.origin}${witnessed} verified: nothing binds the export to the signed log`,
      );
    } else if (this.#outsideGiven > 0 && this.#outside === 0) {
      this.#problem(
        'no_checkpoint',
        null,
        `none of the ${this.#outsideGiven} checkpoints given from outside is a verified checkpoint of log ${this.origin}`,
      );
    }
    return {
      valid: this.#problems.length === 0,
      origin: this.origin,
      workspace_id: header?.workspace_id ?? null,
      events,
      tree_size: header?.tree_size ?? null,
      root_hash: this.#frontier.root().toString('hex'),
      checkpoints: this.#roots.size,
      checkpoints_outside: this.#outside,
      checkpoints_unwitnessed: this.#unwitnessed,
      witness_policy: this.#policy ? { quorum: this.#policy.quorum, witnesses: this.#policy.witnesses.map((w) => w.vkey) } : null,
      other_logs: this.#otherLogs,
      verified_size: this.#verifiedSize,
      first_bad_index: this.#firstBad,
      problems: this.#problems,
      problems_omitted: this.#omitted,
      warnings: this.#warnings,
    };
  }
}

/** Verifies an export held in memory (its lines parsed) against notes held outside it. */
export function verifyExport(
  exportLines: readonly ExportLine[],
  outsideNotes: readonly string[],
  verifierKey: string,
  policy?: WitnessPolicy,
): OfflineReport {
  const verifier = new OfflineVerifier(verifierKey, policy);
  for (const line of exportLines) {
    if (line.type === 'log') verifier.header(line);
    else if (line.type === 'checkpoint') verifier.checkpoint(line.note, 'export');
  }
  for (const note of outsideNotes) verifier.checkpoint(note, 'outside');
  for (const line of exportLines) if (line.type === 'event') verifier.event(line);
  return verifier.finish();
}
