/**
 * The headline (issues 7 and 22): Warden's POST /policy/evaluate (S) against its baselines on
 * one machine and database, with the same body: B0 (node:http answering fixed JSON, the HTTP
 * ceiling) and B1 (node:http and one committed INSERT, the floor for "decide and durably
 * record"). Closed loop B0, (B1, S) × rounds, B0; the checkpoint lag of S's events; open loop
 * at half of B1's maximum, (B1, S) × open rounds, B0; then S's other operations. Also the
 * evaluator alone, in-process.
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import type pg from 'pg';
import type { BenchConfig } from '../config.ts';
import { aborted, baseline, log, mcpUpstream, OUT_DIR, type Outcome, type Scenario, serverFacts, type Target, warden } from '../lab.ts';
import { describeRun, evaluateLoad, type Load, type Measured, runLoad } from '../load.ts';
import type { EvaluatorFigures } from '../micro.ts';
import { forkBench, nextMessage, stopChild } from '../procs.ts';
import { formatTables, median, round, summarise, table } from '../report.ts';
import { EVALUATE_BODY, jsonHeaders, MCP_CALL_BODY } from '../workload.ts';

/** Runs micro.ts in a child of its own and answers its figures. */
export async function inProcess<T>(what: 'evaluator' | 'worst', config: BenchConfig): Promise<T> {
  const child = forkBench('micro.ts', what, [what], { BENCH_EVALUATOR_DECISIONS: String(config.evaluatorDecisions) });
  try {
    return (await nextMessage<{ figures: T }>(child, 'result', 15 * 60_000, what)).figures;
  } finally {
    await stopChild(child, 'SIGKILL', 1_000);
  }
}

export const evaluatorScenario: Scenario = {
  name: 'evaluator',
  about: 'decide() in-process over 50 × 10 and 100 × 10 rules',
  inFullRun: true,
  async run(config) {
    const figures = await inProcess<EvaluatorFigures[]>('evaluator', config);
    const us = (f: EvaluatorFigures) => f.perDecisionUs;
    return {
      report: [
        'Evaluator (in-process decide(), µs per call):',
        table(
          [
            'policy set',
            'decisions',
            'p50 µs',
            'p90 µs',
            'p99 µs',
            'p99.9 µs',
            'batch mean µs',
            'bench input p50 µs',
            'compile ms',
            'outcomes',
          ],
          figures.map((f) => [
            `${f.policies} × 10`,
            String(f.decisions),
            ...[us(f).p50, us(f).p90, us(f).p99, us(f).p999, f.batchMeanUs, f.benchInputUs.p50, f.compileMs].map(String),
            Object.entries(f.outcomes)
              .map(([k, v]) => `${k} ${v}`)
              .join(', '),
          ]),
        ),
      ],
      targets: { 'evaluator p50 <= 10 us (50 x 10)': (figures[0]?.perDecisionUs.p50 ?? Number.POSITIVE_INFINITY) <= 10 },
      figures: { evaluator: figures },
    };
  },
};

export interface CheckpointLag {
  events: number;
  /** Events in no checkpoint yet when this was read (the target needs none). */
  uncovered: number;
  p50Ms: number | null;
  p99Ms: number | null;
}

/** For each event written in the windows: its timestamp to the first signed checkpoint covering it, read once the checkpointer caught up. */
export async function checkpointLag(pool: pg.Pool, windows: Array<[Date, Date]>): Promise<CheckpointLag> {
  await new Promise((resolve) => setTimeout(resolve, 5_000));
  const { rows } = await pool.query(
    `WITH lag AS (
       SELECT extract(epoch FROM (c.checkpoint_timestamp - s.event_timestamp)) * 1000 AS ms
       FROM audit_seals s
       LEFT JOIN LATERAL (SELECT checkpoint_timestamp FROM audit_checkpoints c
                          WHERE c.workspace_id = s.workspace_id AND c.tree_size >= s.sequence ORDER BY c.tree_size LIMIT 1) c ON true
       WHERE EXISTS (SELECT 1 FROM unnest($1::timestamptz[], $2::timestamptz[]) AS w(a, b) WHERE s.event_timestamp >= w.a AND s.event_timestamp < w.b))
     SELECT count(*) AS events, count(*) FILTER (WHERE ms IS NULL) AS uncovered,
            percentile_cont(0.5) WITHIN GROUP (ORDER BY ms) AS p50, percentile_cont(0.99) WITHIN GROUP (ORDER BY ms) AS p99
     FROM lag`,
    [windows.map(([a]) => a.toISOString()), windows.map(([, b]) => b.toISOString())],
  );
  const row = rows[0];
  return { events: Number(row.events), uncovered: Number(row.uncovered), p50Ms: round(row.p50, 0), p99Ms: round(row.p99, 0) };
}

