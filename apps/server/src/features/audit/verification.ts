/**
 * Verification and proofs of a workspace's audit tree. Verification is incremental: it starts
 * where the last one ended (the size it reached and the tree's right edge there, kept in
 * audit_verifications), recomputes the leaves of the events sealed since, compares every stored
 * subtree and the root with what those leaves make, and checks the tree against every signed
 * checkpoint in that range — the database's, each note verified with the log's key, and the
 * last one the signer keeps outside the database — so that a tree rebuilt from rewritten events
 * is caught by the first checkpoint it contradicts, even with the newest ones deleted. `full`
 * starts from the first event (it runs off the request thread: verification-runs.ts). A tree
 * that fails is never a starting point for the next verification. Events verified earlier are
 * re-checked too, RECHECK_PER_CALL at a time from where the last re-check stopped (wrapping
 * around), so an old event rewritten in place is found within size / RECHECK_PER_CALL calls.
 * Proofs read the O(log n) stored nodes they need, so no call grows with the history.
 */
import type { AuditVerification } from '@warden/contract';
import type { Kysely } from 'kysely';
import type { DB } from '../../db/schema.ts';
import { inTransaction } from '../../db/transaction.ts';
import { ApiError } from '../../shared/errors.ts';
import { findVerification, saveVerification } from './audit.repository.ts';
import { checkpointsAfter, findCheckpoint } from './checkpoint.repository.ts';
import { type AuditLogKey, integrityFailureView, openSignedCheckpoint, originOf } from './checkpointer.ts';
import {
  consistencyProof,
  EMPTY_ROOT,
  Frontier,
  inclusionProof,
  type NodeId,
  nodeKey,
  nodeMap,
  nodesForConsistency,
  nodesForInclusion,
  nodesForRoot,
  rootFrom,
} from './merkle.ts';
import { findSigningRefusal } from './signing-refusals.repository.ts';
import {
  countQueued,
  countUnaccounted,
  findSeal,
  readNodeHashes,
  readNodes,
  readTreeHead,
  sealsWithEvents,
  type TreeHead,
} from './tree.repository.ts';
import { canonicalEvent, type EventFields, eventLeafHash } from './tree.ts';

const BATCH = 500;
/** Older events re-checked by each verification (bounds its cost whatever the history). */
const RECHECK_PER_CALL = 1000;
/** Events written this long before the last verification are checked again for being accounted for (transactions in flight then). */
const UNACCOUNTED_MARGIN_MS = 5 * 60_000;

export type Verification = AuditVerification['data'];
type Contradiction = NonNullable<Verification['contradicted_checkpoint']>;

/** A signed (size, root) of a log. */
export interface SignedHead {
  size: number;
  root: string;
}

/** How far a verification has come: events checked, of how many it will check. */
export interface VerificationProgress {
  checked: number;
  total: number;
}

export interface VerifyOptions {
  /** From the first event rather than from the last verified size. */
  full: boolean;
  /** The last checkpoint the signer signed for this log, as it keeps it outside the database. */
  signed?: SignedHead;
  /** Told after each batch. */
  progress?: (progress: VerificationProgress) => void;
  /** Awaited between batches (on the request thread: lets other requests in). */
  pause?: () => Promise<void>;
}

