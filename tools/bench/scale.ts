/**
 * `npm run bench:scale`: does what an auditor asks of the audit log cost the same whatever
 * its history? (issue 22: each within 2× of its 10,000-event figure at 1,000,000 events.)
 *
 * Per size, on a database of its own (`warden_bench_scale_<size>_<pid>`, dropped at the end):
 * a real Warden (`startWarden`, one server process), 20 agents and 3 policies created through
 * the API, then N audit events seeded with COPY into audit_events and the sealing queue
 * (scale-seed.ts). The server's own sealer seals them and its checkpointer signs the tree; the
 * run waits (bounded) until the tree head and a signed checkpoint cover every event of the
 * workspace, reports the sealing rate, VACUUM ANALYZEs the audit tables (the state autovacuum
 * leaves them in) and times the first verification (which reads every event once). Every
 * size's server and database stay up until all sizes are ready; then p50/p95 and CPU time per
 * request of sequential requests (after warm-ups), interleaved across the sizes:
 *
 *   GET /compliance/status, GET /audit/verify (incremental), GET /audit/proofs/inclusion of a
 *   random event of the oldest half against the latest checkpoint, GET /events first page
 *   unfiltered, first page and 100th page (cursors followed) with `result=blocked`.
 *
 * Prints a table per size, then every size's p50 and its ratio to the smallest size's p50
 * (the target: ≤ 2× at every larger size), and writes the JSON to test-output/bench-scale/.
 *
 *   DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres npm run bench:scale
 *   DATABASE_URL=… npm run bench:scale -- --sizes 10000,100000
 *
 * See tools/bench/README.md (`npm run bench:scale`) for the settings.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, statfsSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { Agent, request } from 'undici';
import { type BenchDatabase, backendPids, createBenchDatabase, redact, serverFacts } from './database.ts';
import { cpuMs, killAllNow, ROOT, refuseNewChildren, sleep, stopAll } from './procs.ts';
import { RESULT_SHARES, type SeedAgent, seedAuditEvents } from './scale-seed.ts';
import { startWarden, WARDEN_APP_NAME, type WardenTarget } from './targets.ts';

const OUT_DIR = join(ROOT, 'test-output/bench-scale');
const log = (message: string) => process.stderr.write(`[bench:scale] ${message}\n`);

// ---------------------------------------------------------------- settings

class UsageError extends Error {}

/** `10000`, `10_000`, `10k`, `1m`, `1e6`. */
function parseSize(raw: string): number {
  const text = raw.trim().toLowerCase().replaceAll('_', '');
  const match = /^(\d+(?:\.\d+)?(?:e\d+)?)([km]?)$/.exec(text);
  const value = match ? Number(match[1]) * (match[2] === 'k' ? 1e3 : match[2] === 'm' ? 1e6 : 1) : Number.NaN;
  if (!Number.isInteger(value) || value < 1_000) throw new UsageError(`a size must be a whole number of events ≥ 1000, got '${raw}'`);
  return value;
}

function positive(name: string, fallback: number): number {
  const raw = process.env[name];
  if (!raw) return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value <= 0) throw new UsageError(`${name} must be a positive integer, got '${raw}'`);
  return value;
}

interface ScaleConfig {
  databaseUrl: string;
  redisUrl: string;
  sizes: number[];
  /** Measured requests per operation (BENCH_SCALE_REQUESTS, 30) after BENCH_SCALE_WARMUP (3). */
  requests: number;
  warmup: number;
  /** The seeded history's rate (BENCH_SCALE_EVENTS_PER_DAY, 10000). */
  eventsPerDay: number;
  /** The listing page measured deep in the history (BENCH_SCALE_PAGE, 100) and its size (BENCH_SCALE_PAGE_SIZE, 20). */
  page: number;
  pageSize: number;
  /** The listing filter (BENCH_SCALE_FILTER, `result=blocked`), a query string. */
  filter: string;
  /** Give up when the tree has not grown for this long (BENCH_SCALE_STALL_SECONDS, 120). */
  stallSeconds: number;
  /** Keep each size's database (`--keep`), e.g. to EXPLAIN its queries; its name is printed. */
  keep: boolean;
}

