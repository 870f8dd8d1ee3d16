/**
 * Sealing: each workspace's audit events are the leaves of a Merkle tree (RFC 9162 hashing,
 * merkle.ts; docs/decisions/0011-audit-merkle-tree.md). Sealing an event appends its leaf, stores
 * the subtrees it completes and moves the tree head, under the head's row lock or a
 * compare-and-set on it, so each event is appended exactly once.
 *
 * Two ways in, one computation (appendEvents). The hot path's group-commit writer
 * (audit-writer.ts) seals the events it records in the statement that records them, when it can
 * lock the head at once and the head is where it believes. Every other event — written inside a
 * transaction, or whose compare-and-set failed — is queued in audit_unsealed by the statement that
 * inserts it, and the sealer of every server process (on PostgreSQL in a worker thread of its
 * own, see sealer-thread.ts) finds the queue and seals it in batches shortly after. Callers never
 * tell the sealer anything: it reads the queue.
 */
import { hash as digest } from 'node:crypto';
import type { Kysely, Selectable } from 'kysely';
import type { AuditEvents, DB } from '../../db/schema.ts';
import { inTransaction } from '../../db/transaction.ts';
import type { Logger } from '../../logger.ts';
import { stableJson } from '../../shared/canonical-json.ts';
import { Frontier, nodeMap } from './merkle.ts';
import {
  lockTreeHead,
  type QueueKey,
  readNodes,
  recordSeals,
  type Seal,
  type StoredNode,
  type TreeHead,
  unsealedEvents,
  workspacesWithUnsealed,
} from './tree.repository.ts';

const BATCH = 1000;
/** Batches one round seals per workspace before the next round goes on (docs/decisions/0003-audit-sealing.md). */
const BATCHES_PER_ROUND = 10;
export type EventFields = Selectable<AuditEvents>;

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
 * The event's canonical bytes (its leaf's input): a JSON array of CANONICAL_FIELDS with the
 * timestamp as an ISO string and `context` in stableJson, written here directly (its other
 * columns are strings or null): the same bytes as stableJson of the whole array, without its
 * stack for the 18 top-level values. Frozen: the spec documents it (AuditInclusionProof.leaf)
 * and test vectors pin it.
 */
export function canonicalEvent(e: EventFields): string {
  let canonical = '[';
  for (const field of CANONICAL_FIELDS) {
    const value = field === 'event_timestamp' ? new Date(e.event_timestamp).toISOString() : e[field];
    if (field !== 'workspace_id') canonical += ',';
    canonical += value !== null && typeof value === 'object' ? stableJson(value) : JSON.stringify(value ?? null);
  }
  return `${canonical}]`;
}

const LEAF_PREFIX = '\u0000';

/** The event's leaf hash: SHA-256(0x00 ‖ canonical bytes), one-shot (the sealer hashes every event). */
export const eventLeafHash = (e: EventFields): Buffer => digest('sha256', LEAF_PREFIX + canonicalEvent(e), 'buffer');

/**
 * Appends events to a tree (the frontier moves): their seals (leaf index + 1 and leaf hash) and
 * the subtrees above the leaves they complete, to store with them.
 */
export function appendEvents(frontier: Frontier, events: readonly EventFields[]): { seals: Seal[]; nodes: StoredNode[] } {
  const seals: Seal[] = [];
  const nodes: StoredNode[] = [];
  for (const event of events) {
    const completed = frontier.append(eventLeafHash(event));
    const leaf = completed[0]!;
    seals.push({ sequence: leaf.index + 1, event_id: event.id, event_timestamp: event.event_timestamp, hash: leaf.hash.toString('hex') });
    for (let k = 1; k < completed.length; k++) {
      const node = completed[k]!;
      nodes.push({ level: node.level, node_index: node.index, hash: node.hash.toString('hex') });
    }
  }
  return { seals, nodes };
}

/** The tree head a frontier is at. */
export const headOf = (frontier: Frontier): TreeHead => ({ size: frontier.size, root: frontier.root().toString('hex') });

