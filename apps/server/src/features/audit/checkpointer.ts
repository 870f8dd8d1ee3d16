/**
 * Signed checkpoints of the audit trees, and the keys that sign them: Ed25519 and, beside it,
 * ML-DSA-44 (docs/decisions/0034-ml-dsa-44-signatures.md). The keys live outside the database
 * (WARDEN_AUDIT_SIGNING_KEY and WARDEN_AUDIT_ML_DSA_SIGNING_KEY, or `audit-signing.key` and
 * `audit-signing-ml-dsa-44.key` beside `master.key`), so a database writer cannot sign a tree it
 * rewrote. Each checkpoint leaves the database twice as it is made:
 * as an `audit.checkpoint` webhook (its outbox row is written with it) and as a line appended to
 * the checkpoint file. Every process checkpoints; a size already checkpointed by another one is
 * skipped by the table's primary key.
 *
 * The signer checks before it signs (docs/decisions/0018-audit-signer-checks.md): it keeps the
 * last (size, root) it signed per log outside the database — the checkpoint file, read at
 * start, and memory — and signs a larger head only when a consistency proof from that
 * checkpoint to the head verifies. A head that does not extend it (history rewritten, cut or
 * forked under it) is refused, every round, loudly: an error log line, the
 * `audit_signing_refusals` row (GET /audit/verify and the compliance control fail, the metric
 * counts it) and an `audit.integrity_failed` webhook.
 */
import { appendFileSync, existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Kysely } from 'kysely';
import { readOrCreateSecretFile } from '../../db/data-dir-lock.ts';
import type { DB } from '../../db/schema.ts';
import type { Logger } from '../../logger.ts';
import { anyCheckpoint, findCheckpoint, insertCheckpoint, insertLateCosignature, treesDueForCheckpoint } from './checkpoint.repository.ts';
import {
  exportSigningKey,
  formatVerifierKey,
  generateSigningKey,
  isConsistent,
  type KeyAlgorithm,
  keyId,
  loadSigningKey,
  noteSigner,
  openCheckpoint,
  type ParsedCheckpoint,
  type SigningKey,
  signCheckpoint,
} from './checkpoint.ts';
import { consistencyProof, nodesForConsistency } from './merkle.ts';
import { clearSigningRefusal, findSigningRefusal, recordSigningRefusal } from './signing-refusals.repository.ts';
import { readNodeHashes } from './tree.repository.ts';
import { parseWitnessSet, WitnessClient, type WitnessEndpoint, type WitnessSet } from './witnesses.ts';

/** What checks a log's checkpoints: the public keys and the logs' name. */
export interface AuditLogKey {
  key: Pick<SigningKey, 'publicKey'>;
  /** The ML-DSA-44 key that signs beside the Ed25519 one (absent where the exporting side has none). */
  mlDsaKey?: Pick<SigningKey, 'publicKey'> | undefined;
  logName: string;
}

/** Signs the checkpoints of every workspace's log, each named by its origin `<log name>/audit/<workspace id>`. */
export interface AuditSigner extends AuditLogKey {
  key: SigningKey;
  mlDsaKey?: SigningKey | undefined;
  /** The witnesses each checkpoint is sent to (none: the log is unwitnessed). */
  witnesses: WitnessSet;
}

const KEY_FILES: Record<KeyAlgorithm, string> = { ed25519: 'audit-signing.key', 'ml-dsa-44': 'audit-signing-ml-dsa-44.key' };

/**
 * A signing key: as configured, else the data directory's file (created unless `create` is
 * false: then undefined when there is none), else — an in-memory database — a throw-away key, as
 * it gets a throw-away master key.
 */
function signingKey(configured: string | undefined, dataDir: string, algorithm: KeyAlgorithm, create: boolean): SigningKey | undefined {
  if (configured !== undefined) return loadSigningKey(configured, algorithm);
  if (!create && (dataDir.startsWith('memory://') || !existsSync(join(dataDir, KEY_FILES[algorithm])))) return undefined;
  const stored = readOrCreateSecretFile(dataDir, KEY_FILES[algorithm], () => exportSigningKey(generateSigningKey(algorithm)));
  return stored === undefined ? generateSigningKey(algorithm) : loadSigningKey(stored, algorithm);
}