function loadConfig(argv: string[]): ScaleConfig {
  const databaseUrl = process.env.DATABASE_URL;
  if (!databaseUrl) {
    throw new UsageError(
      'DATABASE_URL is not set. `npm run bench:scale` runs against a real PostgreSQL server: it creates a database ' +
        'warden_bench_scale_<size>_<pid> there per size and drops it at the end. For example:\n' +
        '  DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres npm run bench:scale -- --sizes 10000,100000',
    );
  }
  let sizesArg: string | undefined;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] as string;
    if (arg === '--sizes') {
      sizesArg = argv[++i];
      if (sizesArg === undefined) throw new UsageError('--sizes needs a list, e.g. --sizes 10000,100000');
    } else if (arg.startsWith('--sizes=')) sizesArg = arg.slice('--sizes='.length);
    else if (arg !== '--keep') throw new UsageError(`unknown argument '${arg}' (known: --sizes N,N,…  --keep)`);
  }
  const sizes = (sizesArg ?? process.env.BENCH_SCALE_SIZES ?? '10000,1000000').split(',').filter(Boolean).map(parseSize);
  if (sizes.length === 0) throw new UsageError('--sizes lists no size');
  const sorted = [...new Set(sizes)].sort((a, b) => a - b);
  const filter = process.env.BENCH_SCALE_FILTER ?? 'result=blocked';
  return {
    databaseUrl,
    redisUrl: process.env.REDIS_URL || 'redis://127.0.0.1:6379',
    sizes: sorted,
    requests: positive('BENCH_SCALE_REQUESTS', 30),
    warmup: positive('BENCH_SCALE_WARMUP', 3),
    eventsPerDay: positive('BENCH_SCALE_EVENTS_PER_DAY', 10_000),
    page: positive('BENCH_SCALE_PAGE', 100),
    pageSize: positive('BENCH_SCALE_PAGE_SIZE', 20),
    filter,
    stallSeconds: positive('BENCH_SCALE_STALL_SECONDS', 120),
    keep: argv.includes('--keep'),
  };
}

// ---------------------------------------------------------------- cleanup, on every path

const cleanups: Array<() => Promise<void>> = [];
let cleaning: Promise<void> | undefined;

/** Stops every child, then runs the cleanups (newest first) and forgets them. */
async function runCleanups(): Promise<void> {
  await stopAll().catch((error) => log(`stopping children: ${(error as Error).message}`));
  while (cleanups.length > 0) {
    const step = cleanups.pop() as () => Promise<void>;
    await step().catch((error) => log(`cleanup: ${(error as Error).message}`));
  }
}

for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
  process.once(signal, () => {
    log(`${signal}: stopping Warden and dropping the bench databases`);
    refuseNewChildren();
    const hard = setTimeout(() => {
      killAllNow();
      process.exit(130);
    }, 30_000);
    cleaning ??= runCleanups();
    void cleaning.finally(() => {
      clearTimeout(hard);
      process.exit(130);
    });
  });
}
process.once('exit', () => killAllNow());

// ---------------------------------------------------------------- HTTP

/** No client-side timeout: the first verification after seeding reads the whole history. */
const dispatcher = new Agent({ headersTimeout: 0, bodyTimeout: 0, connections: 4 });

interface Api {
  get(path: string): Promise<{ status: number; ms: number; body: unknown }>;
  post(path: string, body: unknown): Promise<unknown>;
}

function api(warden: WardenTarget): Api {
  const headers = { authorization: `Bearer ${warden.key}` };
  return {
    async get(path) {
      const start = process.hrtime.bigint();
      const res = await request(`${warden.baseUrl}${path}`, { method: 'GET', headers, dispatcher });
      const text = await res.body.text();
      const ms = Number(process.hrtime.bigint() - start) / 1e6;
      return { status: res.statusCode, ms, body: text ? JSON.parse(text) : undefined };
    },
    async post(path, body) {
      const res = await request(`${warden.baseUrl}${path}`, {
        method: 'POST',
        headers: { ...headers, 'content-type': 'application/json' },
        body: JSON.stringify(body),
        dispatcher,
      });
      const text = await res.body.text();
      if (res.statusCode >= 300) throw new Error(`POST ${path} answered ${res.statusCode}: ${text.slice(0, 400)}`);
      return JSON.parse(text);
    },
  };
}

// ---------------------------------------------------------------- the workspace

const ENVIRONMENTS = ['production', 'production', 'staging', 'development'] as const;

/** 20 agents and 3 enforcing policies, through the API (each a configuration event of the log). */
async function seedThroughApi(client: Api): Promise<SeedAgent[]> {
  const agents: SeedAgent[] = [];
  for (let i = 1; i <= 20; i++) {
    const n = String(i).padStart(2, '0');
    const environment = ENVIRONMENTS[i % ENVIRONMENTS.length] as string;
    const created = (await client.post('/agents', {
      name: `Scale agent ${n}`,
      slug: `scale-agent-${n}`,
      provider: i % 2 ? 'anthropic' : 'openai',
      environment,
      risk_level: (['low', 'medium', 'high'] as const)[i % 3],
      tags: ['bench-scale', `team-${i % 5}`],
    })) as { data: { id: string; slug: string } };
    agents.push({ id: created.data.id, slug: created.data.slug, environment });
  }
  const policies = [
    {
      name: 'destructive-actions',
      rules: [{ id: 'r0', match: { action: ['*.delete', 'db.*.drop'] }, effect: 'block', severity: 'critical' }],
    },
    {
      name: 'payments-guard',
      rules: [{ id: 'r0', match: { action: ['payments.*'] }, condition: 'context.amount > 1000', effect: 'require_approval' }],
    },
    { name: 'baseline-allow', rules: [{ id: 'r0', match: { action: ['*'] }, effect: 'allow', severity: 'info' }] },
  ];
  for (const [i, policy] of policies.entries())
    await client.post('/policies', { ...policy, priority: 100 - i, enabled: true, mode: 'enforce' });
  return agents;
}

