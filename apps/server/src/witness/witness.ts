/**
 * A transparency-log witness, C2SP tlog-witness (https://c2sp.org/tlog-witness): it cosigns a
 * checkpoint only after verifying the log's signature and a consistency proof from the last
 * checkpoint it cosigned for that origin, so a log that shows two histories needs the witness's
 * key too. Its key and its state are its own (a directory Warden never reads), meant for another
 * machine or another party (`npm run warden -- witness`; docs/decisions/0024-audit-witnesses.md).
 *
 * Logs are trusted by public key and origin prefix: Warden signs every workspace's log with one
 * key, each under its own origin `<log name>/audit/<workspace id>` (the key name is the origin).
 */
import { createHash } from 'node:crypto';
import { closeSync, existsSync, fsyncSync, openSync, readFileSync, renameSync, writeSync } from 'node:fs';
import { dirname, join } from 'node:path';
import {
  AuditProofError,
  decodeBase64,
  formatSignatureLine,
  formatVerifierKey,
  isConsistent,
  isValidKeyName,
  type NoteSignature,
  openCheckpoint,
  type SigningKey,
} from '../features/audit/checkpoint.ts';
import { cosignatureLine, formatCosignerKey } from '../features/audit/cosignature.ts';

/** A log the witness cosigns for: every origin starting with `originPrefix`, signed by `publicKey`. */
export interface TrustedLog {
  originPrefix: string;
  publicKey: Buffer;
}

export interface WitnessOptions {
  name: string;
  key: SigningKey;
  /** Where the latest cosigned (size, root) per origin is kept. */
  dataDir: string;
  logs: readonly TrustedLog[];
  now?: () => Date;
}

export interface WitnessAnswer {
  status: 200 | 400 | 403 | 404 | 409 | 422;
  contentType: string;
  body: string;
}

interface Cosigned {
  size: number;
  /** base64, as in the checkpoint */
  root: string;
  /** The checkpoint as the log signed it, with this witness's cosignature line: what monitors are shown. */
  note?: string;
}

/** The spec's bound: a consistency proof has at most 63 hashes. */
const MAX_PROOF_LINES = 63;
/** A request larger than any checkpoint with its proof and a few dozen signatures (an ML-DSA-44 line is ~3.3 KB). */
export const MAX_REQUEST_BYTES = 256 * 1024;

const text = (status: WitnessAnswer['status'], body: string): WitnessAnswer => ({
  status,
  contentType: 'text/plain; charset=utf-8',
  body: `${body}\n`,
});

export class Witness {
  readonly vkey: string;
  private readonly state: Map<string, Cosigned>;
  private readonly stateFile: string;
  /** add-checkpoint's check and update are one step: requests run one after another. */
  private queue: Promise<unknown> = Promise.resolve();

  constructor(private readonly options: WitnessOptions) {
    if (!isValidKeyName(options.name))
      throw new AuditProofError('invalid_argument', `invalid witness name ${JSON.stringify(options.name)}`);
    this.vkey = formatCosignerKey(options.name, options.key.publicKey);
    this.stateFile = join(options.dataDir, 'witness-state.json');
    this.state = new Map(
      existsSync(this.stateFile)
        ? Object.entries((JSON.parse(readFileSync(this.stateFile, 'utf8')) as { logs: Record<string, Cosigned> }).logs)
        : [],
    );
  }

  /** The latest checkpoint cosigned for an origin (size 0 when none). */
  latest(origin: string): Cosigned | undefined {
    return this.state.get(origin);
  }

  /**
   * For monitors: the latest checkpoint this witness cosigned for the log whose origin hashes
   * (SHA-256, hex) to `originHash`, as the log signed it with this witness's cosignature —
   * what a client was shown, so a monitor sees the same view.
   */
  monitored(originHash: string): string | undefined {
    const origin = this.originsByHash.get(originHash);
    return origin === undefined ? undefined : this.state.get(origin)?.note;
  }

  /** The logs' origins by the hex SHA-256 monitors name them with. */
  private get originsByHash(): Map<string, string> {
    if (this.hashedOrigins.size !== this.state.size)
      for (const origin of this.state.keys()) this.hashedOrigins.set(createHash('sha256').update(origin).digest('hex'), origin);
    return this.hashedOrigins;
  }
  private readonly hashedOrigins = new Map<string, string>();

  addCheckpoint(body: string): Promise<WitnessAnswer> {
    const answer = this.queue.then(() => this.add(body));
    this.queue = answer.catch(() => undefined);
    return answer;
  }