/** The signer of every log; with `create: false` (an export, which must name no key that signed nothing) it makes no key. */
export function loadAuditSigner(
  config: {
    auditSigningKey: string | undefined;
    auditMlDsaSigningKey?: string | undefined;
    dataDir: string;
    auditLogName: string;
    auditWitnesses?: string | undefined;
    auditWitnessQuorum?: number | undefined;
    auditWitnessTimeoutMs?: number;
  },
  { create = true } = {},
): AuditSigner {
  return {
    key: signingKey(config.auditSigningKey, config.dataDir, 'ed25519', true)!,
    // with the Ed25519 key configured (shared by every machine), an ML-DSA-44 key made per data
    // directory would differ between replicas: then only a configured one signs (composition warns)
    mlDsaKey: signingKey(config.auditMlDsaSigningKey, config.dataDir, 'ml-dsa-44', create && config.auditSigningKey === undefined),
    logName: config.auditLogName,
    witnesses: parseWitnessSet(config.auditWitnesses, config.auditWitnessQuorum, config.auditWitnessTimeoutMs ?? 3000),
  };
}

/** The log's verifier keys: Ed25519's, then ML-DSA-44's when it has one. */
export const verifierKeysOf = (signer: AuditLogKey, origin: string): string[] => [
  formatVerifierKey(origin, signer.key.publicKey),
  ...(signer.mlDsaKey ? [formatVerifierKey(origin, signer.mlDsaKey.publicKey)] : []),
];

export const originOf = (signer: AuditLogKey, workspaceId: string) => `${signer.logName}/audit/${workspaceId}`;

/** The public keys as GET /audit/signing-key shows them for a workspace's log, with the witnesses that cosign it. */
export function signingKeyOf(signer: AuditLogKey & Partial<Pick<AuditSigner, 'witnesses'>>, workspaceId: string) {
  const name = originOf(signer, workspaceId);
  const mlDsa = signer.mlDsaKey?.publicKey;
  return {
    algorithm: 'ed25519' as const,
    key_name: name,
    key_id: keyId(name, signer.key.publicKey).toString(16).padStart(8, '0'),
    public_key: Buffer.from(signer.key.publicKey).toString('base64'),
    verifier_key: formatVerifierKey(name, signer.key.publicKey),
    ml_dsa_44:
      mlDsa === undefined
        ? null
        : {
            key_id: keyId(name, mlDsa).toString(16).padStart(8, '0'),
            public_key: Buffer.from(mlDsa).toString('base64'),
            verifier_key: formatVerifierKey(name, mlDsa),
          },
    witnesses: (signer.witnesses?.witnesses ?? []).map((w) => ({
      name: w.verifier.name,
      key_id: w.verifier.keyId.toString(16).padStart(8, '0'),
      verifier_key: w.verifier.vkey,
    })),
    witness_quorum: signer.witnesses?.quorum ?? 0,
  };
}

/** A stored note opened with the signer's own public keys (either may have signed it); undefined when it does not verify. */
export function openSignedCheckpoint(signer: AuditLogKey, note: string): ParsedCheckpoint | undefined {
  try {
    return openCheckpoint(note, verifierKeysOf(signer, parseOrigin(note)));
  } catch {
    return undefined;
  }
}

/** The first line of a note: its origin, which is also the key's name. */
const parseOrigin = (note: string) => note.slice(0, Math.max(0, note.indexOf('\n')));

/** A refusal as GET /audit/verify and the `audit.integrity_failed` webhook show it. */
export function integrityFailureView(row: {
  detected_at: Date | string;
  signed_size: number | string;
  signed_root: string;
  head_size: number | string;
  head_root: string;
  reason: string;
}) {
  return {
    detected_at: new Date(row.detected_at).toISOString(),
    signed_size: Number(row.signed_size),
    signed_root: row.signed_root,
    head_size: Number(row.head_size),
    head_root: row.head_root,
    reason: row.reason,
  };
}

/** A checkpoint as the API and the webhook show it. */
export function checkpointView(row: {
  tree_size: number | string;
  root_hash: string;
  checkpoint_timestamp: Date;
  key_id: string;
  note: string;
}) {
  return {
    origin: parseOrigin(row.note),
    tree_size: Number(row.tree_size),
    root_hash: row.root_hash,
    timestamp: row.checkpoint_timestamp.toISOString(),
    key_id: row.key_id,
    note: row.note,
  };
}

/** A log's last signed checkpoint, as the signer knows it from outside the database. */
export interface Signed {
  size: number;
  root: string;
}