// ---------------------------------------------------------------- sealing

interface SealState {
  treeSize: number;
  checkpointSize: number;
  /** Whether any of the workspace's events is still queued (an EXISTS: counting the queue twice a second would compete with the sealer). */
  queued: boolean;
}

async function sealState(pool: pg.Pool, workspaceId: string): Promise<SealState> {
  const { rows } = await pool.query(
    'SELECT (SELECT tree_size FROM audit_tree_heads WHERE workspace_id = $1) AS tree_size, ' +
      '(SELECT max(tree_size) FROM audit_checkpoints WHERE workspace_id = $1) AS checkpoint_size, ' +
      'EXISTS (SELECT 1 FROM audit_unsealed WHERE workspace_id = $1) AS queued',
    [workspaceId],
  );
  const row = rows[0];
  return { treeSize: Number(row.tree_size ?? 0), checkpointSize: Number(row.checkpoint_size ?? 0), queued: row.queued === true };
}

interface SealingFigures {
  /** Events of the workspace (seeded and configuration events) the tree had to cover. */
  target: number;
  /** From the first seeded chunk's commit until the tree head covered every event. */
  seconds: number;
  eventsPerSecond: number;
  /** Only the part after the seeding ended (the sealer alone, nothing copied meanwhile). */
  afterSeedSeconds: number;
  afterSeedEvents: number;
  afterSeedEventsPerSecond: number;
  /** From the tree head covering every event until a signed checkpoint did. */
  checkpointLagSeconds: number;
  /** Events sealed per second in each 10 s of the wait (does sealing slow down as the queue empties?). */
  ratePer10s: number[];
}

/** Waits until the tree head and a signed checkpoint cover `target` events: bounded by no progress for `stallSeconds`. */
async function waitSealed(
  pool: pg.Pool,
  workspaceId: string,
  target: number,
  firstCommitAt: number,
  seededAt: number,
  stallSeconds: number,
): Promise<SealingFigures> {
  const atSeedEnd = (await sealState(pool, workspaceId)).treeSize;
  let last = atSeedEnd;
  let lastProgress = Date.now();
  let coveredAt: number | undefined;
  const ratePer10s: number[] = [];
  let windowStart = Date.now();
  let windowSize = atSeedEnd;
  let reported = Date.now();
  for (;;) {
    const state = await sealState(pool, workspaceId);
    const now = Date.now();
    if (state.treeSize > last) {
      last = state.treeSize;
      lastProgress = now;
    }
    if (now - windowStart >= 10_000) {
      ratePer10s.push(Math.round(((state.treeSize - windowSize) * 1000) / (now - windowStart)));
      windowStart = now;
      windowSize = state.treeSize;
    }
    if (coveredAt === undefined && state.treeSize >= target) coveredAt = now;
    if (coveredAt !== undefined && state.checkpointSize >= target && !state.queued) {
      const seconds = (coveredAt - firstCommitAt) / 1000;
      const afterSeedSeconds = (coveredAt - seededAt) / 1000;
      return {
        target,
        seconds,
        eventsPerSecond: Math.round(target / Math.max(seconds, 0.001)),
        afterSeedSeconds,
        afterSeedEvents: target - atSeedEnd,
        afterSeedEventsPerSecond: Math.round((target - atSeedEnd) / Math.max(afterSeedSeconds, 0.001)),
        checkpointLagSeconds: (now - coveredAt) / 1000,
        ratePer10s,
      };
    }
    if (now - lastProgress > stallSeconds * 1000) {
      throw new Error(
        `sealing stalled: tree ${state.treeSize} of ${target}, checkpoint ${state.checkpointSize}, ${state.queued ? 'events' : 'nothing'} queued, no progress for ${stallSeconds} s`,
      );
    }
    if (now - reported >= 15_000) {
      reported = now;
      log(`  sealing: tree ${state.treeSize.toLocaleString('en')} of ${target.toLocaleString('en')}`);
    }
    await sleep(500);
  }
}

// ---------------------------------------------------------------- measuring

interface OperationFigures {
  p50: number;
  p95: number;
  min: number;
  max: number;
  /**
   * CPU time per request of the server process and its PostgreSQL sessions (utime+stime from
   * /proc, 10 ms ticks, over the measured requests): less disturbed by other work on the
   * machine than the latencies.
   */
  serverCpuMs: number;
  dbCpuMs: number;
  samples: number[];
}

