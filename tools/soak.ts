/**
 * `npm run soak`: does anything leak when upstreams fail for a long time?
 *
 * Starts Warden as a child process (NODE_ENV=production, egress allowlist 127.0.0.1/32, a
 * temporary embedded database, or a fresh PostgreSQL database when DATABASE_URL is set) and
 * two faulty upstreams on 127.0.0.1 (one that hangs, one that resets), registers MCP servers
 * on them, and drives a steady mix of failures through POST /runtime/execute for SOAK_SECONDS
 * (default 300):
 *   - http_proxy to the hanging upstream (timeout_ms 500) and to the resetting one;
 *   - mcp_proxy to an MCP server that resets (once with transport `auto`, which gives up after
 *     the Streamable HTTP reset, once with transport `sse`), and to one that hangs (15 s MCP
 *     timeout).
 * Every 10 s (SOAK_SAMPLE_SECONDS) it samples the server process's RSS (VmRSS of
 * /proc/<pid>/status), its open sockets (`socket:` links in /proc/<pid>/fd) and its V8 heap:
 * `heap` is the used heap at the sample (from a diagnostic report the server writes on
 * SIGUSR2: it includes garbage not yet collected), `post-GC` the heap left by the latest full
 * (mark-compact) collection (from --trace-gc), the better measure of what is retained. It
 * prints a table row. Two samples are taken with the load paused and in-flight requests drained (so
 * they compare like with like: no request sockets in them): the first sample after the
 * warm-up (SOAK_WARMUP_SECONDS, default 60) and the last one, at the end. The final JSON line
 * has first/post-warm-up/last/max of each, and the verdict: "flat" when the last sample is
 * at most 10% (RSS) and 5 sockets above the post-warm-up one, else "growing" ("server died" if
 * it exited); the heap figures are reported beside it. Exits 1 unless flat.
 * SOAK_KINDS=http (or a comma list of `http hang`, `http reset`, `mcp reset`, `mcp hang`) keeps
 * only some of the lanes, to tell which failure leaks.
 * Only 127.0.0.1 is ever contacted; every loop is bounded by the duration.
 */
import { mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type ChildServer, randomKey, startChildServer } from '../tests/reliability/support/child-server.ts';
import { type FaultyUpstream, startHangingUpstream, startResettingUpstream } from '../tests/reliability/support/faulty-upstreams.ts';
import { freshDatabase } from '../tests/support/database.ts';

const SECONDS = Number(process.env.SOAK_SECONDS ?? 300);
const SAMPLE_SECONDS = Number(process.env.SOAK_SAMPLE_SECONDS ?? 10);
const WARMUP_SECONDS = Number(process.env.SOAK_WARMUP_SECONDS ?? Math.min(60, Math.floor(SECONDS / 5)));
const RSS_TOLERANCE = 0.1;
const SOCKET_TOLERANCE = 5;

interface Sample {
  t: number;
  rssKb: number;
  sockets: number;
  /** V8 heap in use at the sample (MiB), garbage included; NaN if no report came. */
  heapMb: number;
  /** V8 heap after the latest full collection (MiB); NaN before the first one. */
  postGcMb: number;
  requests: number;
  upstreamOpen: number;
}

function rssKb(pid: number): number {
  const line = readFileSync(`/proc/${pid}/status`, 'utf8')
    .split('\n')
    .find((l) => l.startsWith('VmRSS:'));
  return Number(line?.match(/(\d+)/)?.[1] ?? Number.NaN);
}

function openSockets(pid: number): number {
  let n = 0;
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    try {
      if (readlinkSync(`/proc/${pid}/fd/${fd}`).startsWith('socket:')) n++;
    } catch {
      // closed between readdir and readlink
    }
  }
  return n;
}

