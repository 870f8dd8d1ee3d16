/**
 * Group commit for audit events on the hot path, sealing them as it writes.
 *
 * Every decision must be durable before it is answered, but one INSERT per request makes the
 * database round trip the bottleneck. The writer sends what is waiting as ONE multi-row
 * statement as soon as the previous one is done: with no load, an event goes alone at once (no
 * added delay); under load, events that arrive meanwhile share the next statement. Each
 * caller's promise settles only when its event has committed — or fails with its batch (the
 * caller answers 503).
 *
 * The same statement seals the events into their workspace's chain. The writer keeps the
 * chain heads it last wrote or read and hashes each batch's events onto them in memory; the
 * statement appends the seals only if it can lock the head at once and the head is still the
 * one they were computed from (a compare-and-set), and otherwise writes none of that
 * workspace's rows. So the chain never depends on this cache and a request never waits for a
 * head lock:
 * - a workspace whose head this process has not read yet: its events wait for the read (one
 *   round trip), then go;
 * - a compare-and-set that failed (another process, or a sealer, moved or holds the head):
 *   its events are sent again after the head is read again, and if that fails too, written
 *   without a seal and queued for the sealer (chain.ts), as every event used to be.
 * With one process writing a workspace, every decision is sealed in the statement that
 * records it and the sealer has nothing of the writer's to do: no sealing round reads events
 * back, competing with requests for the cores, and holds the head meanwhile. A failed batch is
 * sent again rather than queued: queueing kept the sealer in a cycle, each round moving the
 * head and failing the writer's next batch (docs/decisions/0003-audit-sealing.md).
 */
import type { AuditEvent } from '@warden/contract';
import type { Database } from '../../db/database.ts';
import { type AuditRecord, auditRows, type ChainHead, type HeadMove, insertAuditBatch, readChainHeads } from './audit.service.ts';
import { chainHash } from './chain.ts';

type Rows = ReturnType<typeof auditRows>;

interface Pending {
  rows: Rows;
  /**
   * Compare-and-sets this event may still try; at 0 it is written without a seal, for the
   * sealer. None for an event whose ids verification would read back in another form.
   */
  sealingTries: number;
  resolve: (event: AuditEvent) => void;
  reject: (error: unknown) => void;
}

/** Compare-and-sets an event tries (with a read of the head between) before it is left to the sealer. */
const SEALING_TRIES = 2;

/** Ids in the form PostgreSQL gives them back (what verification hashes). */
const CANONICAL_UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const canonicalIds = ({ row }: Rows) =>
  CANONICAL_UUID.test(row.workspace_id) &&
  CANONICAL_UUID.test(row.id) &&
  (row.agent_id === null || CANONICAL_UUID.test(row.agent_id)) &&
  (row.approval_id === null || CANONICAL_UUID.test(row.approval_id));

export class AuditWriter {
  private queue: Pending[] = [];
  /**
   * One statement at a time: while it commits, the next requests gather into the next one, and
   * the heads below are then exactly what this process last wrote. Statements go through the
   * pool (Database.run; a connection of the writer's own measured worse, the pool's size bounds
   * the risk), and no second one goes out when this one is late: it is late when both cores are
   * busy, and a second one adds to that work (docs/decisions/0002-audit-group-commit.md).
   */
  private writing = false;
  /** Chain heads as this process last wrote or read them: a hint that the statement checks. */
  private readonly heads = new Map<string, ChainHead>();
  /** Events waiting for their workspace's head to be read, and those workspaces. */
  private waiting: Pending[] = [];
  private readonly wanted = new Set<string>();
  private reading = false;

  constructor(
    private readonly database: Database,
    /** Told of every workspace with events queued for it (or possibly queued: a batch whose answer was lost). */
    private readonly sealer: { markDirty(workspaceId: string): void },
    private readonly maxBatch = 500,
  ) {}

  write(workspaceId: string, record: AuditRecord): Promise<AuditEvent> {
    return new Promise((resolve, reject) => {
      const rows = auditRows(workspaceId, record);
      this.queue.push({ rows, sealingTries: canonicalIds(rows) ? SEALING_TRIES : 0, resolve, reject });
      this.pump();
    });
  }