/** Where the measured requests' CPU time is read: the server process and its PostgreSQL sessions. */
interface CpuProbe {
  serverPid: number;
  pool: pg.Pool;
}

const safeCpuMs = (pid: number) => {
  try {
    return cpuMs(pid);
  } catch {
    return undefined;
  }
};

const OPERATIONS = [
  'GET /compliance/status',
  'GET /audit/verify',
  'GET /audit/proofs/inclusion',
  'GET /events (first page)',
  'GET /events (first page, filter)',
  'GET /events (page N, filter)',
] as const;
type Operation = (typeof OPERATIONS)[number];
/** The operations issue 22's target names (the unfiltered first page is shown beside them). */
const TARGETED: readonly Operation[] = [
  'GET /compliance/status',
  'GET /audit/verify',
  'GET /audit/proofs/inclusion',
  'GET /events (first page, filter)',
  'GET /events (page N, filter)',
];

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[rank] as number;
}

const round3 = (value: number) => Math.round(value * 1000) / 1000;

interface SizeResult {
  size: number;
  database: string;
  workspaceEvents: number;
  seed: { seconds: number; eventsPerSecond: number; first: string; last: string };
  sealing: SealingFigures;
  vacuumAnalyzeSeconds: number;
  firstVerification: { ms: number; checked: number; valid: boolean };
  pageWalk: { pages: number; ms: number; matchedBefore: number };
  storage: { databaseBytes: number; bytesPerEvent: number; tables: Record<string, number> };
  operations: Record<Operation, OperationFigures>;
}

/** A size seeded, sealed and verified once: its server and database stay up until every size is measured. */
interface Prepared {
  size: number;
  client: Api;
  probe: CpuProbe;
  paths: Record<Operation, (i: number) => string>;
  result: Omit<SizeResult, 'operations'>;
}

async function workspaceIdOf(client: Api): Promise<string> {
  const res = await client.get('/audit/signing-key');
  const name = (res.body as { data?: { key_name?: string } })?.data?.key_name;
  const id = name?.slice(name.lastIndexOf('/') + 1);
  if (res.status !== 200 || !id) throw new Error(`GET /audit/signing-key answered ${res.status}: cannot tell the workspace id`);
  return id;
}