export async function verifyTree(db: Kysely<DB>, signer: AuditLogKey, workspaceId: string, options: VerifyOptions): Promise<Verification> {
  const { full } = options;
  // One snapshot for the tree, its checkpoint and the queue, so a batch sealed meanwhile cannot
  // be missed by one and seen by another.
  const result = await inTransaction(
    db,
    async (trx) => {
      const head: TreeHead = (await readTreeHead(trx, workspaceId)) ?? { size: 0, root: EMPTY_ROOT.toString('hex') };
      const previous = full ? undefined : await findVerification(trx, workspaceId);
      const checkpoint = await findCheckpoint(trx, workspaceId);
      let frontier = new Frontier();
      let since = new Date(0);
      if (previous && Number(previous.tree_size) <= head.size) {
        const hashes = previous.frontier as string[];
        const ids = Frontier.nodesToRestore(Number(previous.tree_size));
        frontier = Frontier.restore(
          Number(previous.tree_size),
          nodeMap(ids.map((id, i) => ({ ...id, hash: Buffer.from(hashes[i] ?? '', 'hex') }))),
        );
        since = new Date(previous.verified_at.getTime() - UNACCOUNTED_MARGIN_MS);
      }
      const verifiedFrom = frontier.size;
      let firstInvalid: number | null = previous && Number(previous.tree_size) > head.size ? head.size + 1 : null;
      let checked = 0;
      let checkpointRoot: Buffer | undefined;
      const checkpointSize = checkpoint ? Number(checkpoint.tree_size) : 0;
      if (checkpoint && checkpointSize <= frontier.size) {
        checkpointRoot = rootFrom(checkpointSize, await readNodeHashes(trx, workspaceId, nodesForRoot(checkpointSize)));
      }

      const anchors = await signedAnchors(trx, signer, workspaceId, head.size, verifiedFrom, options.signed);
      let contradicted = anchors.contradicted;
      const contradict = (found: Contradiction) => {
        if (!contradicted || found.tree_size < contradicted.tree_size) contradicted = found;
      };
      const total = head.size - verifiedFrom + Math.min(verifiedFrom, RECHECK_PER_CALL);

      while (firstInvalid === null && frontier.size < head.size) {
        const rows = await sealsWithEvents(trx, workspaceId, frontier.size, Math.min(BATCH, head.size - frontier.size));
        if (rows.length === 0) {
          firstInvalid = frontier.size + 1; // a leaf of the tree has no seal
          break;
        }
        const wanted: NodeId[] = [];
        const completedAbove = new Map<string, Buffer>();
        for (const row of rows) {
          const sequence = Number(row.sequence);
          checked += 1;
          const leaf = row.id === null ? undefined : eventLeafHash(row as EventFields);
          if (sequence !== frontier.size + 1 || !leaf || leaf.toString('hex') !== row.seal_hash) {
            firstInvalid = sequence;
            break;
          }
          for (const node of frontier.append(leaf).slice(1)) {
            wanted.push(node);
            completedAbove.set(nodeKey(node.level, node.index), node.hash);
          }
          if (frontier.size === checkpointSize) checkpointRoot = frontier.root();
          const anchor = anchors.bySize.get(frontier.size);
          const root = anchor && frontier.root().toString('hex');
          if (anchor && root !== anchor.root_hash)
            contradict({
              ...anchor,
              tree_root_hash: root ?? null,
              reason: `the tree's root at size ${anchor.tree_size} is not the signed one`,
            });
        }
        // Every subtree these leaves complete must be stored as they make it: proofs are served from them.
        const stored = await readNodes(
          trx,
          wanted.map(({ level, index }) => ({ workspace_id: workspaceId, level, node_index: index })),
        );
        for (const row of stored) {
          if (row.hash !== completedAbove.get(nodeKey(row.level, row.node_index))?.toString('hex')) {
            const position = (row.node_index + 1) * 2 ** row.level; // the leaf that completed it, counted from 1
            if (firstInvalid === null || position < firstInvalid) firstInvalid = position;
          }
        }
        options.progress?.({ checked, total });
        await options.pause?.();
      }
      if (firstInvalid === null && frontier.root().toString('hex') !== head.root) firstInvalid = head.size;

      // The rolling re-check of events verified earlier: each must still give its stored leaf.
      let recheckedTo = previous ? Number(previous.rechecked_to) : 0;
      if (recheckedTo >= verifiedFrom) recheckedTo = 0;
      const recheckEnd = Math.min(verifiedFrom, recheckedTo + RECHECK_PER_CALL);
      if (recheckedTo < recheckEnd) {
        const rows = await sealsWithEvents(trx, workspaceId, recheckedTo, recheckEnd - recheckedTo);
        let expected = recheckedTo + 1;
        for (const row of rows) {
          const sequence = Number(row.sequence);
          checked += 1;
          const intact = sequence === expected && row.id !== null && eventLeafHash(row as EventFields).toString('hex') === row.seal_hash;
          if (!intact && (firstInvalid === null || Math.min(sequence, expected) < firstInvalid))
            firstInvalid = Math.min(sequence, expected);
          expected = sequence + 1;
        }
        if (rows.length < recheckEnd - recheckedTo && (firstInvalid === null || expected < firstInvalid)) firstInvalid = expected;
        recheckedTo = recheckEnd;
      }

      let checkpointValid: boolean | null = null;
      if (checkpoint) {
        const signed = openSignedCheckpoint(signer, checkpoint.note);
        checkpointValid =
          signed !== undefined &&
          signed.size === checkpointSize &&
          signed.rootHash.toString('hex') === checkpoint.root_hash &&
          checkpointSize <= head.size &&
          checkpointRoot !== undefined &&
          checkpointRoot.toString('hex') === checkpoint.root_hash;
      }
      const refused = await findSigningRefusal(trx, workspaceId);
      const unsealed = await countQueued(trx, workspaceId);
      const unaccounted = await countUnaccounted(trx, workspaceId, since);
      const verifiedAt = new Date();
      const valid =
        firstInvalid === null && checkpointValid !== false && unaccounted === 0 && refused === undefined && contradicted === undefined;
      return {
        valid,
        checked,
        tree_size: head.size,
        root_hash: head.root,
        verified_from: verifiedFrom,
        checkpoint: checkpoint ? { tree_size: checkpointSize, root_hash: checkpoint.root_hash, valid: checkpointValid === true } : null,
        unsealed,
        unaccounted,
        checkpoints_checked: anchors.checked,
        contradicted_checkpoint: contradicted ?? null,
        first_invalid_sequence: firstInvalid,
        signing_refused: refused ? integrityFailureView(refused) : null,
        verified_at: verifiedAt.toISOString(),
        frontier,
        recheckedTo,
      };
    },
    { isolation: 'repeatable read' },
  );
  const { frontier, recheckedTo, ...verification } = result;
  // Only a tree that verified, against every signed checkpoint, is a starting point for the next verification.
  if (verification.valid && frontier.size > 0) {
    await saveVerification(db, workspaceId, {
      size: frontier.size,
      frontier: frontier.nodes.map((node) => node.hash.toString('hex')),
      recheckedTo,
      verifiedAt: new Date(verification.verified_at),
    });
  }
  return verification;
}