/** Reads the stored nodes of these workspaces' trees and rebuilds each one's right edge at its size. */
export async function readFrontiers(db: Kysely<DB>, heads: ReadonlyMap<string, TreeHead>): Promise<Map<string, Frontier>> {
  const wanted = [...heads].flatMap(([workspace_id, head]) =>
    Frontier.nodesToRestore(head.size).map(({ level, index }) => ({ workspace_id, level, node_index: index })),
  );
  const rows = await readNodes(db, wanted);
  const frontiers = new Map<string, Frontier>();
  for (const [workspaceId, head] of heads) {
    const nodes = nodeMap(
      rows
        .filter((row) => row.workspace_id === workspaceId && row.hash !== null)
        .map((row) => ({ level: row.level, index: row.node_index, hash: Buffer.from(row.hash!, 'hex') })),
    );
    const frontier = Frontier.restore(head.size, nodes);
    // A right edge that does not make the stored root would extend a tree that is not the one signed.
    if (frontier.root().toString('hex') !== head.root)
      throw new Error(`the stored audit tree of workspace ${workspaceId} does not make its root`);
    frontiers.set(workspaceId, frontier);
  }
  return frontiers;
}

/**
 * Where a workspace's last full batch ended in its sealing queue, and when its queue was last
 * read from the start: per database handle (one per process or sealer thread), in memory.
 */
interface QueueCursor {
  after: QueueKey;
  fromStartAt: number;
}
const cursors = new WeakMap<Kysely<DB>, Map<string, QueueCursor>>();
/** How long a backlog is read past the last batch before the queue is read from its start again. */
const FROM_START_EVERY_MS = 30_000;

/**
 * Seals up to one batch of a workspace's queued events; returns how many.
 *
 * After a full batch the next one is read past the batch's last key, not from the queue's start:
 * between vacuums the front of the queue is every event sealed since the last vacuum, dead, and a
 * read from the start stepped over all of them on every batch (a backlog of millions sealed ever
 * slower as the tree grew). An event can still be queued before that key (one recorded in a
 * transaction that committed late, or by another process): a read past the key that finds less
 * than a batch reads again from the start, and so does the first batch every FROM_START_EVERY_MS,
 * so such an event waits no longer than that and a batch that comes back short still means the
 * queue holds less than a batch.
 */
export async function sealWorkspace(db: Kysely<DB>, workspaceId: string): Promise<number> {
  let open = cursors.get(db);
  if (!open) {
    open = new Map();
    cursors.set(db, open);
  }
  const cursor = open.get(workspaceId);
  open.delete(workspaceId);
  const now = Date.now();
  const after = cursor && now - cursor.fromStartAt < FROM_START_EVERY_MS ? cursor.after : undefined;
  let fromStart = after === undefined;
  const last = await inTransaction(db, async (trx) => {
    const head = await lockTreeHead(trx, workspaceId);
    let events = await unsealedEvents(trx, workspaceId, BATCH, after);
    if (events.length < BATCH && !fromStart) {
      events = await unsealedEvents(trx, workspaceId, BATCH);
      fromStart = true;
    }
    if (events.length === 0) return { sealed: 0, key: undefined };
    const frontier = (await readFrontiers(trx, new Map([[workspaceId, head]]))).get(workspaceId)!;
    const { seals, nodes } = appendEvents(frontier, events);
    await recordSeals(trx, workspaceId, seals, nodes, headOf(frontier));
    const lastEvent = events[events.length - 1]!;
    return { sealed: events.length, key: { event_timestamp: new Date(lastEvent.event_timestamp).toISOString(), event_id: lastEvent.id } };
  });
  // Committed: a full batch may have more behind it.
  if (last.sealed === BATCH && last.key)
    open.set(workspaceId, { after: last.key, fromStartAt: fromStart ? now : (cursor?.fromStartAt ?? now) });
  return last.sealed;
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
 * Every `intervalMs`, seals the workspaces with queued events (it reads the queue: a short
 * table, so callers that queue events never have to tell it), then runs `after` (the
 * checkpointer), so a checkpoint follows the seals of the same round.
 */
export class AuditSealer {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> = Promise.resolve();

  constructor(
    private readonly db: Kysely<DB>,
    private readonly rounds: SealingRounds,
    private readonly intervalMs: number,
    private readonly after: () => Promise<void> = async () => {},
  ) {}

  start(): void {
    this.timer = setInterval(() => {
      this.running = this.running.then(() => this.round());
    }, this.intervalMs);
    this.timer.unref();
  }

  /** One round: seal what is queued (until the queue is empty or the round's share is used up), then `after`. */
  async round(): Promise<void> {
    const queued = await workspacesWithUnsealed(this.db).catch(() => []);
    // A round that could not run at all (its thread died) loses nothing: the queue stays.
    if (queued.length > 0) await this.rounds.run(queued).catch(() => undefined);
    await this.after().catch(() => undefined);
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.running;
    await this.round();
    await this.rounds.close();
  }
}
