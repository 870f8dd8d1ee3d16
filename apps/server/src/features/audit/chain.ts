/**
 * The tamper-evident chain over a workspace's audit events: each event gets one seal, with
 * hash = sha256(previous hash + "\n" + canonical event), appended by whoever holds the
 * workspace's chain head row (a row lock), so each seal extends the chain exactly once.
 *
 * Two ways in. The hot path's group-commit writer (audit-writer.ts) seals the events it
 * records in the statement that records them, when it can lock the head at once and the head
 * is where it believes (a compare-and-set; it never waits for the lock). Every other event —
 * written inside a transaction, by a writer that has not read the head yet, or whose
 * compare-and-set failed — is queued in audit_unsealed by the statement that inserts it, and a
 * sealer in every server process (on PostgreSQL in a worker thread of its own, see
 * sealer-thread.ts) seals the queue in batches shortly after, holding the head's lock.
 * Events and seals are immutable (triggers), so changing or removing an event after sealing
 * breaks verification at that event's sequence.
 */
import { hash as digest } from 'node:crypto';
import type { Kysely, Selectable } from 'kysely';
import { stableJson } from '../../canonical-json.ts';
import type { AuditEventsTable, DB } from '../../db/schema.ts';
import type { Logger } from '../../logger.ts';
import { countUnsealed, recordSeals, type Seal, sealsWithEvents, unsealedEvents, workspacesWithUnsealed } from './audit.repository.ts';

const BATCH = 1000;
/**
 * Batches one round seals per workspace at most before the next round goes on: 10 × 1,000
 * events per round (a round every 500 ms by default) keeps up with 20,000 events/s per process;
 * sealing only one batch per round would fall behind a process writing more than 2,000/s.
 */
const BATCHES_PER_ROUND = 10;
/** Events hashed before the sealer yields to the event loop (bounds the pause it adds to requests). */
const HASHES_PER_TURN = 100;

type EventFields = Selectable<AuditEventsTable>;

/** The event's fields in the order the canonical array lists them (never reorder: hashes depend on it). */
const CANONICAL_FIELDS = [
  'workspace_id',
  'id',
  'event_timestamp',
  'source',
  'agent',
  'agent_id',
  'action',
  'resource',
  'tool',
  'environment',
  'user_name',
  'policy',
  'result',
  'severity',
  'message',
  'approval_id',
  'request_id',
  'context',
] as const satisfies ReadonlyArray<keyof EventFields>;

/**
 * sha256(previous hash + "\n" + canonical event), the canonical event being stableJson of the
 * array of CANONICAL_FIELDS with the timestamp as an ISO string. The array is written here
 * directly (its columns are strings or null; only `context` needs stableJson): the same bytes,
 * without stableJson's stack for the 18 top-level values, and hashed one-shot — the sealer
 * hashes every event, and this was its main cost in JavaScript.
 */
export function chainHash(previousHash: string, e: EventFields): string {
  let canonical = '[';
  for (const field of CANONICAL_FIELDS) {
    const value = field === 'event_timestamp' ? new Date(e.event_timestamp).toISOString() : e[field];
    if (field !== 'workspace_id') canonical += ',';
    canonical += value !== null && typeof value === 'object' ? stableJson(value) : JSON.stringify(value ?? null);
  }
  return digest('sha256', `${previousHash}\n${canonical}]`, 'hex');
}

/** Locks a workspace's chain head (creating it on its first seal) and returns it. */
async function lockChainHead(trx: Kysely<DB>, workspaceId: string) {
  const lock = () => trx.selectFrom('audit_chain_heads').selectAll().where('workspace_id', '=', workspaceId).forUpdate().executeTakeFirst();
  const head = await lock();
  if (head) return head;
  await trx
    .insertInto('audit_chain_heads')
    .values({ workspace_id: workspaceId, last_sequence: 0, last_hash: '' })
    .onConflict((oc) => oc.doNothing())
    .execute();
  const created = await lock();
  if (!created) throw new Error(`audit chain head of workspace ${workspaceId} vanished`);
  return created;
}

/** Seals up to one batch of a workspace's unsealed events; returns how many. */
export async function sealWorkspace(db: Kysely<DB>, workspaceId: string): Promise<number> {
  return db.transaction().execute(async (trx) => {
    const head = await lockChainHead(trx, workspaceId);
    const events = await unsealedEvents(trx, workspaceId, BATCH);
    if (events.length === 0) return 0;
    let sequence = Number(head.last_sequence);
    let hash = head.last_hash;
    const seals: Seal[] = [];
    for (const event of events) {
      // Hashing a full batch takes milliseconds: let waiting requests run in between.
      if (seals.length > 0 && seals.length % HASHES_PER_TURN === 0) await new Promise(setImmediate);
      hash = chainHash(hash, event);
      sequence += 1;
      seals.push({ sequence, event_id: event.id, event_timestamp: event.event_timestamp, hash });
    }
    await recordSeals(trx, workspaceId, seals);
    return events.length;
  });
}