async function prepareSize(config: ScaleConfig, size: number, dataDirRoot: string): Promise<Prepared> {
  const db: BenchDatabase = await createBenchDatabase(config.databaseUrl, `warden_bench_scale_${size}_${process.pid}`);
  log(`size ${size.toLocaleString('en')}: database ${db.name}`);
  cleanups.push(async () => {
    if (config.keep) {
      await db.pool.end().catch(() => undefined);
      log(`kept database ${db.name} (--keep): drop it with DROP DATABASE ${db.name} WITH (FORCE)`);
      return;
    }
    await db.drop();
    log(`dropped database ${db.name}`);
  });
  const dataDir = mkdtempSync(join(dataDirRoot, `size-${size}-`));
  const warden = await startWarden({
    databaseUrl: db.url,
    redisUrl: config.redisUrl,
    dataDir,
    logDir: OUT_DIR,
    label: `warden-scale-${size}`,
    workers: 1,
  });
  cleanups.push(() => warden.stop());
  log(`  Warden at ${warden.baseUrl} (server pid ${warden.pid}; log ${warden.logFile})`);
  const client = api(warden);
  const workspaceId = await workspaceIdOf(client);
  const agents = await seedThroughApi(client);

  // ---- seed
  const seeder = new pg.Client({ connectionString: db.url, application_name: 'bench-scale-seed' });
  await seeder.connect();
  const seedStart = Date.now();
  let firstCommitAt = 0;
  let lastReport = seedStart;
  const seeded = await seedAuditEvents(seeder, workspaceId, agents, size, {
    eventsPerDay: config.eventsPerDay,
    endMs: seedStart - 1_000,
    onChunk: (done) => {
      firstCommitAt ||= Date.now();
      if (Date.now() - lastReport > 10_000 || done === size) {
        lastReport = Date.now();
        log(`  seeded ${done.toLocaleString('en')} of ${size.toLocaleString('en')}`);
      }
    },
  }).finally(() => seeder.end());
  const seededAt = Date.now();
  const seedSeconds = (seededAt - seedStart) / 1000;
  log(`  COPY: ${size.toLocaleString('en')} events in ${seedSeconds.toFixed(1)} s`);

  // ---- sealing, by the server itself
  const { rows: countRows } = await db.pool.query('SELECT count(*) AS n FROM audit_events WHERE workspace_id = $1', [workspaceId]);
  const target = Number(countRows[0].n);
  const sealing = await waitSealed(db.pool, workspaceId, target, firstCommitAt, seededAt, config.stallSeconds);
  log(
    `  sealed ${target.toLocaleString('en')} events in ${sealing.seconds.toFixed(1)} s (${sealing.eventsPerSecond.toLocaleString('en')}/s; ` +
      `after the COPY ended: ${sealing.afterSeedEventsPerSecond.toLocaleString('en')}/s); checkpoint ${sealing.checkpointLagSeconds.toFixed(1)} s later`,
  );

  // ---- the state autovacuum would leave (statistics, visibility map, the emptied queue)
  const vacuumStart = Date.now();
  for (const table of ['audit_events', 'audit_seals', 'audit_tree_nodes', 'audit_unsealed', 'audit_checkpoints'])
    await db.pool.query(`VACUUM (ANALYZE) ${table}`);
  const vacuumAnalyzeSeconds = (Date.now() - vacuumStart) / 1000;

  // ---- the first verification reads every event once (later ones start where it ended)
  const cold = await client.get('/audit/verify');
  const coldBody = (cold.body as { data: { checked: number; valid: boolean } }).data;
  if (cold.status !== 200) throw new Error(`the first GET /audit/verify answered ${cold.status}`);
  if (!coldBody.valid) throw new Error(`the seeded log does not verify: ${JSON.stringify(cold.body)}`);
  log(`  first verification: ${coldBody.checked.toLocaleString('en')} events in ${(cold.ms / 1000).toFixed(1)} s`);

  // ---- what the measured requests ask for
  const { rows: oldRows } = await db.pool.query(
    'SELECT event_id FROM audit_seals WHERE workspace_id = $1 AND sequence = ANY($2::bigint[])',
    [workspaceId, Array.from({ length: config.warmup + config.requests }, () => 1 + Math.floor(Math.random() * Math.floor(target / 2)))],
  );
  const oldEvents = oldRows.map((row) => row.event_id as string);
  const filtered = `/events?${config.filter}&limit=${config.pageSize}`;
  const walkStart = Date.now();
  let cursor: string | null = null;
  let matchedBefore = 0;
  for (let page = 1; page < config.page; page++) {
    const res = await client.get(cursor ? `${filtered}&cursor=${encodeURIComponent(cursor)}` : filtered);
    const body = res.body as { data: unknown[]; next_cursor: string | null };
    if (res.status !== 200 || !body.next_cursor)
      throw new Error(`GET /events: page ${page} of the filter '${config.filter}' has no next page (${res.status}); seed more events`);
    matchedBefore += body.data.length;
    cursor = body.next_cursor;
  }
  const deepPage = `${filtered}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`;
  const pageWalk = { pages: config.page - 1, ms: Date.now() - walkStart, matchedBefore };

  const { rows: sizeRows } = await db.pool.query(
    "SELECT pg_database_size(current_database()) AS db, c.relname AS name, pg_total_relation_size(c.oid) AS bytes FROM pg_class c WHERE c.relkind IN ('r', 'p') AND c.relnamespace = 'public'::regnamespace AND (c.relname LIKE 'audit%' OR c.relname = 'outbox_events')",
  );
  const tables: Record<string, number> = {};
  for (const row of sizeRows) if (Number(row.bytes) > 0) tables[row.name as string] = Number(row.bytes);
  const databaseBytes = Number(sizeRows[0]?.db ?? 0);

  return {
    size,
    client,
    probe: { serverPid: warden.pid, pool: db.pool },
    paths: {
      'GET /compliance/status': () => '/compliance/status',
      'GET /audit/verify': () => '/audit/verify',
      'GET /audit/proofs/inclusion': (i) => `/audit/proofs/inclusion?event_id=${oldEvents[i % oldEvents.length]}`,
      'GET /events (first page)': () => `/events?limit=${config.pageSize}`,
      'GET /events (first page, filter)': () => filtered,
      'GET /events (page N, filter)': () => deepPage,
    },
    result: {
      size,
      database: db.name,
      workspaceEvents: target,
      seed: {
        seconds: seedSeconds,
        eventsPerSecond: Math.round(size / seedSeconds),
        first: seeded.first.toISOString(),
        last: seeded.last.toISOString(),
      },
      sealing,
      vacuumAnalyzeSeconds,
      firstVerification: { ms: round3(cold.ms), checked: coldBody.checked, valid: coldBody.valid },
      pageWalk,
      storage: { databaseBytes, bytesPerEvent: Math.round(databaseBytes / target), tables },
    },
  };
}

