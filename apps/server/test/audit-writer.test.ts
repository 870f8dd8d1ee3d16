/**
 * The group-commit writer seals the events it records into their workspace's chain (a
 * compare-and-set on the tree head), and leaves to the sealer whatever it cannot seal.
 * On the embedded database, and on a fresh PostgreSQL database when DATABASE_URL is set.
 */
import { randomUUID } from 'node:crypto';
import { CompiledQuery } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migratedDatabase } from '../../../tests/support/database.ts';
import type { Database } from '../src/db/database.ts';
import type { AuditRecord } from '../src/features/audit/audit-event.ts';
import { AuditWriter } from '../src/features/audit/audit-writer.ts';
import { loadAuditSigner } from '../src/features/audit/checkpointer.ts';
import { AuditSealer, inlineRounds } from '../src/features/audit/tree.ts';
import { verifyTree } from '../src/features/audit/verification.ts';
import { createLogger } from '../src/logger.ts';

let database: Database;
let databaseUrl: string | undefined;
let close: (() => Promise<void>) | undefined;

beforeAll(async () => {
  ({ database, url: databaseUrl, close } = await migratedDatabase());
}, 60_000);

afterAll(() => close?.());

async function newWorkspace(): Promise<string> {
  const id = randomUUID();
  await database.db
    .insertInto('workspaces')
    .values({ id, slug: `ws-${id}`, name: 'Writer test' })
    .execute();
  return id;
}

const signer = loadAuditSigner({ auditSigningKey: undefined, dataDir: 'memory://', auditLogName: 'warden' });
/** Verifies the workspace's whole tree. */
const verifyChain = (db: typeof database.db, workspaceId: string) => verifyTree(db, signer, workspaceId, { full: true });

const record = (i: number, extra: Partial<AuditRecord> = {}): AuditRecord => ({
  source: 'evaluation',
  action: `act.${i}`,
  result: 'allowed',
  severity: 'info',
  context: { i },
  ...extra,
});

const count = async (table: 'audit_unsealed' | 'audit_seals' | 'audit_events', workspaceId: string) =>
  Number(
    (
      await database.db
        .selectFrom(table)
        .select((eb) => eb.fn.countAll<number>().as('n'))
        .where('workspace_id', '=', workspaceId)
        .executeTakeFirstOrThrow()
    ).n,
  );

/** A writer that has read the workspace's tree head: it writes until one of its events is sealed as written. */
async function sealingWriter(workspaceId: string, writer = new AuditWriter(database)) {
  for (let i = 0; i < 50; i++) {
    const event = await writer.write(workspaceId, record(i));
    if (event.sequence !== null) return { writer, event };
  }
  throw new Error('the writer sealed none of 50 events');
}

const sealQueued = async (_workspaceId: string) => {
  const sealer = new AuditSealer(database.db, inlineRounds(database.db, createLogger(true)), 60_000);
  await sealer.round();
};

