/**
 * Signed checkpoints of the audit trees, and the key that signs them. The key lives outside the
 * database (WARDEN_AUDIT_SIGNING_KEY, or `audit-signing.key` beside `master.key`), so a database
 * writer cannot sign a tree it rewrote. Each checkpoint leaves the database twice as it is made:
 * as an `audit.checkpoint` webhook (its outbox row is written with it) and as a line appended to
 * the checkpoint file. Every process checkpoints; a size already checkpointed by another one is
 * skipped by the table's primary key.
 */
import { appendFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Kysely } from 'kysely';
import { readOrCreateSecretFile } from '../../db/data-dir-lock.ts';
import type { DB } from '../../db/schema.ts';
import type { Logger } from '../../logger.ts';
import { insertCheckpoint, treesDueForCheckpoint } from './audit.repository.ts';
import {
  exportSigningKey,
  formatVerifierKey,
  generateSigningKey,
  keyId,
  loadSigningKey,
  noteSigner,
  openCheckpoint,
  type ParsedCheckpoint,
  type SigningKey,
  signCheckpoint,
} from './checkpoint.ts';

/** Signs the checkpoints of every workspace's log, each named by its origin `<log name>/audit/<workspace id>`. */
export interface AuditSigner {
  key: SigningKey;
  logName: string;
}

export function loadAuditSigner(config: { auditSigningKey: string | undefined; dataDir: string; auditLogName: string }): AuditSigner {
  const stored =
    config.auditSigningKey ?? readOrCreateSecretFile(config.dataDir, 'audit-signing.key', () => exportSigningKey(generateSigningKey()));
  // An in-memory database gets a throw-away key, as it gets a throw-away master key.
  return { key: stored === undefined ? generateSigningKey() : loadSigningKey(stored), logName: config.auditLogName };
}

export const originOf = (signer: AuditSigner, workspaceId: string) => `${signer.logName}/audit/${workspaceId}`;

/** The public key as GET /audit/signing-key shows it for a workspace's log. */
export function signingKeyOf(signer: AuditSigner, workspaceId: string) {
  const name = originOf(signer, workspaceId);
  return {
    algorithm: 'ed25519' as const,
    key_name: name,
    key_id: keyId(name, signer.key.publicKey).toString(16).padStart(8, '0'),
    public_key: Buffer.from(signer.key.publicKey).toString('base64'),
    verifier_key: formatVerifierKey(name, signer.key.publicKey),
  };
}

/** A stored note opened with the signer's own public key; undefined when it does not verify. */
export function openSignedCheckpoint(signer: AuditSigner, note: string): ParsedCheckpoint | undefined {
  try {
    return openCheckpoint(note, formatVerifierKey(parseOrigin(note), signer.key.publicKey));
  } catch {
    return undefined;
  }
}

/** The first line of a note: its origin, which is also the key's name. */
const parseOrigin = (note: string) => note.slice(0, Math.max(0, note.indexOf('\n')));

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

export class Checkpointer {
  private last = 0;

  constructor(
    private readonly db: Kysely<DB>,
    private readonly signer: AuditSigner,
    private readonly logger: Logger,
    private readonly intervalMs: number,
    /** Where each checkpoint is appended (one JSON line); undefined: nowhere. */
    private readonly file: string | undefined,
  ) {}

  static fileFor(config: { auditCheckpointFile: string | undefined; dataDir: string }): string | undefined {
    if (config.auditCheckpointFile) return config.auditCheckpointFile;
    return config.dataDir.startsWith('memory://') ? undefined : join(config.dataDir, 'audit-checkpoints.ndjson');
  }

  /** Checkpoints every tree that grew since its last checkpoint, at most once per interval. */
  async run(now = Date.now()): Promise<void> {
    if (now - this.last < this.intervalMs) return;
    this.last = now;
    for (const tree of await treesDueForCheckpoint(this.db)) {
      try {
        await this.checkpoint(tree.workspace_id, Number(tree.tree_size), tree.root_hash, new Date(now));
      } catch (cause) {
        this.logger.error('audit checkpoint failed', { workspaceId: tree.workspace_id, cause });
      }
    }
  }

  private async checkpoint(workspaceId: string, size: number, rootHash: string, time: Date): Promise<void> {
    const origin = originOf(this.signer, workspaceId);
    const signer = noteSigner(this.signer.key, origin);
    // The note carries whole seconds; the row keeps the same instant, so both say one time.
    const timestamp = new Date(Math.floor(time.getTime() / 1000) * 1000);
    const note = signCheckpoint({ origin, size, rootHash: Buffer.from(rootHash, 'hex'), time: timestamp }, signer);
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
    if (this.file) appendFileSync(this.file, `${JSON.stringify({ workspace_id: workspaceId, ...view })}\n`, { mode: 0o600 });
  }
}
