/**
 * Warden as a client of its witnesses (C2SP tlog-witness): each checkpoint, once signed, goes to
 * every configured witness with a consistency proof from the last size that witness cosigned, and
 * the cosignatures that come back (each verified with the witness's key) are appended to the note
 * before it is stored, sent as `audit.checkpoint` and written to the checkpoint file.
 *
 * WARDEN_AUDIT_WITNESSES lists `<url> <vkey>` pairs, separated by commas or newlines;
 * WARDEN_AUDIT_WITNESS_QUORUM is the k of n a verifier should ask for (default n). A witness that
 * is down, slow (WARDEN_AUDIT_WITNESS_TIMEOUT_MS) or refuses does not stop signing: the checkpoint
 * is published with the cosignatures it got, and one short of the quorum is not trusted by a
 * verifier with that policy. A witness that could not be reached is asked again (the
 * checkpointer's catch-up, in memory: a restart forgets it) until it cosigns or the log grows;
 * its late line is served after the stored note (GET /audit/checkpoint, tiles, proofs), not
 * sent again as a webhook nor written to the checkpoint file, which keep the note as signed. A refusal on consistency (409 with
 * another root, 422) is logged as an error: the witness saw a history this one does not extend.
 */
import type { Logger } from '../../logger.ts';
import { AuditProofError, openNote } from './checkpoint.ts';
import { type CosignatureVerifier, parseCosignerKey } from './cosignature.ts';

export interface WitnessEndpoint {
  /** The submission prefix: `<url>/add-checkpoint` is posted to. */
  url: string;
  verifier: CosignatureVerifier;
}

export interface WitnessSet {
  witnesses: WitnessEndpoint[];
  quorum: number;
  timeoutMs: number;
}

/** Parses WARDEN_AUDIT_WITNESSES (`<url> <vkey>`, comma- or newline-separated); throws naming the entry. */
export function parseWitnessSet(list: string | undefined, quorum: number | undefined, timeoutMs: number): WitnessSet {
  const witnesses = (list ?? '')
    .split(/[,\n]/)
    .map((entry) => entry.trim())
    .filter((entry) => entry !== '')
    .map((entry) => {
      const [url, vkey, extra] = entry.split(/\s+/);
      let parsed: URL | undefined;
      try {
        parsed = new URL(url ?? '');
      } catch {
        parsed = undefined;
      }
      if (!parsed || !/^https?:$/.test(parsed.protocol) || !vkey || extra !== undefined)
        throw new Error(`WARDEN_AUDIT_WITNESSES lists "<http(s) url> <witness vkey>" pairs, got '${entry}'`);
      try {
        return { url: url!.replace(/\/+$/, ''), verifier: parseCosignerKey(vkey) };
      } catch (error) {
        throw new Error(`WARDEN_AUDIT_WITNESSES: ${(error as Error).message} in '${entry}'`);
      }
    });
  // one witness listed with two keys (while it moves to ML-DSA-44) is one witness
  const distinct = new Set(witnesses.map((w) => w.verifier.name)).size;
  const k = quorum ?? distinct;
  if (!Number.isSafeInteger(k) || k < 0 || k > distinct)
    throw new Error(`WARDEN_AUDIT_WITNESS_QUORUM must be between 0 and the ${distinct} witnesses listed, got ${quorum}`);
  return { witnesses, quorum: k, timeoutMs };
}

/** Reads the consistency proof between two sizes of a workspace's tree. */
export type ProofReader = (from: number, to: number) => Promise<Buffer[]>;

/** A witness answered, and did not cosign (asking again would get the same answer). */
class WitnessRefusal extends Error {}

export class WitnessClient {
  /** Per witness and workspace: the size it last cosigned, as far as this process knows. */
  private readonly cosigned = new Map<string, number>();

  constructor(
    private readonly set: WitnessSet,
    private readonly logger: Logger,
  ) {}

  get configured(): boolean {
    return this.set.witnesses.length > 0;
  }