  private async add(body: string): Promise<WitnessAnswer> {
    const request = parseRequest(body);
    if (typeof request === 'string') return text(400, request);
    const { oldSize, proof, note } = request;
    const origin = note.slice(0, note.indexOf('\n'));
    const logs = this.options.logs.filter((log) => origin.startsWith(log.originPrefix) && origin.length > log.originPrefix.length);
    if (logs.length === 0 || !isValidKeyName(origin)) return text(404, `unknown log origin ${JSON.stringify(origin)}`);

    let checkpoint: ReturnType<typeof openCheckpoint>;
    try {
      checkpoint = openCheckpoint(
        note,
        logs.map((log) => formatVerifierKey(origin, log.publicKey)),
        { origin },
      );
    } catch (error) {
      const code = error instanceof AuditProofError ? error.code : 'malformed_note';
      const forbidden = code === 'unknown_key' || code === 'bad_signature';
      return text(forbidden ? 403 : 400, `checkpoint refused: ${(error as Error).message}`);
    }
    if (oldSize > checkpoint.size) return text(400, `old size ${oldSize} is larger than the checkpoint's size ${checkpoint.size}`);

    const latest = this.state.get(origin) ?? { size: 0, root: '' };
    const root = checkpoint.rootHash.toString('base64');
    if (oldSize !== latest.size) return { status: 409, contentType: 'text/x.tlog.size', body: `${latest.size}\n` };
    if (oldSize === 0) {
      if (proof.length > 0) return text(400, 'a consistency proof from size 0 must be empty');
    } else if (oldSize === checkpoint.size) {
      if (root !== latest.root) return text(409, `a second root for size ${oldSize}, which was cosigned with another root`);
    } else if (!(await isConsistent(oldSize, checkpoint.size, Buffer.from(latest.root, 'base64'), checkpoint.rootHash, proof))) {
      return text(422, `the checkpoint of size ${checkpoint.size} does not extend the one cosigned at size ${oldSize}`);
    }

    const time = this.options.now?.() ?? new Date();
    const cosignature = cosignatureLine(this.options.key, this.options.name, checkpoint.note.text, time);
    // kept with the log's signature that verified, and nothing else the request carried
    const logSignature = checkpoint.note.verified.find((signature) => signature.name === origin) as NoteSignature;
    const signedByLog = `${checkpoint.note.text}\n${formatSignatureLine(logSignature.name, logSignature.keyId, logSignature.signature)}`;
    this.state.set(origin, { size: checkpoint.size, root, note: `${signedByLog}${cosignature}` });
    this.persist();
    return { status: 200, contentType: 'text/plain; charset=utf-8', body: cosignature };
  }

  /**
   * Written whole, synced, then renamed over the old file, and the directory synced so that the
   * rename itself survives a power loss: a crash leaves one state or the other, never an older one
   * after a cosignature of the newer went out.
   */
  private persist(): void {
    const temporary = `${this.stateFile}.${process.pid}.tmp`;
    const fd = openSync(temporary, 'w', 0o600);
    try {
      writeSync(fd, JSON.stringify({ logs: Object.fromEntries(this.state) }));
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(temporary, this.stateFile);
    const directory = openSync(dirname(this.stateFile), 'r');
    try {
      fsyncSync(directory);
    } finally {
      closeSync(directory);
    }
  }
}

/** The request body: `old <size>`, up to 63 base64 hashes, an empty line, then the signed checkpoint. */
function parseRequest(body: string): { oldSize: number; proof: Buffer[]; note: string } | string {
  const blank = body.indexOf('\n\n');
  if (blank < 0) return 'the body is an old size line, proof lines, an empty line and a checkpoint';
  const head = body.slice(0, blank).split('\n');
  const sizeLine = /^old (0|[1-9][0-9]*)$/.exec(head[0] ?? '');
  if (sizeLine === null || !Number.isSafeInteger(Number(sizeLine[1]))) return 'the first line must be `old <size>` in decimal';
  const proofLines = head.slice(1);
  if (proofLines.length > MAX_PROOF_LINES) return `a consistency proof has at most ${MAX_PROOF_LINES} hashes`;
  const proof: Buffer[] = [];
  for (const line of proofLines) {
    const hash = decodeBase64(line);
    if (hash?.length !== 32) return 'each proof line must be one base64 SHA-256 hash';
    proof.push(Buffer.from(hash));
  }
  return { oldSize: Number(sizeLine[1]), proof, note: body.slice(blank + 2) };
}
