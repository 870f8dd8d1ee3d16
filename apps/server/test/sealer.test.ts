/** The sealer on a migrated database: it keeps up with a backlog and extends one valid chain. */
import { randomUUID } from 'node:crypto';
import { CompiledQuery } from 'kysely';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { migratedDatabase } from '../../../tests/support/database.ts';
import type { Database } from '../src/db/database.ts';
import { insertAuditRows } from '../src/features/audit/audit.repository.ts';
import { auditRows } from '../src/features/audit/audit-event.ts';
import { loadAuditSigner } from '../src/features/audit/checkpointer.ts';
import { SealerThread } from '../src/features/audit/sealer-thread.ts';
import { sealsWithEventsQuery, unsealedEventsQuery } from '../src/features/audit/tree.repository.ts';
import { AuditSealer, inlineRounds, type SealingRounds, sealWorkspace } from '../src/features/audit/tree.ts';
import { verifyTree } from '../src/features/audit/verification.ts';
import { createLogger } from '../src/logger.ts';

let database: Database;
let databaseUrl: string | undefined;
let close: (() => Promise<void>) | undefined;
const workspaceId = randomUUID();
const signer = loadAuditSigner({ auditSigningKey: undefined, dataDir: 'memory://', auditLogName: 'warden' });
/** Verifies the workspace's whole tree. */
const verifyChain = (db: Database['db'], workspaceId: string) => verifyTree(db, signer, workspaceId, { full: true });

beforeAll(async () => {
  ({ database, url: databaseUrl, close } = await migratedDatabase());
  await database.db
    .insertInto('workspaces')
    .values({ id: workspaceId, slug: `ws-${workspaceId}`, name: 'Sealer test' })
    .execute();
}, 60_000);

afterAll(() => close?.());

async function write(count: number, workspace = workspaceId): Promise<void> {
  const rows = Array.from({ length: count }, (_, i) =>
    auditRows(workspace, {
      source: 'manual',
      action: `act.${i}`,
      result: 'allowed',
      severity: 'info',
      context: { i, nested: { ok: true } },
    }),
  );
  for (let at = 0; at < rows.length; at += 500) await insertAuditRows(database.db, rows.slice(at, at + 500));
}

/** Sealing rounds as the server runs them: in a thread of their own on PostgreSQL, inline on PGlite. */
const serverRounds = (): SealingRounds =>
  databaseUrl
    ? new SealerThread(databaseUrl, createLogger(true), inlineRounds(database.db, createLogger(true)))
    : inlineRounds(database.db, createLogger(true));

/** A logger that keeps what it is told. */
function recordingLogger() {
  const errors: { message: string; fields?: Record<string, unknown> }[] = [];
  return { errors, info: () => {}, error: (message: string, fields?: Record<string, unknown>) => errors.push({ message, fields }) };
}

describe('AuditSealer.round', () => {
  it('seals a backlog larger than one batch in one round, into one valid chain', async () => {
    await write(2_500);
    const sealer = new AuditSealer(database.db, serverRounds(), 60_000);
    await sealer.round();
    const verification = await verifyChain(database.db, workspaceId);
    expect(verification).toMatchObject({ valid: true, checked: 2_500, unsealed: 0, first_invalid_sequence: null });

    await write(10);
    await sealer.stop();
    expect(await verifyChain(database.db, workspaceId)).toMatchObject({ valid: true, checked: 2_510, unsealed: 0 });
  }, 60_000);
});