export const decideScenario: Scenario = {
  name: 'decide',
  about: 'POST /policy/evaluate against B0 and B1; S’s other operations',
  inFullRun: true,
  async run(config): Promise<Outcome> {
    const mcp = await mcpUpstream();
    const s = await warden(config, { label: 'decide', seedWith: mcp.url });
    const [b0, b1] = [await baseline('b0', s.db), await baseline('b1', s.db)];
    const headers = jsonHeaders(s.key);
    const body = JSON.stringify(EVALUATE_BODY);
    const evaluate = (target: string, server: Target, url: string, table?: string) => evaluateLoad(target, server, url, s.key, table);
    const loads: Record<string, Load> = {
      B0: evaluate('B0', b0, `${b0.origin}/api/v1/policy/evaluate`),
      B1: evaluate('B1', b1, `${b1.origin}/api/v1/policy/evaluate`, 'bench_audit_events'),
      S: evaluate('S', s, `${s.baseUrl}/policy/evaluate`, 'audit_events'),
      agents: {
        target: 'S',
        scenario: 'agents_list',
        server: s,
        url: `${s.baseUrl}/agents?limit=100`,
        method: 'GET',
        headers: { authorization: headers.authorization },
      },
      mcpSession: {
        ...evaluate('S', s, `${s.baseUrl}/runtime/mcp/call`),
        scenario: 'mcp_call_session',
        body: JSON.stringify(MCP_CALL_BODY(s.session)),
        audit: { table: 'audit_events', perOk: 2 },
      },
      mcpOneShot: {
        ...evaluate('S', s, `${s.baseUrl}/runtime/mcp/call`),
        scenario: 'mcp_call_no_session',
        body: JSON.stringify(MCP_CALL_BODY(undefined)),
        audit: { table: 'audit_events', perOk: 2 },
      },
    };
    const runs: Measured[] = [];
    const failures: string[] = [];
    const traceDir = config.trace ? join(OUT_DIR, 'trace') : undefined;
    if (traceDir) mkdirSync(traceDir, { recursive: true });
    const run = async (key: string, mode: 'closed' | 'open', round: number, rate?: number) => {
      const load = loads[key] as Load;
      const label = `${load.target} ${load.scenario} ${mode}${rate ? ` @${Math.round(rate)}/s` : ''} (round ${round})`;
      if (aborted) throw new Error('aborted');
      log(`${label}…`);
      const { connections } = config;
      // a priming run (round 0) is short and not counted
      const [warmupSeconds, seconds] = round === 0 ? [1, Math.min(5, config.seconds)] : [config.warmupSeconds, config.seconds];
      try {
        const measured = await runLoad(load, { mode, connections, warmupSeconds, seconds, rate, round, traceDir });
        log(describeRun(measured));
        if (round > 0) runs.push(measured);
        return measured;
      } catch (error) {
        if (aborted) throw error;
        log(`  FAILED: ${(error as Error).message}`);
        failures.push(`${label}: ${(error as Error).message}`);
        return undefined;
      }
    };
    // each server primed once (JIT, caches, pools), so that round 1 is no cold start
    for (const key of ['B0', 'B1', 'S']) await run(key, 'closed', 0);

    const windows: Array<[Date, Date]> = [];
    let lag: CheckpointLag | null = null;
    if (!config.openRate) {
      await run('B0', 'closed', 1);
      for (let round = 1; round <= config.rounds; round++) {
        await run('B1', 'closed', round);
        const from = new Date();
        await run('S', 'closed', round);
        windows.push([from, new Date()]);
      }
      await run('B0', 'closed', 2);
      lag = await checkpointLag(s.db.pool, windows);
      log(`checkpoint lag of S's ${lag.events} events: p50 ${lag.p50Ms} ms, p99 ${lag.p99Ms} ms, ${lag.uncovered} uncovered`);
    }
    const of = (target: string, mode: 'closed' | 'open', round?: number) =>
      runs.filter((m) => m.target === target && m.scenario === 'evaluate' && m.mode === mode && (round === undefined || m.round === round));
    const b1Max = median(of('B1', 'closed').map((m) => m.load.rps));
    const rate = config.openRate ?? (b1Max > 0 ? Math.max(10, Math.round(b1Max / 2)) : 100);
    if (!config.quick) {
      for (let round = 1; round <= config.openRounds; round++) {
        await run('B1', 'open', round, rate);
        await run('S', 'open', round, rate);
      }
      if (!config.openRate) {
        await run('B0', 'open', 1, rate);
        for (const key of ['agents', 'mcpSession', 'mcpOneShot']) {
          const closed = await run(key, 'closed', 1);
          if (closed?.load.rps) await run(key, 'open', 1, Math.max(5, Math.round(closed.load.rps / 2)));
        }
      }
    }

    const summaries = summarise(runs);
    const find = (target: string, mode: 'closed' | 'open') =>
      summaries.find((x) => x.target === target && x.scenario === 'evaluate' && x.mode === mode);
    const [sc, b1c, b0c, so, b1o] = [
      find('S', 'closed'),
      find('B1', 'closed'),
      find('B0', 'closed'),
      find('S', 'open'),
      find('B1', 'open'),
    ];
    const ratio = (a: number | null | undefined, b: number | null | undefined) => (a && b ? round(a / b) : null);
    // each round's S against the B1 run just before it: robust to load that drifts between rounds
    const perRound = of('S', 'closed').flatMap((m) => {
      const b = of('B1', 'closed', m.round)[0];
      return b ? [round(m.load.rps / b.load.rps) as number] : [];
    });
    const sRuns = runs.filter((m) => m.target === 'S' && m.scenario === 'evaluate');
    // the server's CPU and its PostgreSQL backends' together: B1 leaves more of its work to PostgreSQL
    const total = (x: typeof sc) => round((x?.cpuMsPerRequest ?? Number.NaN) + (x?.dbCpuMsPerRequest ?? Number.NaN));
    const headline = {
      s_cpu_ms_per_req: round(sc?.cpuMsPerRequest),
      s_db_cpu_ms_per_req: round(sc?.dbCpuMsPerRequest),
      b1_cpu_ms_per_req: round(b1c?.cpuMsPerRequest),
      b1_db_cpu_ms_per_req: round(b1c?.dbCpuMsPerRequest),
      s_over_b1_total_cpu_per_req: ratio(total(sc), total(b1c)),
      s_over_b1_rps: ratio(sc?.rps.median, b1c?.rps.median),
      s_over_b1_rps_per_round: perRound,
      s_over_b0_rps: ratio(sc?.rps.median, b0c?.rps.median),
      s_rps: sc?.rps.median ?? null,
      b1_rps: b1c?.rps.median ?? null,
      b0_rps: b0c?.rps.median ?? null,
      open_rate: rate,
      s_p50_ms: so?.latencyMs.p50 ?? null,
      s_p99_ms: so?.latencyMs.p99 ?? null,
      b1_p99_ms: b1o?.latencyMs.p99 ?? null,
      s_p99_over_b1_p99: ratio(so?.latencyMs.p99, b1o?.latencyMs.p99),
      s_over_10ms_percent: so?.over10msPercent ?? null,
      b1_over_10ms_percent: b1o?.over10msPercent ?? null,
      checkpoint_lag_p50_ms: lag?.p50Ms ?? null,
      checkpoint_lag_p99_ms: lag?.p99Ms ?? null,
      s_errors: sRuns.reduce((a, m) => a + m.load.errors + m.load.non2xx, 0),
      s_audit_rows_ok: sRuns.every((m) => m.audit?.ok === true),
      s_rss_peak_mb: round(Math.max(...sRuns.map((m) => m.rssPeakMb)), 0),
    };
    const h = headline;
    const report = [
      `Warden (S): ${config.workers} server process(es), NODE_ENV=production, ${config.connections} connections closed loop, ${config.warmupSeconds} s warm-up + ${config.seconds} s per run`,
      `PostgreSQL: ${JSON.stringify(await serverFacts(s.db.pool))}; same body for B0/B1/S: ${body}`,
      ...formatTables(summaries),
      'Headline (medians):',
      `  CPU per request: S ${h.s_cpu_ms_per_req} ms + ${h.s_db_cpu_ms_per_req} in PostgreSQL, B1 ${h.b1_cpu_ms_per_req} + ${h.b1_db_cpu_ms_per_req}; S/B1 counted together ${h.s_over_b1_total_cpu_per_req}`,
      `  S/B1 requests/s ${h.s_over_b1_rps} (S ${h.s_rps}/s, B1 ${h.b1_rps}/s; per round ${perRound.join(', ')}; target ≥ 0.9); S/B0 ${h.s_over_b0_rps}`,
      `  open loop at ${rate}/s: S p50 ${h.s_p50_ms} ms, p99 ${h.s_p99_ms} ms (${h.s_over_10ms_percent} % over 10 ms); B1 p99 ${h.b1_p99_ms} ms (${h.b1_over_10ms_percent} %): ${h.s_p99_over_b1_p99} × (target ≤ 2)`,
      `  checkpoint lag of S's closed-loop events: p50 ${h.checkpoint_lag_p50_ms} ms, p99 ${h.checkpoint_lag_p99_ms} ms, ${lag?.uncovered ?? '–'} uncovered (target ≤ 2 s)`,
      `  S errors ${h.s_errors}; audit rows == 2xx in every S run: ${h.s_audit_rows_ok}; Warden peak RSS ${h.s_rss_peak_mb} MB`,
    ];
    return {
      report,
      // a phase that BENCH_QUICK or BENCH_OPEN_RATE skipped has no target to meet or miss
      targets: {
        ...(!config.openRate && {
          's_over_b1 >= 0.9 (Merkle sealing on)': (h.s_over_b1_rps ?? 0) >= 0.9,
          'checkpoint lag p99 <= 2 s (closed loop)': lag !== null && (lag.p99Ms ?? Number.POSITIVE_INFINITY) <= 2000 && lag.uncovered === 0,
        }),
        ...(!config.quick && {
          'S p99 <= 2 x B1 p99 (open loop at half of B1 max, medians)': (h.s_p99_over_b1_p99 ?? Number.POSITIVE_INFINITY) <= 2,
        }),
        'no errors, no lost audit rows (S evaluate)': h.s_errors === 0 && h.s_audit_rows_ok,
      },
      figures: { headline, checkpointLag: lag, summaries, runs, wardenProcessTree: s.tree },
      failures,
    };
  },
};
