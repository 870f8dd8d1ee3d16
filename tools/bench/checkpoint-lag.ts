/**
 * How long an audit event waits for a signed checkpoint (issue 22): for each event written in
 * the given windows, the time from its timestamp to the first checkpoint whose tree covers it.
 * Read after the load, once the sealer and the checkpointer have caught up.
 */
import type pg from 'pg';

export interface CheckpointLag {
  events: number;
  /** Events not yet in any checkpoint when this was read (the target needs none). */
  uncovered: number;
  p50Ms: number | null;
  p99Ms: number | null;
  maxMs: number | null;
}

/** Waits for the checkpointer to cover what the load wrote, then reads the lag of its events. */
export async function measureCheckpointLag(pool: pg.Pool, windows: Array<[Date, Date]>, settleMs = 5_000): Promise<CheckpointLag> {
  if (windows.length === 0) return { events: 0, uncovered: 0, p50Ms: null, p99Ms: null, maxMs: null };
  await new Promise((resolve) => setTimeout(resolve, settleMs));
  const { rows } = await pool.query<{ events: string; uncovered: string; p50: number | null; p99: number | null; max: number | null }>(
    `WITH lag AS (
       SELECT extract(epoch FROM (c.checkpoint_timestamp - s.event_timestamp)) * 1000 AS ms
       FROM audit_seals s
       LEFT JOIN LATERAL (
         SELECT checkpoint_timestamp FROM audit_checkpoints c
         WHERE c.workspace_id = s.workspace_id AND c.tree_size >= s.sequence
         ORDER BY c.tree_size LIMIT 1
       ) c ON true
       WHERE EXISTS (SELECT 1 FROM unnest($1::timestamptz[], $2::timestamptz[]) AS w(a, b) WHERE s.event_timestamp >= w.a AND s.event_timestamp < w.b)
     )
     SELECT count(*) AS events, count(*) FILTER (WHERE ms IS NULL) AS uncovered,
            percentile_cont(0.5) WITHIN GROUP (ORDER BY ms) AS p50,
            percentile_cont(0.99) WITHIN GROUP (ORDER BY ms) AS p99,
            max(ms) AS max
     FROM lag`,
    [windows.map(([a]) => a.toISOString()), windows.map(([, b]) => b.toISOString())],
  );
  const row = rows[0];
  const round = (v: number | null | undefined) => (v === null || v === undefined ? null : Math.round(Number(v)));
  return {
    events: Number(row?.events ?? 0),
    uncovered: Number(row?.uncovered ?? 0),
    p50Ms: round(row?.p50),
    p99Ms: round(row?.p99),
    maxMs: round(row?.max),
  };
}