/**
 * The signed checkpoints a verification from `from` to `size` checks the tree against: the
 * database's larger than `from` (a note that does not verify with the log's key is itself a
 * contradiction), and the signer's own last one. Those beyond the tree contradict it at once;
 * the signer's, when the verification starts past it, is compared with the stored nodes' root.
 */
async function signedAnchors(
  trx: Kysely<DB>,
  signer: AuditLogKey,
  workspaceId: string,
  size: number,
  from: number,
  kept: SignedHead | undefined,
) {
  type Anchor = Pick<Contradiction, 'tree_size' | 'root_hash' | 'source'>;
  const bySize = new Map<number, Anchor>();
  let contradicted: Contradiction | undefined;
  const contradict = (found: Contradiction) => {
    if (!contradicted || found.tree_size < contradicted.tree_size) contradicted = found;
  };
  const rows = await checkpointsAfter(trx, workspaceId, from);
  for (const row of rows) {
    const anchor: Anchor = { tree_size: Number(row.tree_size), root_hash: row.root_hash, source: 'database' };
    const opened = openSignedCheckpoint(signer, row.note);
    const signed =
      opened?.origin === originOf(signer, workspaceId) &&
      opened.size === anchor.tree_size &&
      opened.rootHash.toString('hex') === anchor.root_hash;
    if (signed) bySize.set(anchor.tree_size, anchor);
    else contradict({ ...anchor, tree_root_hash: null, reason: "the checkpoint's note is not signed by this log's key" });
  }
  if (kept && kept.size > 0) {
    const anchor: Anchor = { tree_size: kept.size, root_hash: kept.root, source: 'signer' };
    const stored = bySize.get(kept.size);
    if (stored && stored.root_hash !== kept.root)
      contradict({ ...anchor, tree_root_hash: null, reason: `a second root for size ${kept.size}, which the signer signed with another` });
    else if (kept.size > from) bySize.set(kept.size, anchor);
    else {
      const root = await storedRoot(trx, workspaceId, kept.size);
      if (root !== kept.root)
        contradict({ ...anchor, tree_root_hash: root ?? null, reason: `the tree's root at size ${kept.size} is not the signed one` });
    }
  }
  for (const anchor of bySize.values()) {
    if (anchor.tree_size > size)
      contradict({ ...anchor, tree_root_hash: null, reason: `the tree has ${size} leaves, fewer than the ${anchor.tree_size} signed` });
  }
  return { bySize, contradicted, checked: rows.length + (kept && kept.size > 0 ? 1 : 0) };
}

