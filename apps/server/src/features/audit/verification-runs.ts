/**
 * Where verifications run, and how workspaces share them.
 *
 * An incremental verification reads the events since the last verified size (and a bounded
 * re-check), so it runs on the request thread. A full one reads and hashes every event (its
 * cost on the request thread: docs/decisions/0018-audit-signer-checks.md, addendum), so it
 * runs on a thread of its own with its own connection on
 * PostgreSQL (db/database-thread.ts), and on the embedded database (one in-process session) on
 * this thread in batches, yielding between them. Either way one full verification runs at a
 * time per process, in arrival order, and a workspace has at most one running or waiting: a
 * second request joins it and gets its result. `status` says how far it has come.
 */
import type { AuditVerificationStatus } from '@warden/contract';
import type { Kysely } from 'kysely';
import { DatabaseThread } from '../../db/database-thread.ts';
import type { DB } from '../../db/schema.ts';
import type { Logger } from '../../logger.ts';
import { siblingModule } from '../../shared/thread-boot.ts';
import type { AuditLogKey } from './checkpointer.ts';
import { type SignedHead, type Verification, type VerificationProgress, verifyTree } from './verification.ts';

/** A full verification as the thread receives it (the log's public key, not the signer's private one). */
export interface FullVerification {
  workspaceId: string;
  publicKey: string;
  logName: string;
  signed: SignedHead | undefined;
}

type Status = AuditVerificationStatus['data'];

interface Run {
  status: Status;
  result: Promise<Verification>;
}

const yieldToOthers = () => new Promise<void>((resolve) => setImmediate(resolve));
const ENTRY = siblingModule('verification-thread.worker', import.meta.url);

export const logKeyOf = (request: FullVerification): AuditLogKey => ({
  key: { publicKey: Buffer.from(request.publicKey, 'base64') },
  logName: request.logName,
});

export class AuditVerifications {
  /** Full verifications running or waiting, by workspace. */
  private readonly runs = new Map<string, Run>();
  /** The turn of the next full verification: each starts when the one before it has ended. */
  private turn: Promise<unknown> = Promise.resolve();
  private readonly thread: DatabaseThread<FullVerification, Verification, VerificationProgress> | undefined;
  private readonly runInline: (request: FullVerification, progress?: (progress: VerificationProgress) => void) => Promise<Verification>;

  constructor(
    private readonly db: Kysely<DB>,
    private readonly key: AuditLogKey,
    /** The last checkpoint the signer signed for a log, kept outside the database. */
    private readonly lastSigned: (workspaceId: string) => SignedHead | undefined,
    databaseUrl: string | undefined,
    logger: Logger,
  ) {
    const inline = (request: FullVerification, progress?: (progress: VerificationProgress) => void) =>
      verifyTree(db, key, request.workspaceId, { full: true, signed: request.signed, progress, pause: yieldToOthers });
    this.runInline = inline;
    this.thread =
      databaseUrl === undefined
        ? undefined
        : new DatabaseThread(
            {
              name: 'the audit verification thread',
              entry: ENTRY,
              databaseUrl,
              onStopped: (cause, inlineNow) =>
                logger.error('audit verification thread stopped', { cause, verifyingOnRequestThread: inlineNow }),
            },
            inline,
          );
  }

  verify(workspaceId: string, full: boolean): Promise<Verification> {
    if (!full) return verifyTree(this.db, this.key, workspaceId, { full, signed: this.lastSigned(workspaceId) });
    const joined = this.runs.get(workspaceId);
    if (joined) return joined.result;
    const status: Status = { state: 'queued', queued_at: new Date().toISOString(), started_at: null, checked: 0, total: null };
    const result = this.turn.then(() => {
      status.state = 'running';
      status.started_at = new Date().toISOString();
      const request: FullVerification = {
        workspaceId,
        publicKey: Buffer.from(this.key.key.publicKey).toString('base64'),
        logName: this.key.logName,
        signed: this.lastSigned(workspaceId),
      };
      const progress = ({ checked, total }: VerificationProgress) => {
        status.checked = checked;
        status.total = total;
      };
      return this.thread ? this.thread.call(request, progress) : this.runInline(request, progress);
    });
    const ended = result.finally(() => this.runs.delete(workspaceId));
    this.turn = ended.catch(() => undefined);
    this.runs.set(workspaceId, { status, result: ended });
    return ended;
  }

  /** The workspace's full verification, running or waiting; `idle` when there is none. */
  status(workspaceId: string): Status {
    const run = this.runs.get(workspaceId);
    return run ? { ...run.status } : { state: 'idle', queued_at: null, started_at: null, checked: 0, total: null };
  }

  close(): Promise<void> {
    return this.thread?.close() ?? Promise.resolve();
  }
}