  /**
   * Sends what is waiting now, not at the end of this turn of the event loop: the statement's
   * round trip then overlaps the decoding of the requests that arrived with it, which go in
   * the next one. Deferring it made batches larger but the tail longer
   * (docs/decisions/0002-audit-group-commit.md).
   */
  private pump(): void {
    if (this.writing || this.queue.length === 0) return;
    const batch: Pending[] = [];
    const later: Pending[] = [];
    for (const p of this.queue) {
      const workspaceId = p.rows.row.workspace_id;
      if (p.sealingTries > 0 && !this.heads.has(workspaceId)) {
        this.waiting.push(p);
        this.wanted.add(workspaceId);
      } else (batch.length < this.maxBatch ? batch : later).push(p);
    }
    this.queue = later;
    this.readHeads();
    if (batch.length === 0) return;

    this.writing = true;
    const { seals, heads } = this.sealInMemory(batch);
    insertAuditBatch(
      this.database,
      batch.map((p) => p.rows),
      seals,
      heads,
    )
      .then(
        (advanced) => {
          for (const [workspaceId, { next }] of heads) {
            if (advanced.has(workspaceId)) this.heads.set(workspaceId, next);
            else this.heads.delete(workspaceId);
          }
          const again: Pending[] = [];
          batch.forEach((p, i) => {
            const seal = seals[i];
            const workspaceId = p.rows.row.workspace_id;
            if (!seal) {
              this.sealer.markDirty(workspaceId);
              p.resolve(p.rows.event);
            } else if (advanced.has(workspaceId)) {
              p.rows.event.sequence = seal.sequence;
              p.rows.event.hash = seal.hash;
              p.resolve(p.rows.event);
            } else {
              // Not written: sent again once the head is read again (or, after too many tries, unsealed).
              p.sealingTries -= 1;
              again.push(p);
            }
          });
          this.queue.unshift(...again);
        },
        (error: unknown) => {
          // It may have committed before its answer was lost: its heads are unknown now, and
          // its unsealed events may be queued.
          for (const workspaceId of heads.keys()) this.heads.delete(workspaceId);
          for (const p of batch) {
            this.sealer.markDirty(p.rows.row.workspace_id);
            p.reject(error);
          }
        },
      )
      .finally(() => {
        this.writing = false;
        this.pump();
      });
  }

  /**
   * Hashes the batch's events onto the heads this process knows (in batch order), and says
   * per workspace which head the seals start from and which they lead to.
   */
  private sealInMemory(batch: Pending[]) {
    const seals: (ChainHead | undefined)[] = new Array(batch.length);
    const heads = new Map<string, HeadMove>();
    batch.forEach((p, i) => {
      const workspaceId = p.rows.row.workspace_id;
      const known = this.heads.get(workspaceId);
      if (!known || p.sealingTries === 0) return;
      let head = heads.get(workspaceId);
      if (!head) {
        head = { expected: known, next: known };
        heads.set(workspaceId, head);
      }
      head.next = { sequence: head.next.sequence + 1, hash: chainHash(head.next.hash, p.rows.row) };
      seals[i] = head.next;
    });
    return { seals, heads };
  }

  /**
   * Reads the heads that waiting events need, beside the statements (one read at a time), then
   * sends those events. A head that cannot be read (the read failed, or the workspace is gone)
   * lets its events go without a seal, for the sealer.
   */
  private readHeads(): void {
    if (this.reading || this.wanted.size === 0) return;
    this.reading = true;
    const wanted = [...this.wanted];
    this.wanted.clear();
    const release = (read: Map<string, ChainHead>) => {
      for (const [workspaceId, head] of read) this.heads.set(workspaceId, head);
      for (const workspaceId of wanted) this.wanted.delete(workspaceId);
      const asked = new Set(wanted);
      const waiting = this.waiting;
      this.waiting = [];
      for (const p of waiting) {
        const workspaceId = p.rows.row.workspace_id;
        if (!asked.has(workspaceId)) {
          this.waiting.push(p); // its workspace is asked for by the next read
          continue;
        }
        if (!this.heads.has(workspaceId)) p.sealingTries = 0;
        this.queue.push(p);
      }
    };
    readChainHeads(this.database, wanted)
      .then(release, () => release(new Map()))
      .finally(() => {
        this.reading = false;
        this.readHeads();
        this.pump();
      });
  }
}