/** What every answer of an operation must show besides its 200. */
function checkOf(name: Operation, pageSize: number): (body: unknown) => string | undefined {
  switch (name) {
    case 'GET /compliance/status':
      return (body) => {
        const controls = (body as { data: { controls: { id: string; status: string }[] } }).data.controls;
        const chain = controls.find((c) => c.id === 'audit-chain');
        return chain?.status === 'pass' ? undefined : `the audit-chain control is ${chain?.status}`;
      };
    case 'GET /audit/verify':
      return (body) => ((body as { data: { valid: boolean } }).data.valid ? undefined : 'the log did not verify');
    case 'GET /audit/proofs/inclusion':
      return () => undefined;
    default:
      return (body) => ((body as { data: unknown[] }).data.length === pageSize ? undefined : 'a page came back short');
  }
}

/** CPU ms so far of the server and of each of these database sessions. */
function cpuNow(probe: CpuProbe, backends: number[]): { server: number; db: Map<number, number | undefined> } {
  return { server: safeCpuMs(probe.serverPid) ?? 0, db: new Map(backends.map((pid) => [pid, safeCpuMs(pid)])) };
}

/**
 * Every operation on every size, one request at a time and interleaved: for each operation,
 * request i goes to each size in turn (the order reversed every other round), so work elsewhere
 * on the machine disturbs every size alike and the ratios hold better than the latencies.
 */
async function measureAll(
  config: ScaleConfig,
  prepared: Prepared[],
): Promise<{ operations: Record<Operation, OperationFigures>[]; loadAvg: number[] }> {
  const operations = prepared.map(() => ({}) as Record<Operation, OperationFigures>);
  const loadAvg: number[] = [];
  for (const name of OPERATIONS) {
    const check = checkOf(name, config.pageSize);
    const acc = prepared.map(() => ({ samples: [] as number[], server: 0, db: 0 }));
    let backends: number[][] = [];
    for (let i = 0; i < config.warmup + config.requests; i++) {
      // The warm-ups opened the sessions the measured requests use.
      if (i === config.warmup) backends = await Promise.all(prepared.map((p) => backendPids(p.probe.pool, WARDEN_APP_NAME)));
      const order = prepared.map((_, k) => (i % 2 === 0 ? k : prepared.length - 1 - k));
      for (const k of order) {
        const p = prepared[k] as Prepared;
        const measured = i >= config.warmup;
        const before = measured ? cpuNow(p.probe, backends[k] ?? []) : undefined;
        const res = await p.client.get(p.paths[name](i));
        if (res.status !== 200)
          throw new Error(`${name} (size ${p.size}): answered ${res.status}: ${JSON.stringify(res.body).slice(0, 400)}`);
        const problem = check(res.body);
        if (problem) throw new Error(`${name} (size ${p.size}): ${problem}`);
        if (!before) continue;
        const after = cpuNow(p.probe, backends[k] ?? []);
        const a = acc[k] as (typeof acc)[number];
        a.samples.push(res.ms);
        a.server += after.server - before.server;
        for (const [pid, end] of after.db) {
          const start = before.db.get(pid);
          if (start !== undefined && end !== undefined) a.db += end - start;
        }
      }
    }
    loadAvg.push(Number((loadavg()[0] ?? 0).toFixed(2)));
    for (const [k, a] of acc.entries()) {
      const sorted = [...a.samples].sort((x, y) => x - y);
      const figures: OperationFigures = {
        p50: round3(percentile(sorted, 50)),
        p95: round3(percentile(sorted, 95)),
        min: round3(sorted[0] ?? Number.NaN),
        max: round3(sorted.at(-1) ?? Number.NaN),
        serverCpuMs: round3(a.server / config.requests),
        dbCpuMs: round3(a.db / config.requests),
        samples: a.samples.map(round3),
      };
      (operations[k] as Record<Operation, OperationFigures>)[name] = figures;
    }
    log(
      `${name}: ${prepared
        .map((p, k) => {
          const f = (operations[k] as Record<Operation, OperationFigures>)[name];
          return `${p.size.toLocaleString('en')}: p50 ${f.p50.toFixed(2)} ms, CPU ${(f.serverCpuMs + f.dbCpuMs).toFixed(1)} ms`;
        })
        .join('; ')}`,
    );
  }
  return { operations, loadAvg };
}

// ---------------------------------------------------------------- disk

/** Free bytes where PostgreSQL keeps its data (undefined when that directory is not on this machine). */
async function freeBytesOfPostgres(databaseUrl: string): Promise<number | undefined> {
  const client = new pg.Client({ connectionString: databaseUrl });
  try {
    await client.connect();
    const { rows } = await client.query('SHOW data_directory');
    const stats = statfsSync(String(rows[0].data_directory));
    return stats.bavail * stats.bsize;
  } catch {
    return undefined;
  } finally {
    await client.end().catch(() => undefined);
  }
}

// ---------------------------------------------------------------- report