/** Asks the server for a diagnostic report (SIGUSR2) and reads its used V8 heap, in MiB. */
async function heapMb(pid: number, reportDir: string): Promise<number> {
  for (const name of readdirSync(reportDir)) rmSync(join(reportDir, name), { force: true });
  process.kill(pid, 'SIGUSR2');
  const deadline = Date.now() + 3_000;
  while (Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 50));
    const file = readdirSync(reportDir).find((name) => name.endsWith('.json'));
    if (!file) continue;
    try {
      const report = JSON.parse(readFileSync(join(reportDir, file), 'utf8')) as { javascriptHeap?: { usedMemory?: number } };
      rmSync(join(reportDir, file), { force: true });
      return Math.round(((report.javascriptHeap?.usedMemory ?? Number.NaN) / 1024 / 1024) * 10) / 10;
    } catch {
      // still being written
    }
  }
  return Number.NaN;
}

/**
 * The heap left by the latest mark-compact of the server's main isolate, in MiB, from its
 * --trace-gc output (`[pid:0xISOLATE] … Mark-Compact 80.1 (95.0) -> 56.2 (90.3) MB`). tsx's
 * module loader runs in a worker thread whose own (small) isolate traces too: the largest
 * isolate is the server's.
 */
function postGcMb(output: string): number {
  const latest = new Map<string, number>();
  for (const match of output.matchAll(/\[\d+:(0x[0-9a-f]+)\][^\n]*?Mark-Compact(?: \(reduce\))? [\d.]+ \([\d.]+\) -> ([\d.]+) \(/g)) {
    latest.set(match[1] as string, Number(match[2]));
  }
  return latest.size ? Math.max(...latest.values()) : Number.NaN;
}

async function main(): Promise<number> {
  const key = randomKey('soak');
  const hanging = await startHangingUpstream();
  const resetting = await startResettingUpstream();
  const mcpHanging = await startHangingUpstream('/mcp');
  const mcpResetting = await startResettingUpstream('/mcp');
  const upstreams: FaultyUpstream[] = [hanging, resetting, mcpHanging, mcpResetting];
  let dataDir: string | undefined;
  let drop: (() => Promise<void>) | undefined;
  const env: Record<string, string> = {
    NODE_ENV: 'production',
    WARDEN_BOOTSTRAP_KEY: key,
    WARDEN_EGRESS_ALLOWLIST: '127.0.0.1/32',
    WARDEN_RATE_LIMIT_PER_MINUTE: '100000000',
  };
  if (process.env.DATABASE_URL) {
    const db = await freshDatabase(process.env.DATABASE_URL, 'warden_soak');
    drop = db.drop;
    env.DATABASE_URL = db.url;
  } else {
    dataDir = mkdtempSync(join(tmpdir(), 'warden-soak-'));
    env.WARDEN_DATA_DIR = dataDir;
  }
  let server: ChildServer | undefined;
  const reportDir = mkdtempSync(join(tmpdir(), 'warden-soak-reports-'));
  const cleanup = async () => {
    await server?.stop(5_000);
    await Promise.all(upstreams.map((u) => u.close()));
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
    rmSync(reportDir, { recursive: true, force: true });
    await drop?.().catch(() => undefined);
  };
  process.once('SIGINT', () => void cleanup().then(() => process.exit(130)));

  try {
    server = await startChildServer({
      env,
      nodeArgs: [
        '--trace-gc',
        '--trace-gc-ignore-scavenger',
        '--report-on-signal',
        '--report-signal=SIGUSR2',
        `--report-directory=${reportDir}`,
        '--report-compact',
      ],
    });
    const live = server;
    const call = async (path: string, body: unknown, timeoutMs = 60_000) => {
      const res = await fetch(`${live.url}${path}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
        signal: AbortSignal.timeout(timeoutMs),
      });
      const json = (await res.json().catch(() => ({}))) as { error?: { code?: string } };
      return `${res.status} ${json.error?.code ?? ''}`.trim();
    };
    for (const [path, body] of [
      ['/agents', { name: 'Soak Bot', provider: 'local', slug: 'soak-bot' }],
      ['/mcp-servers', { name: 'hang', slug: 'hang-mcp', transport_url: mcpHanging.url, transport: 'streamable_http' }],
      ['/mcp-servers', { name: 'reset', slug: 'reset-mcp', transport_url: mcpResetting.url, transport: 'auto' }],
      ['/mcp-servers', { name: 'reset over SSE', slug: 'reset-sse-mcp', transport_url: mcpResetting.url, transport: 'sse' }],
    ] as const) {
      const status = await call(path, body);
      if (!status.startsWith('201')) throw new Error(`setup ${path}: ${status}`);
    }
    const input = { action: 'soak.call', agent: 'soak-bot' };
    const kinds: Record<string, () => Promise<string>> = {
      'http hang': () =>
        call('/runtime/execute', { input, execution: { mode: 'http_proxy', method: 'GET', url: hanging.url, timeout_ms: 500 } }),
      'http reset': () =>
        call('/runtime/execute', {
          input,
          execution: { mode: 'http_proxy', method: 'POST', url: resetting.url, body: { x: 1 }, timeout_ms: 2000 },
        }),
      'mcp reset': () =>
        call('/runtime/execute', { input, execution: { mode: 'mcp_proxy', server: 'reset-mcp', tool: 'echo', arguments: { text: 'x' } } }),
      'mcp sse reset': () =>
        call('/runtime/execute', {
          input,
          execution: { mode: 'mcp_proxy', server: 'reset-sse-mcp', tool: 'echo', arguments: { text: 'x' } },
        }),
      'mcp hang': () => call('/runtime/execute', { input, execution: { mode: 'mcp_proxy', server: 'hang-mcp', tool: 'echo' } }),
    };
    // lanes: each runs one kind back to back until the end; a gate lets them drain for the
    // two comparable ("drained") samples: after the warm-up and at the end.
    // SOAK_KINDS (e.g. `http`, or `http hang,mcp reset`) keeps only the lanes whose kind starts with one of them
    const only = (process.env.SOAK_KINDS ?? '')
      .split(',')
      .map((k) => k.trim())
      .filter(Boolean);
    const lanes = ['http hang', 'http hang', 'http hang', 'http reset', 'http reset', 'mcp reset', 'mcp sse reset', 'mcp hang'].filter(
      (kind) => only.length === 0 || only.some((prefix) => kind.startsWith(prefix)),
    );
    const counts: Record<string, Record<string, number>> = {};
    let requests = 0;
    let inFlight = 0;
    let gate: Promise<void> | undefined;
    let openGate = () => {};
    const started = Date.now();
    const endAt = started + SECONDS * 1000;
    const running = lanes.map(async (kind) => {
      while (Date.now() < endAt) {
        if (gate) {
          await gate;
          continue;
        }
        let outcome: string;
        inFlight++;
        try {
          outcome = await (kinds[kind] as () => Promise<string>)();
        } catch (error) {
          outcome = `transport ${(error as Error).name}`;
          await new Promise((r) => setTimeout(r, 200));
        } finally {
          inFlight--;
        }
        requests++;
        counts[kind] ??= {};
        (counts[kind] as Record<string, number>)[outcome] = ((counts[kind] as Record<string, number>)[outcome] ?? 0) + 1;
      }
    });
    const drain = async () => {
      const deadline = Date.now() + 30_000;
      while (inFlight > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
      // let closed sockets go, and the driver's idle keep-alive connections time out (the
      // server's keepAliveTimeout is Node's 5 s): they are not the server's to keep
      await new Promise((r) => setTimeout(r, 6_000));
    };

    const samples: Sample[] = [];
    const sample = async (label = '') => {
      const s: Sample = {
        t: Math.round((Date.now() - started) / 1000),
        rssKb: rssKb(live.pid),
        sockets: openSockets(live.pid),
        heapMb: await heapMb(live.pid, reportDir),
        postGcMb: postGcMb(live.output()),
        requests,
        upstreamOpen: upstreams.reduce((n, u) => n + u.open(), 0),
      };
      samples.push(s);
      console.log(
        `${String(s.t).padStart(6)} ${String(s.rssKb).padStart(10)} ${String(s.sockets).padStart(8)} ${String(s.heapMb).padStart(10)} ${String(s.postGcMb).padStart(13)} ${String(s.requests).padStart(9)} ${String(s.upstreamOpen).padStart(14)}  ${label}`,
      );
      return s;
    };
    console.log(
      `soak: ${SECONDS} s, sample every ${SAMPLE_SECONDS} s, warm-up ${WARMUP_SECONDS} s, server pid ${live.pid} (${process.env.DATABASE_URL ? 'PostgreSQL' : 'embedded database'}, NODE_ENV=production)`,
    );
    console.log(
      `${'t (s)'.padStart(6)} ${'RSS (kB)'.padStart(10)} ${'sockets'.padStart(8)} ${'heap (MiB)'.padStart(10)} ${'post-GC (MiB)'.padStart(13)} ${'requests'.padStart(9)} ${'upstream open'.padStart(14)}`,
    );
    await sample('start');
    let baseline: Sample | undefined;
    let nextSample = started + SAMPLE_SECONDS * 1000;
    while (Date.now() < endAt && !live.exitStatus()) {
      await new Promise((r) => setTimeout(r, Math.max(0, Math.min(nextSample, endAt) - Date.now())));
      if (live.exitStatus() || Date.now() >= endAt) break;
      nextSample += SAMPLE_SECONDS * 1000;
      if (!baseline && Date.now() - started >= WARMUP_SECONDS * 1000) {
        gate = new Promise<void>((resolve) => {
          openGate = resolve;
        });
        await drain();
        baseline = await sample('post-warm-up (drained)');
        gate = undefined;
        openGate();
      } else await sample('under load');
    }
    await Promise.all(running);
    const died = live.exitStatus();
    let last: Sample | undefined;
    if (!died) {
      await drain();
      last = await sample('end (drained)');
    }

    const afterWarmup = baseline ?? (samples[0] as Sample);
    const end = last ?? (samples.at(-1) as Sample);
    const stat = (pick: (s: Sample) => number) => ({
      first: pick(samples[0] as Sample),
      post_warmup: pick(afterWarmup),
      last: pick(end),
      max: Math.max(...samples.map(pick)),
    });
    const rss = stat((s) => s.rssKb);
    const sockets = stat((s) => s.sockets);
    const heap = stat((s) => s.heapMb);
    const postGc = stat((s) => s.postGcMb);
    const rssFlat = end.rssKb <= afterWarmup.rssKb * (1 + RSS_TOLERANCE);
    const socketsFlat = end.sockets - afterWarmup.sockets <= SOCKET_TOLERANCE;
    const verdict = died ? 'server died' : rssFlat && socketsFlat ? 'flat' : 'growing';
    for (const [kind, outcomes] of Object.entries(counts)) console.log(`${kind.padEnd(11)} ${JSON.stringify(outcomes)}`);
    console.log(
      JSON.stringify({
        seconds: SECONDS,
        lanes,
        warmup_seconds: WARMUP_SECONDS,
        database: process.env.DATABASE_URL ? 'postgres' : 'pglite',
        requests,
        outcomes: counts,
        upstream_connections: Object.fromEntries(
          upstreams.map((u, i) => [['http_hang', 'http_reset', 'mcp_hang', 'mcp_reset'][i], u.accepted()]),
        ),
        rss_kb: rss,
        sockets,
        heap_mb: heap,
        post_gc_heap_mb: postGc,
        full_gcs: [...live.output().matchAll(/Mark-Compact/g)].length,
        server_exited: died,
        rss_flat: rssFlat,
        sockets_flat: socketsFlat,
        verdict,
      }),
    );
    return verdict === 'flat' ? 0 : 1;
  } finally {
    await cleanup();
  }
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    console.error(error);
    process.exit(2);
  },
);
