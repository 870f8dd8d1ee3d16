/** Medians over the runs, the headline ratios and targets, and the readable table. */
import type { EvaluatorFigures } from './evaluator.ts';
import type { Measured } from './runner.ts';

export const median = (values: number[]): number => {
  const sorted = values.filter((v) => Number.isFinite(v)).sort((a, b) => a - b);
  if (sorted.length === 0) return Number.NaN;
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? (sorted[mid] as number) : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
};

const r = (value: number, digits = 2) => (Number.isFinite(value) ? Number(value.toFixed(digits)) : null);

export interface Summary {
  target: string;
  scenario: string;
  mode: 'closed' | 'open';
  runs: number;
  rps: { median: number | null; min: number | null; max: number | null };
  latencyMs: { p50: number | null; p90: number | null; p99: number | null; p999: number | null; max: number | null };
  /** Open loop: share of answers slower than 10 ms, in % (median over the runs). */
  over10msPercent: number | null;
  targetRate: number | null;
  cpuMsPerRequest: number | null;
  /** CPU of the server's PostgreSQL backends per answer (median). */
  dbCpuMsPerRequest: number | null;
  serverCorePercent: number | null;
  /** Kernel share of the server's CPU time (median). */
  serverSystemPercent: number | null;
  rssPeakMb: number | null;
  machineBusyPercent: number | null;
  clientCorePercent: number | null;
  requests: number;
  ok2xx: number;
  errors: number;
  non2xx: number;
  audit: { written: number; expected: number; ok: boolean } | null;
}

export function summarise(runs: Measured[]): Summary[] {
  const groups = new Map<string, Measured[]>();
  for (const run of runs) {
    const key = `${run.target}|${run.scenario}|${run.mode}`;
    groups.set(key, [...(groups.get(key) ?? []), run]);
  }
  return [...groups.values()].map((group) => {
    const first = group[0] as Measured;
    const rps = group.map((g) => g.load.rps);
    const audits = group.flatMap((g) => (g.audit ? [g.audit] : []));
    return {
      target: first.target,
      scenario: first.scenario,
      mode: first.mode,
      runs: group.length,
      rps: { median: r(median(rps), 0), min: r(Math.min(...rps), 0), max: r(Math.max(...rps), 0) },
      latencyMs: {
        p50: r(median(group.map((g) => g.load.latencyMs.p50)), 3),
        p90: r(median(group.map((g) => g.load.latencyMs.p90)), 3),
        p99: r(median(group.map((g) => g.load.latencyMs.p99)), 3),
        p999: r(median(group.map((g) => g.load.latencyMs.p999)), 3),
        max: r(Math.max(...group.map((g) => g.load.latencyMs.max)), 3),
      },
      over10msPercent: r(median(group.map((g) => g.load.over10msPercent ?? Number.NaN)), 2),
      targetRate: first.load.targetRate === undefined ? null : r(first.load.targetRate, 0),
      cpuMsPerRequest: r(median(group.map((g) => g.cpuMsPerRequest)), 4),
      dbCpuMsPerRequest: r(median(group.map((g) => g.dbCpuMsPerRequest ?? Number.NaN)), 4),
      serverCorePercent: r(median(group.map((g) => g.serverCorePercent)), 0),
      serverSystemPercent: r(median(group.map((g) => g.serverSystemPercent)), 0),
      rssPeakMb: r(Math.max(...group.map((g) => g.rssPeakMb)), 1),
      machineBusyPercent: r(median(group.map((g) => g.machineBusyPercent)), 0),
      clientCorePercent: r(median(group.map((g) => (100 * (g.load.clientCpuMs ?? Number.NaN)) / (g.load.durationS * 1000))), 0),
      requests: group.reduce((a, g) => a + g.load.responses, 0),
      ok2xx: group.reduce((a, g) => a + g.load.ok2xx, 0),
      errors: group.reduce((a, g) => a + g.load.errors, 0),
      non2xx: group.reduce((a, g) => a + g.load.non2xx, 0),
      audit: audits.length
        ? {
            written: audits.reduce((a, x) => a + x.written, 0),
            expected: audits.reduce((a, x) => a + x.expected, 0),
            ok: audits.every((x) => x.ok),
          }
        : null,
    };
  });
}