/** Why a head is not signed; undefined when it extends the signed checkpoint. */
type Refusal = string | undefined;

/** How often a refusal that goes on is logged again (it is checked every round). */
const REFUSAL_LOG_EVERY_MS = 60_000;
/** How often a witness that could not be reached is asked again for a log's latest checkpoint. */
const CATCH_UP_EVERY_MS = 5_000;

/** A log's latest checkpoint, and the witnesses that could not be reached when it was signed. */
interface Uncosigned {
  size: number;
  note: string;
  witnesses: WitnessEndpoint[];
  /** When to ask them again. */
  next: number;
}
/** The key of unrecorded()'s log line when the signer's whole record is missing. */
const ALL_LOGS = '*';

/** The largest checkpoint per log in the checkpoint file whose signature verifies with the signer's key. */
export function readSignedCheckpoints(file: string | undefined, signer: AuditSigner, logger: Logger): Map<string, Signed> {
  const signed = new Map<string, Signed>();
  if (!file || !existsSync(file)) return signed;
  let unreadable = 0;
  for (const line of readFileSync(file, 'utf8').split('\n')) {
    if (line.trim() === '') continue;
    try {
      const entry = JSON.parse(line) as { workspace_id: string; note: string };
      const opened = openSignedCheckpoint(signer, entry.note);
      if (!opened || originOf(signer, entry.workspace_id) !== opened.origin) throw new Error('not signed by this key for this log');
      const known = signed.get(entry.workspace_id);
      if (!known || opened.size > known.size) signed.set(entry.workspace_id, { size: opened.size, root: opened.rootHash.toString('hex') });
    } catch {
      unreadable += 1;
    }
  }
  if (unreadable > 0)
    logger.error('audit checkpoint file: lines that are not checkpoints signed by this key were skipped', { file, unreadable });
  return signed;
}

export class Checkpointer {
  private last = 0;
  /** Per workspace: the largest checkpoint this signer knows it signed (file, memory, or a note in the database it signed). */
  private readonly signed: Map<string, Signed>;
  /** Per workspace refused: when the refusal was last logged. */
  private readonly refused = new Map<string, number>();
  private readonly witnesses: WitnessClient;
  /** Per workspace: its latest checkpoint, while witnesses that were down have not cosigned it. */
  private readonly uncosigned = new Map<string, Uncosigned>();
  /** The catch-up under way: one at a time. */
  private catchingUp: Promise<void> | undefined;
  private stopped = false;

  constructor(
    private readonly db: Kysely<DB>,
    private readonly signer: AuditSigner,
    private readonly logger: Logger,
    private readonly intervalMs: number,
    /** Where each checkpoint is appended (one JSON line) and read from at start; undefined: nowhere. */
    private readonly file: string | undefined,
  ) {
    this.signed = readSignedCheckpoints(file, signer, logger);
    this.witnesses = new WitnessClient(signer.witnesses, logger);
  }

  /** The last checkpoint this signer signed for the log, as it keeps it outside the database. */
  lastSigned(workspaceId: string): Signed | undefined {
    return this.signed.get(workspaceId);
  }

  static fileFor(config: { auditCheckpointFile: string | undefined; dataDir: string }): string | undefined {
    if (config.auditCheckpointFile) return config.auditCheckpointFile;
    return config.dataDir.startsWith('memory://') ? undefined : join(config.dataDir, 'audit-checkpoints.ndjson');
  }

  /** Checkpoints every tree that grew since its last checkpoint, at most once per interval. */
  async run(now = Date.now()): Promise<void> {
    if (now - this.last < this.intervalMs) return;
    this.last = now;
    // its whole record lost (no checkpoint file, or an empty one) while the database holds checkpoints: it vouches for nothing
    if (this.file && this.signed.size === 0 && (await anyCheckpoint(this.db))) return this.unrecorded(ALL_LOGS);
    for (const tree of await treesDueForCheckpoint(this.db)) {
      try {
        await this.checkpoint(tree.workspace_id, Number(tree.tree_size), tree.root_hash, new Date(now));
      } catch (cause) {
        this.logger.error('audit checkpoint failed', { workspaceId: tree.workspace_id, cause });
      }
    }
    // off the sealer's path: a witness slow to come back must not hold up sealing and signing
    if (this.uncosigned.size > 0 && this.catchingUp === undefined && !this.stopped)
      this.catchingUp = this.catchUp(now).finally(() => {
        this.catchingUp = undefined;
      });
  }