export interface Verification {
  valid: boolean;
  checked: number;
  unsealed: number;
  first_invalid_sequence: number | null;
  verified_at: string;
}

export async function verifyChain(db: Kysely<DB>, workspaceId: string): Promise<Verification> {
  // One snapshot for the seals and the unsealed count, so a batch sealed meanwhile cannot be
  // missed by one and seen by the other.
  return db
    .transaction()
    .setIsolationLevel('repeatable read')
    .execute(async (trx) => {
      let previous = '';
      let checked = 0;
      let after = 0;
      let firstInvalid: number | null = null;
      for (;;) {
        const rows = await sealsWithEvents(trx, workspaceId, after, BATCH);
        for (const row of rows) {
          const sequence = Number(row.sequence);
          checked += 1;
          const intact = row.id !== null && sequence === after + 1 && chainHash(previous, row as EventFields) === row.seal_hash;
          if (!intact && firstInvalid === null) firstInvalid = sequence;
          previous = row.seal_hash;
          after = sequence;
        }
        if (rows.length < BATCH || firstInvalid !== null) break;
      }
      return {
        valid: firstInvalid === null,
        checked,
        unsealed: await countUnsealed(trx, workspaceId),
        first_invalid_sequence: firstInvalid,
        verified_at: new Date().toISOString(),
      };
    });
}

/**
 * One sealing round over `workspaceIds`: each gets up to BATCHES_PER_ROUND batches. Returns the
 * workspaces that still have work (their share of the round used up, or their sealing failed,
 * reported to `failed`), to be sealed again next round.
 */
export async function sealRound(
  db: Kysely<DB>,
  workspaceIds: readonly string[],
  failed: (workspaceId: string, cause: unknown) => void,
): Promise<string[]> {
  const again: string[] = [];
  for (const workspaceId of workspaceIds) {
    try {
      // A full batch means more may wait: seal on (letting other work run in between), and
      // keep the workspace for the next round if the round's share is used up.
      let batches = 1;
      while ((await sealWorkspace(db, workspaceId)) === BATCH) {
        if (batches++ === BATCHES_PER_ROUND) {
          again.push(workspaceId);
          break;
        }
        await new Promise(setImmediate);
      }
    } catch (error) {
      again.push(workspaceId);
      failed(workspaceId, error);
    }
  }
  return again;
}

/** Where sealing rounds run: in this thread, or in a worker thread (sealer-thread.ts). */
export interface SealingRounds {
  run(workspaceIds: readonly string[]): Promise<string[]>;
  close(): Promise<void>;
}

/** Rounds on this thread's database (the embedded database has only this thread's session). */
export function inlineRounds(db: Kysely<DB>, logger: Logger): SealingRounds {
  return {
    run: (workspaceIds) =>
      sealRound(db, workspaceIds, (workspaceId, cause) => logger.error('audit sealing failed', { workspaceId, cause })),
    close: async () => {},
  };
}

/**
 * Seals the workspaces this process wrote events for, every `intervalMs`. At start it also
 * seals every workspace with unsealed events (events written just before a crash).
 */
export class AuditSealer {
  private readonly dirty = new Set<string>();
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> = Promise.resolve();

  constructor(
    private readonly db: Kysely<DB>,
    private readonly rounds: SealingRounds,
    private readonly intervalMs: number,
  ) {}

  markDirty(workspaceId: string): void {
    this.dirty.add(workspaceId);
  }

  async start(): Promise<void> {
    for (const workspaceId of await workspacesWithUnsealed(this.db)) this.dirty.add(workspaceId);
    this.timer = setInterval(() => {
      this.running = this.running.then(() => this.sealDirty());
    }, this.intervalMs);
    this.timer.unref();
  }

  async sealDirty(): Promise<void> {
    if (this.dirty.size === 0) return;
    const workspaces = [...this.dirty];
    this.dirty.clear();
    // A round that could not run at all (its thread died) loses nothing: all stay dirty.
    const again = await this.rounds.run(workspaces).catch(() => workspaces);
    for (const workspaceId of again) this.dirty.add(workspaceId);
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.running;
    await this.sealDirty().catch(() => undefined);
    await this.rounds.close();
  }
}