describe('AuditWriter.write', () => {
  it('reads the head of a workspace it has not written yet (one round trip), then seals every event in the statement that records it', async () => {
    const workspaceId = await newWorkspace();
    const writer = new AuditWriter(database);

    const first = await writer.write(workspaceId, record(0));
    expect(first.sequence).toBe(1);
    expect(first.hash).toMatch(/^[0-9a-f]{64}$/);
    for (let round = 0; round < 5; round++) {
      const batch = await Promise.all(Array.from({ length: 40 }, (_, i) => writer.write(workspaceId, record(round * 40 + i))));
      expect(batch.map((event) => event.sequence)).toEqual(Array.from({ length: 40 }, (_, i) => 2 + round * 40 + i));
    }

    // Nothing was left to the sealer: no queue, no sealing round, nothing unsealed.
    expect(await count('audit_unsealed', workspaceId)).toBe(0);
    expect(await count('audit_unsealed', workspaceId)).toBe(0);
    expect(await count('audit_seals', workspaceId)).toBe(201);
    expect(await verifyChain(database.db, workspaceId)).toMatchObject({ valid: true, checked: 201, unsealed: 0 });
  });

  it('a head moved behind its back: sends the batch again after reading the head again, sealed after the other’s events, nothing twice', async () => {
    const workspaceId = await newWorkspace();
    const { writer } = await sealingWriter(workspaceId, new AuditWriter(database));
    // Another writer (another process) appends to the chain.
    const { event: theirs } = await sealingWriter(workspaceId);

    const mine = await writer.write(workspaceId, record(4));
    expect(mine.sequence).toBe((theirs.sequence ?? 0) + 1);
    expect(await count('audit_unsealed', workspaceId)).toBe(0);
    expect(await count('audit_unsealed', workspaceId)).toBe(0);
    const total = await count('audit_events', workspaceId);
    expect(await verifyChain(database.db, workspaceId)).toMatchObject({ valid: true, checked: total, unsealed: 0 });
  });

  it('two writers on one workspace at once: every event recorded once and sealed once, into one valid chain', async () => {
    const workspaceId = await newWorkspace();
    const writers = [new AuditWriter(database), new AuditWriter(database)];
    const events = (
      await Promise.all(
        writers.map(async (writer, w) => {
          const written = [];
          for (let round = 0; round < 20; round++)
            written.push(
              ...(await Promise.all(Array.from({ length: 10 }, (_, i) => writer.write(workspaceId, record(w * 1000 + round * 10 + i))))),
            );
          return written;
        }),
      )
    ).flat();
    const sequences = events.map((event) => event.sequence).filter((sequence) => sequence !== null);
    expect(new Set(sequences).size).toBe(sequences.length);
    expect(sequences.length).toBeGreaterThan(0);

    await sealQueued(workspaceId);
    expect(await count('audit_events', workspaceId)).toBe(400);
    expect(await count('audit_seals', workspaceId)).toBe(400);
    expect(await verifyChain(database.db, workspaceId)).toMatchObject({ valid: true, checked: 400, unsealed: 0 });
  });

  it('seals a context as it is stored: undefined members dropped, dates as strings, nested values and escapes', async () => {
    const workspaceId = await newWorkspace();
    const { writer } = await sealingWriter(workspaceId);
    const contexts: Record<string, unknown>[] = [
      { missing: undefined, at: new Date(0), list: [1, undefined, 'x'] },
      { nested: { deep: { deeper: [true, null, 1.5, -0, 1e21, 5e-324] } }, quote: '" \\ \u2028 😀', z: 1, a: 2 },
      { big: 2 ** 70 + 1, unicode: 'Grüße, 東京', empty: {} },
    ];
    const sealed = await Promise.all(contexts.map((context, i) => writer.write(workspaceId, record(10 + i, { context }))));
    expect(sealed.every((e) => e.sequence !== null)).toBe(true);
    expect(sealed[0]?.context).toEqual({ at: '1970-01-01T00:00:00.000Z', list: [1, null, 'x'] });
    const total = await count('audit_events', workspaceId);
    await sealQueued(workspaceId);
    expect(await verifyChain(database.db, workspaceId)).toMatchObject({ valid: true, checked: total, unsealed: 0 });
  });

  it('leaves an event whose ids are not in the database’s own form to the sealer (its hash is computed from what is stored)', async () => {
    const workspaceId = await newWorkspace();
    const { writer } = await sealingWriter(workspaceId, new AuditWriter(database));
    const agentId = randomUUID().toUpperCase();
    expect(await writer.write(workspaceId, record(2, { agentId }))).toMatchObject({ sequence: null });
    expect(await count('audit_unsealed', workspaceId)).toBeGreaterThan(0);
    const total = await count('audit_events', workspaceId);
    await sealQueued(workspaceId);
    expect(await verifyChain(database.db, workspaceId)).toMatchObject({ valid: true, checked: total, unsealed: 0 });
  });

  it('a failed statement rejects its batch and the writer goes on (a context the database refuses)', async () => {
    const workspaceId = await newWorkspace();
    const writer = new AuditWriter(database);
    await expect(writer.write(workspaceId, record(0, { context: { bad: '\u0000' } }))).rejects.toThrow();
    const { event } = await sealingWriter(workspaceId, writer);
    expect(event.sequence).toBe(1);
  });
});

describe.runIf(process.env.DATABASE_URL)('AuditWriter.write on PostgreSQL', () => {
  it('never waits for a tree head that another transaction holds: the batch is queued instead', async () => {
    const workspaceId = await newWorkspace();
    const { writer } = await sealingWriter(workspaceId, new AuditWriter(database));

    // A sealer elsewhere holds the head (as a sealing round does while it hashes).
    const { Client } = (await import('pg')).default;
    const holder = new Client({ connectionString: databaseUrl });
    await holder.connect();
    try {
      await holder.query('BEGIN');
      await holder.query('SELECT * FROM audit_tree_heads WHERE workspace_id = $1 FOR UPDATE', [workspaceId]);
      const started = Date.now();
      const queued = await writer.write(workspaceId, record(2));
      // Tried, read the head again, tried again — then written for the sealer, which is told.
      expect(queued).toMatchObject({ sequence: null });
      expect(Date.now() - started).toBeLessThan(2_000);
      expect(await count('audit_unsealed', workspaceId)).toBeGreaterThan(0);
    } finally {
      await holder.query('ROLLBACK');
      await holder.end();
    }
    await sealQueued(workspaceId);
    const total = await count('audit_events', workspaceId);
    expect(await verifyChain(database.db, workspaceId)).toMatchObject({ valid: true, checked: total, unsealed: 0 });
  });
});

describe('the writer’s statement', () => {
  it('is one prepared statement whatever the batch (its text does not depend on the rows)', async () => {
    // The statement's name is fixed: a second text under the same name would fail on PostgreSQL.
    const workspaceId = await newWorkspace();
    const writer = new AuditWriter(database);
    await Promise.all(Array.from({ length: 30 }, (_, i) => writer.write(workspaceId, record(i))));
    await Promise.all(Array.from({ length: 3 }, (_, i) => writer.write(workspaceId, record(i))));
    const rows = await database.db.executeQuery<{ n: number }>(
      CompiledQuery.raw('SELECT count(*)::int AS n FROM audit_events WHERE workspace_id = $1', [workspaceId]),
    );
    expect(rows.rows[0]?.n).toBe(33);
  });
});