const fmt = (value: number, digits = 2) => (Number.isFinite(value) ? value.toFixed(digits) : '–');
const pad = (text: string, width: number) => (text.length >= width ? text : text + ' '.repeat(width - text.length));
const padLeft = (text: string, width: number) => (text.length >= width ? text : ' '.repeat(width - text.length) + text);

const cpuOf = (f: OperationFigures) => f.serverCpuMs + f.dbCpuMs;

function sizeTable(result: SizeResult, base: SizeResult | undefined): string {
  const compared = base !== undefined && base !== result;
  const lines = [
    `size ${result.size.toLocaleString('en')} (${result.workspaceEvents.toLocaleString('en')} events in the workspace; database ${(result.storage.databaseBytes / 2 ** 20).toFixed(0)} MB, ${result.storage.bytesPerEvent} B/event)`,
    `  COPY ${result.seed.eventsPerSecond.toLocaleString('en')} events/s; sealing ${result.sealing.eventsPerSecond.toLocaleString('en')} events/s overall, ${result.sealing.afterSeedEventsPerSecond.toLocaleString('en')}/s after the COPY; checkpoint +${fmt(result.sealing.checkpointLagSeconds, 1)} s`,
    `  first verification ${fmt(result.firstVerification.ms / 1000, 1)} s (${result.firstVerification.checked.toLocaleString('en')} events); VACUUM ANALYZE ${fmt(result.vacuumAnalyzeSeconds, 1)} s`,
    `  ${pad('operation', 36)}${padLeft('p50 ms', 10)}${padLeft('p95 ms', 10)}${padLeft('max ms', 10)}${padLeft('CPU ms', 10)}${compared ? `${padLeft(`p50 ÷ ${base.size.toLocaleString('en')}`, 16)}${padLeft('CPU ÷', 8)}  target ≤ 2× (p50)` : ''}`,
  ];
  for (const name of OPERATIONS) {
    const figures = result.operations[name];
    let ratio = '';
    if (compared) {
      const r = figures.p50 / base.operations[name].p50;
      const c = cpuOf(figures) / cpuOf(base.operations[name]);
      ratio = `${padLeft(`${fmt(r)}×`, 16)}${padLeft(`${fmt(c)}×`, 8)}  ${TARGETED.includes(name) ? (r <= 2 ? 'pass' : 'FAIL') : '(shown)'}`;
    }
    lines.push(
      `  ${pad(name, 36)}${padLeft(fmt(figures.p50), 10)}${padLeft(fmt(figures.p95), 10)}${padLeft(fmt(figures.max), 10)}${padLeft(fmt(cpuOf(figures), 1), 10)}${ratio}`,
    );
  }
  return lines.join('\n');
}

function summaryTable(results: SizeResult[]): string {
  const sizes = results.map((r) => r.size.toLocaleString('en'));
  const base = results[0] as SizeResult;
  const lines = [
    `p50 ms, and CPU ms per request (server + PostgreSQL), by size (ratio to ${sizes[0]})`,
    `  ${pad('operation', 36)}${sizes.map((s) => padLeft(s, 34)).join('')}`,
  ];
  for (const name of OPERATIONS) {
    const cells = results.map((r) => {
      const f = r.operations[name];
      const b = base.operations[name];
      const text =
        r === base
          ? `${fmt(f.p50)} | ${fmt(cpuOf(f), 1)}`
          : `${fmt(f.p50)} (${fmt(f.p50 / b.p50)}×) | ${fmt(cpuOf(f), 1)} (${fmt(cpuOf(f) / cpuOf(b))}×)`;
      return padLeft(text, 34);
    });
    lines.push(`  ${pad(name, 36)}${cells.join('')}`);
  }
  return lines.join('\n');
}

// ---------------------------------------------------------------- main

