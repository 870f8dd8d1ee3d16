/**
 * `npm run bench:scale` (issue 22): does what an auditor asks of the audit log cost the same
 * whatever its history? Target: each operation's p50 at 1,000,000 events within 2× of its
 * 10,000-event figure.
 *
 * Per size, a Warden (one server process) on a database of its own, N events seeded (history.ts),
 * sealed and checkpointed by the server itself, VACUUM ANALYZEd, verified once in full. Once every
 * size is ready, sequential requests interleaved across the sizes (request i of an operation goes
 * to each size in turn, the order reversed every other round, so other work on the machine
 * disturbs every size alike), with the CPU time of each request's server and PostgreSQL sessions.
 */
import { statfsSync } from 'node:fs';
import { positive, UsageError } from '../config.ts';
import { seedHistory, seedWorkspace, waitSealed } from '../history.ts';
import { log, type Scenario, type Warden, warden } from '../lab.ts';
import { meter } from '../load.ts';
import { percentiles, round, table } from '../report.ts';

/** `10000`, `10_000`, `10k`, `1m`, `1e6`. */
function parseSize(raw: string): number {
  const match = /^(\d+(?:\.\d+)?(?:e\d+)?)([km]?)$/.exec(raw.trim().toLowerCase().replaceAll('_', ''));
  const value = match ? Number(match[1]) * { '': 1, k: 1e3, m: 1e6 }[match[2] as '' | 'k' | 'm'] : Number.NaN;
  if (!Number.isInteger(value) || value < 1_000) throw new UsageError(`a size must be a whole number of events ≥ 1000, got '${raw}'`);
  return value;
}

const OPERATIONS = [
  'GET /compliance/status',
  'GET /audit/verify',
  'GET /audit/proofs/inclusion',
  'GET /events (first page)',
  'GET /events (first page, filter)',
  'GET /events (page N, filter)',
] as const;
type Operation = (typeof OPERATIONS)[number];

interface Size {
  size: number;
  warden: Warden;
  paths: Record<Operation, (i: number) => string>;
  facts: Record<string, unknown>;
  measured: Partial<Record<Operation, { p50: number; p90: number; max: number; cpuMs: number }>>;
}