describe('sealWorkspace', () => {
  it('reads a backlog past its last full batch, and still seals events queued before that key', async () => {
    const workspace = randomUUID();
    await database.db
      .insertInto('workspaces')
      .values({ id: workspace, slug: `ws-${workspace}`, name: 'Late events' })
      .execute();
    await write(2_500, workspace);
    expect(await sealWorkspace(database.db, workspace)).toBe(1_000);
    // queued behind the batch's last key: an hour older (a transaction that committed late)
    vi.useFakeTimers({ toFake: ['Date'] });
    try {
      vi.setSystemTime(Date.now() - 3_600_000);
      await write(3, workspace);
    } finally {
      vi.useRealTimers();
    }
    const batches: number[] = [];
    for (let sealed = await sealWorkspace(database.db, workspace); sealed > 0; sealed = await sealWorkspace(database.db, workspace))
      batches.push(sealed);
    // the second batch is read past the first's key; the short third reads again from the start
    expect(batches).toEqual([1_000, 503]);
    expect(await verifyChain(database.db, workspace)).toMatchObject({ valid: true, checked: 2_503, unsealed: 0 });
  }, 60_000);

  it('a read past a key starts at that key in the queue index, whatever lies before it', async () => {
    const after = { event_timestamp: new Date().toISOString(), event_id: randomUUID() };
    const plan = await planOf(unsealedEventsQuery(database.db, workspaceId, 1_000, after).compile());
    expect(plan).toMatch(/Index Cond: \(\(workspace_id = \S+\) AND \(ROW\(event_timestamp, event_id\) > ROW\(/);
  }, 60_000);
});

describe.runIf(process.env.DATABASE_URL)('SealerThread', () => {
  it('a round whose sealing fails keeps its workspace dirty and reports the failure; nothing is sealed wrongly', async () => {
    const logger = recordingLogger();
    const unreachable = 'postgres://postgres@127.0.0.1:1/nowhere';
    const thread = new SealerThread(unreachable, logger, inlineRounds(database.db, logger));
    try {
      expect(await thread.run([workspaceId])).toEqual([workspaceId]);
      expect(logger.errors).toEqual([
        expect.objectContaining({ message: 'audit sealing failed', fields: expect.objectContaining({ workspaceId }) }),
      ]);
    } finally {
      await thread.close();
    }
  }, 30_000);

  it('a thread that cannot start at all leaves sealing to the request thread, and says so', async () => {
    await write(5);
    const logger = recordingLogger();
    const missing = new URL('./no-such-entry.ts', import.meta.url).href;
    const thread = new SealerThread(databaseUrl as string, logger, inlineRounds(database.db, logger), missing);
    const sealer = new AuditSealer(database.db, thread, 60_000);
    await sealer.round(); // the thread fails: the workspace stays dirty
    await sealer.stop(); // the next round seals on this thread
    expect(logger.errors[0]).toMatchObject({ message: 'audit sealer thread stopped', fields: { sealingOnRequestThread: true } });
    expect(await verifyChain(database.db, workspaceId)).toMatchObject({ valid: true, checked: 2_515, unsealed: 0 });
  }, 30_000);
});

/** The plan PostgreSQL (or PGlite) picks for a query, after ANALYZE. */
async function planOf(query: { sql: string; parameters: readonly unknown[] }): Promise<string> {
  await database.db.executeQuery(CompiledQuery.raw('ANALYZE'));
  const plan = await database.db.executeQuery<{ 'QUERY PLAN': string }>(CompiledQuery.raw(`EXPLAIN ${query.sql}`, [...query.parameters]));
  return plan.rows.map((row) => row['QUERY PLAN']).join('\n');
}

describe('reading events back by key', () => {
  it('unsealedEvents probes each queued event by its key, never scanning the workspace history', async () => {
    await write(3_000);
    const plan = await planOf(unsealedEventsQuery(database.db, workspaceId, 1_000).compile());
    expect(plan).toMatch(/Index Scan using \S+ on audit_events/);
    expect(plan).not.toMatch(/Seq Scan on audit_events/);
  }, 60_000);

  it('the sealing queue is never read with parallel workers (its file grows with dead rows between vacuums)', async () => {
    const table = await database.db.executeQuery<{ reloptions: string[] | null }>(
      CompiledQuery.raw("SELECT reloptions FROM pg_class WHERE relname = 'audit_unsealed'"),
    );
    expect(table.rows[0]?.reloptions).toContain('parallel_workers=0');
  });

  it('sealsWithEvents (verification) probes each sealed event by its key, so verifying is linear in the history', async () => {
    const sealer = new AuditSealer(database.db, inlineRounds(database.db, createLogger(true)), 60_000);
    await sealer.round();
    const plan = await planOf(sealsWithEventsQuery(database.db, workspaceId, 100, 1_000).compile());
    expect(plan).toMatch(/Index Scan using \S+ on audit_events/);
    expect(plan).not.toMatch(/Seq Scan on audit_events/);
    expect(await verifyChain(database.db, workspaceId)).toMatchObject({
      valid: true,
      checked: process.env.DATABASE_URL ? 5_515 : 5_510,
      unsealed: 0,
    });
  }, 60_000);
});