  /** On shutdown: starts no further catch-up, and waits for the one under way (it stops after its current log). */
  async stop(): Promise<void> {
    this.stopped = true;
    await this.catchingUp;
  }

  /**
   * Asks witnesses that were down when a log's latest checkpoint was signed to cosign it now,
   * without waiting for the log to grow; their lines join the note as served. A witness still
   * unreachable is asked for no other log this round, so one down witness costs a round at most
   * one timeout. A log that grew since is left to its new checkpoint, which goes to every witness.
   */
  private async catchUp(now: number): Promise<void> {
    const down = new Set<WitnessEndpoint>();
    for (const [workspaceId, pending] of this.uncosigned) {
      if (this.stopped) return;
      if (this.signed.get(workspaceId)?.size !== pending.size) {
        this.uncosigned.delete(workspaceId);
        continue;
      }
      const asked = pending.witnesses.filter((witness) => !down.has(witness));
      if (now < pending.next || asked.length === 0) continue;
      pending.next = now + CATCH_UP_EVERY_MS;
      try {
        const { cosigned, unreached } = await this.witnesses.cosign(
          workspaceId,
          pending.note,
          pending.size,
          (from, to) => this.proof(workspaceId, from, to),
          asked,
        );
        for (const { witness, line } of cosigned) {
          const id = witness.verifier.keyId.toString(16).padStart(8, '0');
          await insertLateCosignature(this.db, {
            workspace_id: workspaceId,
            tree_size: pending.size,
            witness: `${witness.verifier.name}+${id}`,
            line,
          });
          this.logger.info('audit witness cosigned a checkpoint it had missed', {
            witness: witness.verifier.name,
            workspaceId,
            size: pending.size,
          });
        }
        for (const witness of unreached) down.add(witness);
        // left: those not asked this round, and those still unreachable (a refusal is an answer)
        pending.witnesses = pending.witnesses.filter((witness) => !asked.includes(witness) || unreached.includes(witness));
        if (pending.witnesses.length === 0) this.uncosigned.delete(workspaceId);
      } catch (cause) {
        this.logger.error('audit witness catch-up failed', { workspaceId, cause });
      }
    }
  }

  /**
   * The last checkpoint signed for this log: what this signer kept outside the database, or the
   * newest checkpoint in the database if it is larger and its note verifies with this key (then
   * this signer, or another process with the same key, did sign it).
   */
  private async anchorOf(workspaceId: string): Promise<Signed | 'unrecorded' | undefined> {
    const kept = this.signed.get(workspaceId);
    const stored = await findCheckpoint(this.db, workspaceId);
    // a database writer can delete checkpoints: one the signer's own record lacks is no anchor (finding 9 of issue 46)
    if (kept === undefined && stored && this.file) return 'unrecorded';
    const opened = stored && openSignedCheckpoint(this.signer, stored.note);
    if (opened && opened.origin === originOf(this.signer, workspaceId) && opened.size > (kept?.size ?? 0))
      return { size: opened.size, root: opened.rootHash.toString('hex') };
    return kept;
  }

  /** Why the head (size, root) must not be signed after `anchor`; undefined when it extends it. */
  private async refusal(workspaceId: string, anchor: Signed, size: number, rootHash: string): Promise<Refusal> {
    if (size < anchor.size) return `the tree has ${size} leaves, fewer than the ${anchor.size} already signed`;
    if (size === anchor.size)
      return rootHash === anchor.root ? undefined : `a second root for size ${size}, which was signed with another root`;
    let proof: Buffer[];
    try {
      proof = await this.proof(workspaceId, anchor.size, size);
    } catch (cause) {
      return `no consistency proof from size ${anchor.size} to ${size} can be read (${(cause as Error).message})`;
    }
    return (await isConsistent(anchor.size, size, Buffer.from(anchor.root, 'hex'), Buffer.from(rootHash, 'hex'), proof))
      ? undefined
      : `the tree of size ${size} does not extend the checkpoint signed at size ${anchor.size}: the history under it was rewritten`;
  }

  private async proof(workspaceId: string, from: number, to: number): Promise<Buffer[]> {
    return consistencyProof(from, to, await readNodeHashes(this.db, workspaceId, nodesForConsistency(from, to)));
  }

