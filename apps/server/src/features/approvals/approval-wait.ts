/**
 * Holding an act open for its approval: an MCP client cannot name an approval and come back
 * with it, so the gateway keeps the call open while a person decides (polling the approval's
 * row, so that a decision taken on any process is seen).
 */
import type { Kysely } from 'kysely';
import type { DB } from '../../db/schema.ts';
import { findApprovalState } from './approvals.repository.ts';

export type ApprovalWait = 'approved' | 'rejected' | 'expired' | 'pending';

export interface WaitOptions {
  /** When to stop waiting (epoch ms): the answer is then `pending`. */
  until: number;
  /** The caller went away: stop waiting (`pending`). */
  signal: AbortSignal;
  /** Called before each pause (the gateway sends a progress notification). */
  onWait: (message: string) => Promise<void>;
}

const POLL_MS = 250;

const sleep = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve) => {
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    }
    signal.addEventListener('abort', done, { once: true });
  });

/** Waits for approval `id` to be decided, up to `until` and while the caller still waits. */
export async function awaitApproval(db: Kysely<DB>, workspaceId: string, id: string, options: WaitOptions): Promise<ApprovalWait> {
  for (;;) {
    const state = await findApprovalState(db, workspaceId, id);
    if (!state || state.status === 'rejected') return 'rejected';
    // an approved one (used since by an identical call, perhaps): the next decision says which
    if (state.status === 'approved') return 'approved';
    if (state.status === 'expired' || new Date(state.expires_at).getTime() <= Date.now()) return 'expired';
    const left = options.until - Date.now();
    if (left <= 0 || options.signal.aborted) return 'pending';
    await options.onWait(`Waiting for approval ${id}`);
    await sleep(Math.min(POLL_MS, left), options.signal);
  }
}
