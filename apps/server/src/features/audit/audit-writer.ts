/**
 * Group commit for audit events on the hot path. Every decision must be durable before it is
 * answered, but one INSERT per request makes the database round trip the bottleneck. The
 * writer sends what is waiting as ONE multi-row statement as soon as a connection is free:
 * with no load, an event goes alone at once (no added delay); under load, events that arrive
 * while earlier batches are in flight share the next statement. Each caller's promise
 * settles only when its batch has committed — or fails with it (the caller answers 503).
 */
import type { AuditEvent } from '@warden/contract';
import type { Database } from '../../db/database.ts';
import { type AuditRecord, auditRows, insertAuditRowsAlone } from './audit.service.ts';

interface Pending {
  rows: ReturnType<typeof auditRows>;
  resolve: (event: AuditEvent) => void;
  reject: (error: unknown) => void;
}

export class AuditWriter {
  private queue: Pending[] = [];
  private inFlight = 0;

  constructor(
    private readonly database: Database,
    /**
     * Statements in flight at once. One: while it commits, the next requests gather into the
     * next statement. Measured on PostgreSQL against 4 in flight: 2,988 vs 2,487 decisions/s
     * closed loop, 0.089 vs 0.144 ms of database CPU per decision, open-loop p50 4.8 vs 9.2 ms.
     */
    private readonly maxInFlight = 1,
    private readonly maxBatch = 500,
  ) {}

  write(workspaceId: string, record: AuditRecord): Promise<AuditEvent> {
    return new Promise((resolve, reject) => {
      this.queue.push({ rows: auditRows(workspaceId, record), resolve, reject });
      this.pump();
    });
  }

  private pump(): void {
    while (this.inFlight < this.maxInFlight && this.queue.length > 0) {
      const batch = this.queue.splice(0, this.maxBatch);
      this.inFlight += 1;
      insertAuditRowsAlone(
        this.database,
        batch.map((p) => p.rows),
      )
        .then(
          () => {
            for (const p of batch) p.resolve(p.rows.event);
          },
          (error: unknown) => {
            for (const p of batch) p.reject(error);
          },
        )
        .finally(() => {
          this.inFlight -= 1;
          this.pump();
        });
    }
  }
}