  private async refuse(workspaceId: string, anchor: Signed, head: Signed, reason: string): Promise<void> {
    const refusal = {
      workspace_id: workspaceId,
      signed_size: anchor.size,
      signed_root: anchor.root,
      head_size: head.size,
      head_root: head.root,
      reason,
    };
    const fresh = await recordSigningRefusal(this.db, refusal, (detectedAt) => ({
      refusal: integrityFailureView({ ...refusal, detected_at: detectedAt }),
    }));
    const logged = this.refused.get(workspaceId);
    if (fresh || logged === undefined || Date.now() - logged >= REFUSAL_LOG_EVERY_MS) {
      this.refused.set(workspaceId, Date.now());
      this.logger.error('audit log integrity failed: checkpoint not signed', {
        workspaceId,
        signedSize: anchor.size,
        signedRoot: anchor.root,
        headSize: head.size,
        headRoot: head.root,
        reason,
      });
    }
  }

  /** Logs, at most once a minute per log, that this signer will not sign a log its own record does not hold, and the fix. */
  private unrecorded(workspaceId: string): void {
    const logged = this.refused.get(workspaceId);
    if (logged !== undefined && Date.now() - logged < REFUSAL_LOG_EVERY_MS) return;
    this.refused.set(workspaceId, Date.now());
    this.logger.error(
      `audit checkpoint not signed: the checkpoint file holds no checkpoint of ${workspaceId === ALL_LOGS ? 'any log' : 'this log'}, but the database does. ` +
        'The signer anchors only on its own record, which no database writer can delete. Restore the checkpoint file ' +
        '(or copy it from a process that signs), or append to it the latest checkpoint you hold outside Warden ' +
        '(an audit.checkpoint webhook, a witness), then restart',
      { ...(workspaceId === ALL_LOGS ? {} : { workspaceId }), file: this.file },
    );
  }

  private async checkpoint(workspaceId: string, size: number, rootHash: string, time: Date): Promise<void> {
    const anchor = await this.anchorOf(workspaceId);
    if (anchor === 'unrecorded') return this.unrecorded(workspaceId);
    const reason = anchor && (await this.refusal(workspaceId, anchor, size, rootHash));
    if (anchor && reason) return this.refuse(workspaceId, anchor, { size, root: rootHash }, reason);
    await this.sign(workspaceId, size, rootHash, time);
    this.signed.set(workspaceId, { size, root: rootHash });
    // a refusal is over once a head extends what this signer signed, if it knew at least as much as the refuser
    this.refused.delete(workspaceId);
    const row = await findSigningRefusal(this.db, workspaceId);
    if (row && Number(row.signed_size) <= (anchor?.size ?? 0)) {
      await clearSigningRefusal(this.db, workspaceId);
      this.logger.info('audit log signed again: the tree extends the last signed checkpoint', { workspaceId, size });
    }
  }

  private async sign(workspaceId: string, size: number, rootHash: string, time: Date): Promise<void> {
    const origin = originOf(this.signer, workspaceId);
    const signer = noteSigner(this.signer.key, origin);
    const signers = this.signer.mlDsaKey ? [signer, noteSigner(this.signer.mlDsaKey, origin)] : [signer];
    // The note carries whole seconds; the row keeps the same instant, so both say one time.
    const timestamp = new Date(Math.floor(time.getTime() / 1000) * 1000);
    let note = signCheckpoint({ origin, size, rootHash: Buffer.from(rootHash, 'hex'), time: timestamp }, ...signers);
    let unreached: WitnessEndpoint[] = [];
    if (this.witnesses.configured) {
      const answers = await this.witnesses.cosign(workspaceId, note, size, (from, to) => this.proof(workspaceId, from, to));
      note += answers.cosigned.map(({ line }) => line).join('');
      unreached = answers.unreached;
    }
    const row = {
      workspace_id: workspaceId,
      tree_size: size,
      root_hash: rootHash,
      checkpoint_timestamp: timestamp,
      key_id: signer.keyId.toString(16).padStart(8, '0'),
      note,
    };
    const view = checkpointView(row);
    if (!(await insertCheckpoint(this.db, row, { checkpoint: view }))) return;
    if (unreached.length > 0) this.uncosigned.set(workspaceId, { size, note, witnesses: unreached, next: Date.now() + CATCH_UP_EVERY_MS });
    else this.uncosigned.delete(workspaceId);
    if (this.file) appendFileSync(this.file, `${JSON.stringify({ workspace_id: workspaceId, ...view })}\n`, { mode: 0o600 });
  }
}
