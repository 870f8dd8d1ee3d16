/**
 * `warden audit export`: a workspace's audit log as the offline verifier reads it
 * (offline-verify.ts ExportLine, one JSON line each): a `log` header, every sealed event in leaf
 * order with its canonical bytes and the leaf hash its seal holds, then every signed checkpoint
 * stored for the workspace. It is read in pages, each naming the next by a cursor, so neither
 * side holds the log in memory and each page crosses the admin channel as one request.
 *
 * The export shows the log as the database holds it, tampered or not: the header's size is the
 * tree head's, and checkpoints larger than the head are exported too (they are the evidence of
 * a rewind). Which checkpoints: every one stored before the head was read, and those signed since
 * up to the head's size; one signed of a tree that grew after the head was read would otherwise
 * look like a rewind.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { Kysely } from 'kysely';
import type { DB } from '../../db/schema.ts';
import { checkpointsBySize, largestCheckpointSize } from './checkpoint.repository.ts';
import { type AuditSigner, loadAuditSigner, originOf, signingKeyOf } from './checkpointer.ts';
import { EMPTY_ROOT } from './merkle.ts';
import type { ExportLine } from './offline-verify.ts';
import { readTreeHead, sealsWithEvents } from './tree.repository.ts';
import { canonicalEvent, type EventFields } from './tree.ts';

/** Events (or checkpoints) per page: one batch of the sealer, one admin request of a few hundred KB. */
const PAGE = 1000;

/** The log's name, and the key that signs its checkpoints when the exporting side has it. */
export interface AuditLogKeys {
  logName: string;
  signer: AuditSigner | undefined;
}

/**
 * The log's name and its signing key, only if the key exists: the export names the key (a hint
 * for the verifier) and must never create one, which would name a key that signed nothing.
 */
export function auditLogKeys(config: {
  auditSigningKey: string | undefined;
  auditMlDsaSigningKey?: string | undefined;
  dataDir: string;
  auditLogName: string;
}): AuditLogKeys {
  const stored =
    config.auditSigningKey !== undefined ||
    (!config.dataDir.startsWith('memory://') && existsSync(join(config.dataDir, 'audit-signing.key')));
  return { logName: config.auditLogName, signer: stored ? loadAuditSigner(config, { create: false }) : undefined };
}

/** Where the next page starts. */
interface Cursor {
  stage: 'events' | 'checkpoints';
  /** The tree size the header announced: events are exported up to it. */
  size: number;
  /** The largest checkpoint size exported. */
  bound: number;
  /** The last sequence (events) or checkpoint size (checkpoints) exported. */
  after: number;
}

export interface ExportPage {
  lines: ExportLine[];
  /** Pass it back for the next page; null after the last. */
  cursor: string | null;
}

/** A cursor that no page of the export gave. */
export class ExportCursorError extends Error {
  override readonly name = 'ExportCursorError';
}

const encodeCursor = (cursor: Cursor) => Buffer.from(JSON.stringify(cursor)).toString('base64url');

function decodeCursor(text: string): Cursor {
  let cursor: Partial<Cursor> | undefined;
  try {
    cursor = JSON.parse(Buffer.from(text, 'base64url').toString('utf8')) as Partial<Cursor>;
  } catch {
    cursor = undefined;
  }
  const counts = [cursor?.size, cursor?.bound, cursor?.after];
  if (
    (cursor?.stage !== 'events' && cursor?.stage !== 'checkpoints') ||
    !counts.every((n) => Number.isSafeInteger(n) && (n as number) >= 0)
  ) {
    throw new ExportCursorError('invalid export cursor');
  }
  return cursor as Cursor;
}

/** One page of a workspace's export: the first (no cursor) starts with the header. */
export async function exportPage(db: Kysely<DB>, keys: AuditLogKeys, workspaceId: string, cursorText?: string): Promise<ExportPage> {
  const lines: ExportLine[] = [];
  let cursor: Cursor;
  if (cursorText === undefined) {
    // The checkpoints' size first, then the head: a checkpoint stored before the head was read is
    // never larger than that head unless the head went back.
    const largest = await largestCheckpointSize(db, workspaceId);
    const head = (await readTreeHead(db, workspaceId)) ?? { size: 0, root: EMPTY_ROOT.toString('hex') };
    lines.push({
      type: 'log',
      origin: keys.signer ? originOf(keys.signer, workspaceId) : `${keys.logName}/audit/${workspaceId}`,
      workspace_id: workspaceId,
      tree_size: head.size,
      root_hash: head.root,
      verifier_key: keys.signer ? signingKeyOf(keys.signer, workspaceId).verifier_key : null,
    });
    cursor = { stage: 'events', size: head.size, bound: Math.max(largest, head.size), after: 0 };
  } else {
    cursor = decodeCursor(cursorText);
  }

  if (cursor.stage === 'events') {
    const limit = Math.min(PAGE, cursor.size - cursor.after);
    const rows = limit > 0 ? await sealsWithEvents(db, workspaceId, cursor.after, limit) : [];
    let after = cursor.after;
    let beyond = false;
    for (const row of rows) {
      const sequence = Number(row.sequence);
      beyond = sequence > cursor.size;
      if (beyond) break;
      lines.push({
        type: 'event',
        index: sequence - 1,
        event_id: row.sealed_event_id,
        leaf: row.id === null ? null : canonicalEvent(row as EventFields),
        leaf_hash: row.seal_hash,
      });
      after = sequence;
    }
    // Seals past the head's size (after a missing one, or above a rewound head) are not in its tree;
    // a missing seal ends the events there, and the verifier reports the gap.
    const more = !beyond && rows.length === limit && after < cursor.size;
    return { lines, cursor: encodeCursor(more ? { ...cursor, after } : { ...cursor, stage: 'checkpoints', after: 0 }) };
  }

  const rows = await checkpointsBySize(db, workspaceId, cursor.after, cursor.bound, PAGE);
  for (const row of rows) lines.push({ type: 'checkpoint', tree_size: Number(row.tree_size), note: row.note });
  const last = rows[rows.length - 1];
  return { lines, cursor: rows.length === PAGE && last ? encodeCursor({ ...cursor, after: Number(last.tree_size) }) : null };
}