export const scaleScenario: Scenario = {
  name: 'scale',
  about: 'what an auditor asks of the audit log, at 10,000 and 1,000,000 events (npm run bench:scale)',
  inFullRun: false,
  async run(config) {
    const at = config.argv.indexOf('--sizes');
    const sizesArg = config.argv.find((a) => a.startsWith('--sizes='))?.slice(8) ?? (at >= 0 ? config.argv[at + 1] : undefined);
    const sizes = [
      ...new Set((sizesArg ?? process.env.BENCH_SCALE_SIZES ?? '10000,1000000').split(',').filter(Boolean).map(parseSize)),
    ].sort((a, b) => a - b);
    const [requests, warmup] = [positive('BENCH_SCALE_REQUESTS', 30), positive('BENCH_SCALE_WARMUP', 3)];
    const [page, pageSize] = [positive('BENCH_SCALE_PAGE', 100), positive('BENCH_SCALE_PAGE_SIZE', 20)];
    const filter = process.env.BENCH_SCALE_FILTER ?? 'result=blocked';
    const prepared: Size[] = [];
    let bytesPerEvent = 2_000;
    for (const size of sizes) {
      const s = await warden(config, { label: `scale-${size}`, workers: 1, keepDatabase: config.argv.includes('--keep') });
      const dataDir = String((await s.db.pool.query('SHOW data_directory')).rows[0].data_directory);
      const free = (() => {
        try {
          const stats = statfsSync(dataDir);
          return stats.bavail * stats.bsize;
        } catch {
          return Number.POSITIVE_INFINITY; // PostgreSQL's disk is not on this machine
        }
      })();
      if (free < 2 * bytesPerEvent * size) {
        log(`size ${size}: skipped, ${(free / 2 ** 30).toFixed(1)} GiB free where PostgreSQL keeps its data`);
        continue;
      }
      const workspace = await seedWorkspace(s);
      const seedStart = Date.now();
      const seeded = await seedHistory(s, workspace, size, positive('BENCH_SCALE_EVENTS_PER_DAY', 10_000));
      const seedSeconds = (Date.now() - seedStart) / 1000;
      const sealed = await waitSealed(s.db.pool, workspace.workspaceId, positive('BENCH_SCALE_STALL_SECONDS', 120));
      const vacuumStart = Date.now();
      for (const t of ['audit_events', 'audit_seals', 'audit_tree_nodes', 'audit_unsealed', 'audit_checkpoints'])
        await s.db.pool.query(`VACUUM (ANALYZE) ${t}`);
      const vacuumSeconds = (Date.now() - vacuumStart) / 1000;
      const verifyStart = Date.now();
      const first = (await s.call('GET', '/audit/verify')).data;
      if (!first.valid) throw new Error(`size ${size}: the seeded log does not verify: ${JSON.stringify(first)}`);
      const firstVerificationSeconds = (Date.now() - verifyStart) / 1000;
      // the inclusion proofs ask for random events of the oldest half; the deep page is reached by its cursors
      const { rows } = await s.db.pool.query('SELECT event_id FROM audit_seals WHERE workspace_id = $1 AND sequence = ANY($2::bigint[])', [
        workspace.workspaceId,
        Array.from({ length: warmup + requests }, () => 1 + Math.floor((Math.random() * sealed.events) / 2)),
      ]);
      const filtered = `/events?${filter}&limit=${pageSize}`;
      let cursor = '';
      for (let p = 1; p < page; p++) {
        cursor = (await s.call<{ next_cursor: string | null }>('GET', `${filtered}${cursor}`)).next_cursor ?? '';
        if (!cursor) throw new Error(`size ${size}: the filter '${filter}' has no page ${p + 1}; seed more events`);
        cursor = `&cursor=${encodeURIComponent(cursor)}`;
      }
      const databaseBytes = Number((await s.db.pool.query('SELECT pg_database_size(current_database()) AS n')).rows[0].n);
      bytesPerEvent = databaseBytes / sealed.events;
      const facts = {
        events: sealed.events,
        seed: { seconds: seedSeconds, eventsPerSecond: Math.round(size / seedSeconds), first: seeded.first, last: seeded.last },
        sealing: {
          eventsPerSecond: Math.round(sealed.events / ((sealed.coveredAt - seeded.firstCommitAt) / 1000)),
          afterSeedSeconds: sealed.seconds,
          ratePer10s: sealed.ratePer10s,
          checkpointLagSeconds: sealed.checkpointLagSeconds,
        },
        vacuumSeconds,
        firstVerificationSeconds,
        databaseBytes,
        bytesPerEvent: Math.round(bytesPerEvent),
      };
      log(`size ${size}: ${JSON.stringify(facts.sealing)}; first verification ${firstVerificationSeconds} s`);
      const oldest = rows.map((r) => r.event_id as string);
      prepared.push({
        size,
        warden: s,
        facts,
        measured: {},
        paths: {
          'GET /compliance/status': () => '/compliance/status',
          'GET /audit/verify': () => '/audit/verify',
          'GET /audit/proofs/inclusion': (i) => `/audit/proofs/inclusion?event_id=${oldest[i % oldest.length]}`,
          'GET /events (first page)': () => `/events?limit=${pageSize}`,
          'GET /events (first page, filter)': () => filtered,
          'GET /events (page N, filter)': () => `${filtered}${cursor}`,
        },
      });
    }
    for (const name of OPERATIONS) {
      const samples = prepared.map(() => ({ ms: [] as number[], cpuMs: 0 }));
      for (let i = 0; i < warmup + requests; i++) {
        for (const k of prepared.keys()) {
          const at = i % 2 === 0 ? k : prepared.length - 1 - k;
          const { warden: s, paths, size } = prepared[at] as Size;
          const stop = await meter(s);
          const started = performance.now();
          const { data } = await s.call('GET', paths[name](i));
          const ms = performance.now() - started;
          const usage = stop();
          if (name === 'GET /audit/verify' && !data.valid) throw new Error(`size ${size}: the log did not verify`);
          if (name.startsWith('GET /events') && data.length !== pageSize) throw new Error(`size ${size}: ${name} came back short`);
          if (i < warmup) continue;
          (samples[at] as (typeof samples)[number]).ms.push(ms);
          (samples[at] as (typeof samples)[number]).cpuMs += usage.cpuMs + (usage.dbCpuMs ?? 0);
        }
      }
      for (const [k, { ms, cpuMs }] of samples.entries()) {
        const p = percentiles(ms);
        (prepared[k] as Size).measured[name] = { p50: p.p50, p90: p.p90, max: p.max, cpuMs: round(cpuMs / requests, 2) as number };
      }
      log(`${name}: ${prepared.map((p) => `${p.size}: p50 ${p.measured[name]?.p50} ms`).join('; ')}`);
    }
    const base = prepared[0] as Size;
    const ratio = (p: Size, name: Operation) => round((p.measured[name]?.p50 ?? Number.NaN) / (base.measured[name]?.p50 ?? Number.NaN), 2);
    const cpuRatio = (p: Size, name: Operation) =>
      round((p.measured[name]?.cpuMs ?? Number.NaN) / (base.measured[name]?.cpuMs ?? Number.NaN), 2);
    return {
      report: [
        `p50 ms and CPU ms per request (server + PostgreSQL) by size; ratios to ${base.size.toLocaleString('en')} (target p50 ≤ 2×):`,
        table(
          ['operation', ...prepared.map((p) => p.size.toLocaleString('en'))],
          OPERATIONS.map((name) => [
            name,
            ...prepared.map(
              (p) => `${p.measured[name]?.p50} ms (${ratio(p, name)}×) | CPU ${p.measured[name]?.cpuMs} ms (${cpuRatio(p, name)}×)`,
            ),
          ]),
        ),
        ...prepared.map((p) => `  ${p.size.toLocaleString('en')}: ${JSON.stringify(p.facts)}`),
      ],
      // the unfiltered first page is shown beside the operations issue 22 names
      targets: Object.fromEntries(
        OPERATIONS.filter((name) => name !== 'GET /events (first page)').map((name) => [
          `${name}: p50 <= 2 x at every size`,
          prepared.every((p) => (ratio(p, name) ?? Number.POSITIVE_INFINITY) <= 2),
        ]),
      ),
      figures: {
        sizes: prepared.map(({ size, facts, measured, warden: s }) => ({ size, database: s.db.name, ...facts, operations: measured })),
      },
    };
  },
};