const cell = (value: number | null | undefined, digits = 0) =>
  value === null || value === undefined || !Number.isFinite(value) ? '–' : value.toFixed(digits);

function table(headers: string[], rows: string[][]): string {
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((row) => (row[i] ?? '').length)));
  const line = (cells: string[]) =>
    cells.map((c, i) => (i < 2 ? c.padEnd(widths[i] as number) : c.padStart(widths[i] as number))).join('  ');
  return [line(headers), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(line)].join('\n');
}

export function formatTables(summaries: Summary[]): string {
  const closed = summaries.filter((s) => s.mode === 'closed');
  const open = summaries.filter((s) => s.mode === 'open');
  const auditCell = (s: Summary) => (s.audit ? `${s.audit.written}/${s.audit.expected} ${s.audit.ok ? 'ok' : 'MISMATCH'}` : 'n/a');
  const closedTable = table(
    [
      'target',
      'scenario',
      'runs',
      'req/s med',
      'min',
      'max',
      'p50 ms',
      'p99 ms',
      'CPU ms/req',
      'DB CPU ms/req',
      'srv core%',
      'srv sys%',
      'RSS MB',
      'box busy%',
      'gen core%',
      'errors',
      'audit rows/expected',
    ],
    closed.map((s) => [
      s.target,
      s.scenario,
      String(s.runs),
      cell(s.rps.median),
      cell(s.rps.min),
      cell(s.rps.max),
      cell(s.latencyMs.p50, 2),
      cell(s.latencyMs.p99, 2),
      cell(s.cpuMsPerRequest, 3),
      cell(s.dbCpuMsPerRequest, 3),
      cell(s.serverCorePercent),
      cell(s.serverSystemPercent),
      cell(s.rssPeakMb, 0),
      cell(s.machineBusyPercent),
      cell(s.clientCorePercent),
      String(s.errors + s.non2xx),
      auditCell(s),
    ]),
  );
  const openTable = table(
    [
      'target',
      'scenario',
      'runs',
      'rate/s',
      'got/s',
      'p50 ms',
      'p90 ms',
      'p99 ms',
      'p99.9 ms',
      'max ms',
      '>10 ms %',
      'CPU ms/req',
      'DB CPU ms/req',
      'RSS MB',
      'box busy%',
      'errors',
      'audit rows/expected',
    ],
    open.map((s) => [
      s.target,
      s.scenario,
      String(s.runs),
      cell(s.targetRate),
      cell(s.rps.median),
      cell(s.latencyMs.p50, 2),
      cell(s.latencyMs.p90, 2),
      cell(s.latencyMs.p99, 2),
      cell(s.latencyMs.p999, 2),
      cell(s.latencyMs.max, 1),
      cell(s.over10msPercent, 2),
      cell(s.cpuMsPerRequest, 3),
      cell(s.dbCpuMsPerRequest, 3),
      cell(s.rssPeakMb, 0),
      cell(s.machineBusyPercent),
      String(s.errors + s.non2xx),
      auditCell(s),
    ]),
  );
  return [
    'Closed loop (maximum throughput; medians over the runs; p50/p99 here are under saturation):',
    closedTable,
    '',
    'Open loop (fixed rate; latency from each request\u2019s due time to the end of its answer):',
    openTable,
  ].join('\n');
}

export function formatEvaluator(figures: EvaluatorFigures[]): string {
  return table(
    ['policy set', 'decisions', 'p50 µs', 'p90 µs', 'p99 µs', 'p99.9 µs', 'batch mean µs', 'bench input p50 µs', 'compile ms', 'outcomes'],
    figures.map((f) => [
      `${f.policies} × 10`,
      String(f.decisions),
      cell(f.perDecisionUs.p50, 2),
      cell(f.perDecisionUs.p90, 2),
      cell(f.perDecisionUs.p99, 2),
      cell(f.perDecisionUs.p999, 1),
      cell(f.batchMeanUs, 2),
      cell(f.benchInputUs.p50, 2),
      cell(f.compileMs.median, 2),
      Object.entries(f.outcomes)
        .map(([k, v]) => `${k} ${v}`)
        .join(', '),
    ]),
  );
}
