/** Statistics over samples and runs, and the readable tables. */
import type { Measured } from './load.ts';

export const median = (values: number[]): number => {
  const sorted = values.filter(Number.isFinite).sort((a, b) => a - b);
  if (sorted.length === 0) return Number.NaN;
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? (sorted[mid] as number) : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
};

/** Rounded to `digits`; null when not a number (so JSON says so). */
export const round = (value: number | null | undefined, digits = 3): number | null =>
  value === null || value === undefined || !Number.isFinite(value) ? null : Number(value.toFixed(digits));

export interface Percentiles {
  p50: number;
  p90: number;
  p99: number;
  p999: number;
  max: number;
  mean: number;
}

/** Nearest-rank percentiles of the samples (ms or µs, as given), to 3 decimals. */
export function percentiles(values: ArrayLike<number>): Percentiles {
  const sorted = Float64Array.from(values).sort();
  const at = (q: number) =>
    sorted.length ? (sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))] as number) : Number.NaN;
  const r = (v: number) => Number(v.toFixed(3));
  const mean = sorted.reduce((a, b) => a + b, 0) / (sorted.length || Number.NaN);
  return { p50: r(at(0.5)), p90: r(at(0.9)), p99: r(at(0.99)), p999: r(at(0.999)), max: r(at(1)), mean: r(mean) };
}

/** Medians over the runs of each target, scenario and mode. */
export type Summary = ReturnType<typeof summariseGroup>;

function summariseGroup(group: Measured[]) {
  const first = group[0] as Measured;
  const med = (pick: (m: Measured) => number | null | undefined, digits = 3) =>
    round(median(group.map((m) => pick(m) ?? Number.NaN)), digits);
  const rps = group.map((m) => m.load.rps);
  const audits = group.flatMap((m) => (m.audit ? [m.audit] : []));
  return {
    target: first.target,
    scenario: first.scenario,
    mode: first.mode,
    runs: group.length,
    rps: { median: round(median(rps), 0), min: round(Math.min(...rps), 0), max: round(Math.max(...rps), 0) },
    latencyMs: {
      p50: med((m) => m.load.latencyMs.p50),
      p90: med((m) => m.load.latencyMs.p90),
      p99: med((m) => m.load.latencyMs.p99),
      p999: med((m) => m.load.latencyMs.p999),
      max: round(Math.max(...group.map((m) => m.load.latencyMs.max))),
    },
    over10msPercent: med((m) => m.load.over10msPercent, 2),
    targetRate: round(first.load.targetRate, 0),
    cpuMsPerRequest: med((m) => m.cpuMsPerRequest, 4),
    dbCpuMsPerRequest: med((m) => m.dbCpuMsPerRequest, 4),
    serverCorePercent: med((m) => m.serverCorePercent, 0),
    serverSystemPercent: med((m) => m.serverSystemPercent, 0),
    rssPeakMb: round(Math.max(...group.map((m) => m.rssPeakMb)), 1),
    machineBusyPercent: med((m) => m.machineBusyPercent, 0),
    clientCorePercent: med((m) => (100 * (m.load.clientCpuMs ?? Number.NaN)) / (m.load.durationS * 1000), 0),
    errors: group.reduce((a, m) => a + m.load.errors + m.load.non2xx, 0),
    audit: audits.length
      ? {
          written: audits.reduce((a, x) => a + x.written, 0),
          expected: audits.reduce((a, x) => a + x.expected, 0),
          ok: audits.every((x) => x.ok),
        }
      : null,
  };
}

export function summarise(runs: Measured[]): Summary[] {
  const groups = new Map<string, Measured[]>();
  for (const run of runs) {
    const key = `${run.target}|${run.scenario}|${run.mode}`;
    groups.set(key, [...(groups.get(key) ?? []), run]);
  }
  return [...groups.values()].map(summariseGroup);
}

const cell = (value: number | null | undefined, digits = 0) =>
  value === null || value === undefined || !Number.isFinite(value) ? '–' : value.toFixed(digits);

/** A plain-text table: the first two columns left-aligned, the others right-aligned. */
export function table(headers: string[], rows: string[][]): string {
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((row) => (row[i] ?? '').length)));
  const line = (cells: string[]) =>
    cells.map((c, i) => (i < 2 ? c.padEnd(widths[i] as number) : c.padStart(widths[i] as number))).join('  ');
  return [line(headers), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(line)].join('\n');
}

type Column = [header: string, value: (s: Summary) => string];
const number = (header: string, pick: (s: Summary) => number | null | undefined, digits = 0): Column => [
  header,
  (s) => cell(pick(s), digits),
];
const FIRST: Column[] = [
  ['target', (s) => s.target],
  ['scenario', (s) => s.scenario],
  ['runs', (s) => String(s.runs)],
  number('CPU ms/req', (s) => s.cpuMsPerRequest, 3),
  number('DB CPU ms/req', (s) => s.dbCpuMsPerRequest, 3),
];
const LAST: Column[] = [
  number('RSS MB', (s) => s.rssPeakMb),
  number('box busy%', (s) => s.machineBusyPercent),
  ['errors', (s) => String(s.errors)],
  ['audit rows', (s) => (s.audit ? `${s.audit.written}/${s.audit.expected} ${s.audit.ok ? 'ok' : 'MISMATCH'}` : 'n/a')],
];
const CLOSED: Column[] = [
  number('req/s med', (s) => s.rps.median),
  number('min', (s) => s.rps.min),
  number('max', (s) => s.rps.max),
  number('p50 ms', (s) => s.latencyMs.p50, 2),
  number('p99 ms', (s) => s.latencyMs.p99, 2),
  number('srv core%', (s) => s.serverCorePercent),
  number('srv sys%', (s) => s.serverSystemPercent),
  number('gen core%', (s) => s.clientCorePercent),
];
const OPEN: Column[] = [
  number('rate/s', (s) => s.targetRate),
  number('got/s', (s) => s.rps.median),
  ...(['p50', 'p90', 'p99', 'p999'] as const).map((p) => number(`${p === 'p999' ? 'p99.9' : p} ms`, (s) => s.latencyMs[p], 2)),
  number('max ms', (s) => s.latencyMs.max, 1),
  number('>10 ms %', (s) => s.over10msPercent, 2),
];

/** CPU per request comes first: on these machines it is steady where requests per second are not. */
export function formatTables(summaries: Summary[]): string[] {
  const render = (mode: 'closed' | 'open', columns: Column[]) => {
    const all = [...FIRST, ...columns, ...LAST];
    const rows = summaries.filter((s) => s.mode === mode).map((s) => all.map(([, value]) => value(s)));
    return table(
      all.map(([header]) => header),
      rows,
    );
  };
  return [
    'Closed loop (maximum throughput; medians over the runs; p50/p99 under saturation):',
    render('closed', CLOSED),
    '',
    'Open loop (fixed rate; latency from each request’s due time to the end of its answer):',
    render('open', OPEN),
  ];
}
