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
 * The same statement seals the events into their workspace's Merkle tree. The writer keeps the
 * right edge of each tree it last wrote or read and appends each batch's leaves to a copy of it
 * in memory; the statement stores the leaves and the subtrees they complete only if it can lock
 * the tree head at once and the head is still at the size they were computed from (a
 * compare-and-set), and otherwise writes none of that workspace's rows. So the tree never
 * depends on this cache and a request never waits for a head lock:
 * - a workspace whose head this process has not read yet: its events wait for the read (one
 *   round trip), then go;
 * - a compare-and-set that failed (another process, or a sealer, moved or holds the head):
 *   its events are sent again after the head is read again, and if that fails too, written
 *   without a seal and queued for the sealer (tree.ts).
 * With one process writing a workspace, every decision is sealed in the statement that
 * records it and the sealer has nothing of the writer's to do: no sealing round reads events
 * back, competing with requests for the cores, and holds the head meanwhile. A failed batch is
 * sent again rather than queued: queueing kept the sealer in a cycle, each round moving the
 * head and failing the writer's next batch (docs/decisions/0003-audit-sealing.md).
 */
import { SpanStatusCode, trace } from '@opentelemetry/api';
import type { AuditEvent } from '@warden/contract';
import type { Database } from '../../db/database.ts';
import { NO_TELEMETRY, type Telemetry } from '../../observability/telemetry.ts';
import { type HeadMove, insertAuditBatch } from './audit.repository.ts';
import { type AuditRecord, auditRows } from './audit-event.ts';
import type { Frontier } from './merkle.ts';
import { readTreeHeads, type Seal, type StoredNode } from './tree.repository.ts';
import { appendEvents, headOf, readFrontiers } from './tree.ts';

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

const tracer = trace.getTracer('warden');

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
  /** Trees (their right edges) as this process last wrote or read them: a hint that the statement checks. */
  private readonly heads = new Map<string, Frontier>();
  /** Events waiting for their workspace's head to be read, and those workspaces. */
  private waiting: Pending[] = [];
  private readonly wanted = new Set<string>();
  private reading = false;
  /** When the last statement failed, while none has committed since (readiness reads it). */
  private failedAt: number | undefined;

  constructor(
    private readonly database: Database,
    private readonly maxBatch = 500,
    private readonly telemetry: Telemetry = NO_TELEMETRY,
  ) {}

  /** When the last statement failed, if none has committed since. */
  failingSince(): number | undefined {
    return this.failedAt;
  }

  write(workspaceId: string, record: AuditRecord): Promise<AuditEvent> {
    // The time from handing the event over to its commit (its group's statement), in the caller's trace.
    const span = tracer.startSpan('warden.audit.commit');
    const written = new Promise<AuditEvent>((resolve, reject) => {
      const rows = auditRows(workspaceId, record);
      this.queue.push({ rows, sealingTries: canonicalIds(rows) ? SEALING_TRIES : 0, resolve, reject });
      this.pump();
    });
    // Tracing off: the span records nothing, so no second promise per decision to end it.
    if (!span.isRecording()) return written;
    return written.then(
      (event) => {
        span.end();
        return event;
      },
      (error: unknown) => {
        span.setStatus({ code: SpanStatusCode.ERROR });
        span.end();
        throw error;
      },
    );
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
    const started = performance.now();
    const { seals, heads, nodes, frontiers } = this.sealInMemory(batch);
    insertAuditBatch(
      this.database,
      batch.map((p) => p.rows),
      seals,
      heads,
      nodes,
    )
      .then(
        (advanced) => {
          this.failedAt = undefined;
          for (const [workspaceId, frontier] of frontiers) {
            if (advanced.has(workspaceId)) this.heads.set(workspaceId, frontier);
            else this.heads.delete(workspaceId);
          }
          const again: Pending[] = [];
          batch.forEach((p, i) => {
            const seal = seals[i];
            const workspaceId = p.rows.row.workspace_id;
            if (!seal) {
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
          // Events sent again (their compare-and-set failed) are counted when they are written.
          this.telemetry.auditCommit(batch.length - again.length, (performance.now() - started) / 1000, true);
        },
        (error: unknown) => {
          this.failedAt = Date.now();
          this.telemetry.auditCommit(batch.length, (performance.now() - started) / 1000, false);
          // It may have committed before its answer was lost: its heads are unknown now (its
          // unsealed events, if any, are in the queue, which the sealer reads).
          for (const workspaceId of heads.keys()) this.heads.delete(workspaceId);
          for (const p of batch) p.reject(error);
        },
      )
      .finally(() => {
        this.writing = false;
        this.pump();
      });
  }

  /**
   * Appends the batch's events (in batch order) to copies of the trees this process knows, and
   * says per workspace which size the seals start from and which head they lead to, with the
   * subtrees they complete.
   */
  private sealInMemory(batch: Pending[]) {
    const seals: (Seal | undefined)[] = new Array(batch.length);
    const heads = new Map<string, HeadMove>();
    const frontiers = new Map<string, Frontier>();
    const nodes: (StoredNode & { workspace_id: string })[] = [];
    batch.forEach((p, i) => {
      const workspaceId = p.rows.row.workspace_id;
      const known = this.heads.get(workspaceId);
      if (!known || p.sealingTries === 0) return;
      let frontier = frontiers.get(workspaceId);
      if (!frontier) {
        frontier = known.clone();
        frontiers.set(workspaceId, frontier);
        heads.set(workspaceId, { expected: known.size, next: headOf(known) });
      }
      const appended = appendEvents(frontier, [p.rows.row]);
      seals[i] = appended.seals[0];
      for (const node of appended.nodes) nodes.push({ workspace_id: workspaceId, ...node });
    });
    for (const [workspaceId, frontier] of frontiers) heads.get(workspaceId)!.next = headOf(frontier);
    return { seals, heads, nodes, frontiers };
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
    const release = (read: Map<string, Frontier>) => {
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
    readTreeHeads(this.database, wanted)
      .then((heads) => readFrontiers(this.database.db, heads))
      .then(release, () => release(new Map()))
      .finally(() => {
        this.reading = false;
        this.readHeads();
        this.pump();
      });
  }
}