async function main(): Promise<void> {
  let config: ScaleConfig;
  try {
    config = loadConfig(process.argv.slice(2));
  } catch (error) {
    process.stderr.write(`${(error as Error).message}\n`);
    process.exit(error instanceof UsageError ? 2 : 1);
  }
  mkdirSync(OUT_DIR, { recursive: true });
  const startedAt = new Date();
  const load = loadavg().map((v) => Number(v.toFixed(2)));
  if ((load[0] ?? 0) > cpus().length * 0.5)
    log(`warning: load average ${load.join(' ')} on ${cpus().length} cores: other work on this machine disturbs the figures`);
  log(`sizes ${config.sizes.map((s) => s.toLocaleString('en')).join(', ')} on ${redact(config.databaseUrl)}`);
  const dataDirRoot = mkdtempSync(join(tmpdir(), 'warden-bench-scale-'));
  cleanups.push(async () => rmSync(dataDirRoot, { recursive: true, force: true }));

  const facts = await (async () => {
    const pool = new pg.Pool({ connectionString: config.databaseUrl, max: 1 });
    try {
      return await serverFacts(pool);
    } finally {
      await pool.end();
    }
  })();
  const prepared: Prepared[] = [];
  const skipped: Array<{ size: number; reason: string }> = [];
  let failure: string | undefined;
  for (const size of config.sizes) {
    // Room for the size: bytes per event as the last size used them (or a generous guess), twice over for WAL.
    const perEvent = prepared.at(-1)?.result.storage.bytesPerEvent ?? 2_000;
    const free = await freeBytesOfPostgres(config.databaseUrl);
    const needed = size * perEvent * 2;
    if (free !== undefined && needed > free) {
      const reason = `needs about ${(needed / 2 ** 30).toFixed(1)} GB, PostgreSQL's disk has ${(free / 2 ** 30).toFixed(1)} GB free`;
      log(`size ${size.toLocaleString('en')} skipped: ${reason}`);
      skipped.push({ size, reason });
      continue;
    }
    try {
      prepared.push(await prepareSize(config, size, dataDirRoot));
    } catch (error) {
      failure = `size ${size}: ${(error as Error).stack ?? error}`;
      log(`failed: ${failure}`);
      break;
    }
  }
  const results: SizeResult[] = [];
  let loadAvgDuringMeasurement: number[] = [];
  if (!failure && prepared.length > 0) {
    log(`measuring ${prepared.length} size(s), interleaved: ${config.warmup} + ${config.requests} requests per operation and size`);
    try {
      const measured = await measureAll(config, prepared);
      loadAvgDuringMeasurement = measured.loadAvg;
      for (const [k, p] of prepared.entries())
        results.push({ ...p.result, operations: measured.operations[k] as Record<Operation, OperationFigures> });
    } catch (error) {
      failure = `measuring: ${(error as Error).stack ?? error}`;
      log(`failed: ${failure}`);
    }
  }
  for (const result of results) process.stdout.write(`\n${sizeTable(result, results[0])}\n`);

  const base = results[0];
  const targets = results.slice(1).map((result) => {
    const ratios = Object.fromEntries(
      TARGETED.map((name) => [name, round3(result.operations[name].p50 / (base as SizeResult).operations[name].p50)]),
    );
    const cpuRatios = Object.fromEntries(
      TARGETED.map((name) => [name, round3(cpuOf(result.operations[name]) / cpuOf((base as SizeResult).operations[name]))]),
    );
    return { size: result.size, baseSize: (base as SizeResult).size, ratios, pass: Object.values(ratios).every((r) => r <= 2), cpuRatios };
  });
  if (results.length > 1) process.stdout.write(`\n${summaryTable(results)}\n`);
  if (results.length > 0)
    process.stdout.write(`load average while measuring (after each operation): ${loadAvgDuringMeasurement.join(' ')}\n`);
  for (const t of targets)
    process.stdout.write(
      `target at ${t.size.toLocaleString('en')} (each p50 ≤ 2× its ${t.baseSize.toLocaleString('en')} p50): ${t.pass ? 'pass' : 'FAIL'}; ` +
        `CPU per request at most ${fmt(Math.max(...Object.values(t.cpuRatios)))}× its ${t.baseSize.toLocaleString('en')} figure\n`,
    );

  const commit = (() => {
    try {
      return execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: ROOT, stdio: ['ignore', 'pipe', 'ignore'] })
        .toString()
        .trim();
    } catch {
      return 'unknown';
    }
  })();
  const json = {
    benchmark: 'warden-scale',
    startedAt: startedAt.toISOString(),
    finishedAt: new Date().toISOString(),
    machine: {
      cores: cpus().length,
      cpuModel: cpus()[0]?.model ?? 'unknown',
      node: process.version,
      totalMemMb: Math.round(totalmem() / 2 ** 20),
      loadAvgAtStart: load,
    },
    postgres: facts,
    code: { commit },
    config: { ...config, databaseUrl: redact(config.databaseUrl), resultShares: RESULT_SHARES },
    loadAvgDuringMeasurement,
    results,
    skipped,
    targets,
    failure: failure ?? null,
  };
  const stamp = startedAt.toISOString().replace(/[-:]/g, '').replace(/\..*$/, '');
  writeFileSync(join(OUT_DIR, `scale-${stamp}.json`), `${JSON.stringify(json, null, 2)}\n`);
  writeFileSync(join(OUT_DIR, 'latest.json'), `${JSON.stringify(json, null, 2)}\n`);
  log(`JSON written to ${join(OUT_DIR, 'latest.json')}`);
  process.stdout.write(`${JSON.stringify(json)}\n`);
  if (failure) process.exitCode = 1;
}

try {
  await main();
} catch (error) {
  log(`failed: ${(error as Error).stack ?? error}`);
  process.exitCode = 1;
} finally {
  cleaning ??= runCleanups();
  await cleaning;
  await dispatcher.close().catch(() => undefined);
}