  /**
   * Sends the signed `note` (size `size`) to `witnesses` (default: all); returns the cosignature
   * line of each that cosigned, in the set's order, and those it could not reach (to ask again:
   * a refusal is an answer, and is not asked again).
   */
  async cosign(
    workspaceId: string,
    note: string,
    size: number,
    proof: ProofReader,
    witnesses: readonly WitnessEndpoint[] = this.set.witnesses,
  ): Promise<{ cosigned: { witness: WitnessEndpoint; line: string }[]; unreached: WitnessEndpoint[] }> {
    const answers = await Promise.all(
      witnesses.map((witness) =>
        this.submit(witness, workspaceId, note, size, proof).then(
          (line) => ({ witness, line }),
          (error: unknown) => {
            this.logger.warn?.('audit witness did not cosign', { witness: witness.verifier.name, workspaceId, size, cause: error });
            return { witness, line: undefined, refused: error instanceof WitnessRefusal };
          },
        ),
      ),
    );
    return {
      cosigned: answers.flatMap(({ witness, line }) => (line === undefined ? [] : [{ witness, line }])),
      unreached: answers.filter((answer) => answer.line === undefined && !('refused' in answer && answer.refused)).map((a) => a.witness),
    };
  }

  private async submit(witness: WitnessEndpoint, workspaceId: string, note: string, size: number, proof: ProofReader): Promise<string> {
    const key = `${witness.verifier.vkey}\n${workspaceId}`;
    let old = Math.min(this.cosigned.get(key) ?? 0, size);
    // Twice at most: the second time from the size a 409 names.
    for (let attempt = 0; attempt < 2; attempt++) {
      const hashes = old === 0 || old === size ? [] : await proof(old, size);
      const body = `old ${old}\n${hashes.map((hash) => `${hash.toString('base64')}\n`).join('')}\n${note}`;
      const response = await fetch(`${witness.url}/add-checkpoint`, {
        method: 'POST',
        headers: { 'content-type': 'text/plain; charset=utf-8' },
        body,
        signal: AbortSignal.timeout(this.set.timeoutMs),
      });
      // room for a few cosignature lines of either kind (an ML-DSA-44 one is ~3.3 KB)
      const text = (await response.text()).slice(0, 16_384);
      if (response.status === 200) {
        this.cosigned.set(key, size);
        return this.verified(witness, note, text);
      }
      const sizeAnswer = response.status === 409 && (response.headers.get('content-type') ?? '').startsWith('text/x.tlog.size');
      const theirs = sizeAnswer ? Number(text.trim()) : Number.NaN;
      if (sizeAnswer && Number.isSafeInteger(theirs) && theirs >= 0 && theirs <= size && attempt === 0) {
        old = theirs;
        continue;
      }
      const inconsistent = response.status === 422 || (response.status === 409 && !sizeAnswer) || (sizeAnswer && theirs > size);
      if (inconsistent)
        this.logger.error('audit witness refused a checkpoint as inconsistent with the history it cosigned', {
          witness: witness.verifier.name,
          workspaceId,
          size,
          status: response.status,
          answer: text.trim(),
        });
      const error = `witness answered ${response.status}: ${text.trim()}`;
      // a 4xx is the witness's answer about this checkpoint; a 5xx, 408 or 429, like no answer, is asked again
      const later = response.status >= 500 || response.status === 408 || response.status === 429;
      throw later ? new Error(error) : new WitnessRefusal(error);
    }
    throw new WitnessRefusal('witness kept naming another size');
  }

  /** The witness's answer, kept only as signature lines that verify with its key on this note. */
  private verified(witness: WitnessEndpoint, note: string, answer: string): string {
    const lines = answer.split('\n').filter((line) => line.startsWith(`\u2014 ${witness.verifier.name} `));
    const text = note.slice(0, note.lastIndexOf('\n\n') + 1);
    const good = lines.filter((line) => {
      try {
        return openNote(`${text}\n${line}\n`, witness.verifier).verified.length === 1;
      } catch (error) {
        if (error instanceof AuditProofError) return false;
        throw error;
      }
    });
    if (good.length === 0) throw new WitnessRefusal('the witness answered no cosignature that verifies with its key');
    return `${good[0]}\n`;
  }
}