/** The root the stored nodes give for `size`; undefined when they cannot be read. */
async function storedRoot(trx: Kysely<DB>, workspaceId: string, size: number): Promise<string | undefined> {
  try {
    return rootFrom(size, await readNodeHashes(trx, workspaceId, nodesForRoot(size))).toString('hex');
  } catch {
    return undefined;
  }
}

/** The size a proof is asked against: the one given, or the latest checkpoint's; never beyond the tree. */
async function sizeFor(db: Kysely<DB>, workspaceId: string, size: number | undefined, what: string): Promise<number> {
  const head = await readTreeHead(db, workspaceId);
  const treeSize = head?.size ?? 0;
  if (size === undefined) {
    const latest = await findCheckpoint(db, workspaceId);
    if (!latest) throw new ApiError('not_found', 'The audit log has no checkpoint yet (one is made within seconds of the first event)');
    return Number(latest.tree_size);
  }
  if (size > treeSize) throw new ApiError('invalid_request', `${what} ${size} exceeds the audit tree's size ${treeSize}`);
  return size;
}

export async function proveInclusion(db: Kysely<DB>, workspaceId: string, eventId: string, treeSize: number | undefined) {
  const size = await sizeFor(db, workspaceId, treeSize, 'tree_size');
  const seal = await findSeal(db, workspaceId, eventId);
  if (!seal) throw new ApiError('not_found', 'No sealed audit event with this id (events are sealed within about a second)');
  const index = Number(seal.sequence) - 1;
  if (index >= size) throw new ApiError('invalid_request', `The event's leaf index ${index} is not within tree_size ${size}`);
  const [row] = await sealsWithEvents(db, workspaceId, index, 1);
  if (!row || row.id === null) throw new ApiError('not_found', 'The sealed event could not be read');
  const nodes = await readNodeHashes(db, workspaceId, [...nodesForInclusion(index, size), ...nodesForRoot(size)]);
  return {
    event_id: eventId,
    leaf_index: index,
    tree_size: size,
    leaf: canonicalEvent(row as EventFields),
    leaf_hash: row.seal_hash,
    root_hash: rootFrom(size, nodes).toString('hex'),
    proof: inclusionProof(index, size, nodes).map((hash) => hash.toString('hex')),
  };
}

export async function proveConsistency(db: Kysely<DB>, workspaceId: string, fromSize: number, toSize: number | undefined) {
  const to = await sizeFor(db, workspaceId, toSize, 'to_size');
  if (fromSize > to) throw new ApiError('invalid_request', `from_size ${fromSize} is larger than to_size ${to}`);
  const nodes = await readNodeHashes(db, workspaceId, [
    ...nodesForConsistency(fromSize, to),
    ...nodesForRoot(fromSize),
    ...nodesForRoot(to),
  ]);
  return {
    from_size: fromSize,
    to_size: to,
    from_root: rootFrom(fromSize, nodes).toString('hex'),
    to_root: rootFrom(to, nodes).toString('hex'),
    proof: consistencyProof(fromSize, to, nodes).map((hash) => hash.toString('hex')),
  };
}
