/**
 * What one setting costs: two Wardens that differ only in it, on databases of their own seeded
 * alike, each beside B1 in the same rounds (closed loop, POST /policy/evaluate), the order
 * rotated from round to round. Reported as CPU per request off → on (the steady figure here) and
 * as the median S/B1 with it on over the same with it off (the target's terms). The settings
 * compared are data: metrics and tracing (issues 26 and 34), a witness cosigning every
 * checkpoint (issue 36).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { exportSigningKey, generateSigningKey } from '../../../apps/server/src/features/audit/checkpoint.ts';
import type { BenchConfig } from '../config.ts';
import { baseline, log, mcpUpstream, onCleanup, type Scenario, warden } from '../lab.ts';
import { describeRun, evaluateLoad, runLoad } from '../load.ts';
import { freePort, ROOT, spawnGroup } from '../procs.ts';
import { median, round } from '../report.ts';
import { type CheckpointLag, checkpointLag } from './decide.ts';

interface Setting {
  name: string;
  about: string;
  inFullRun: boolean;
  /** What the Warden with the setting on is given; `figures` reports what the setting did meanwhile. */
  prepare(): Promise<{ env: Record<string, string>; figures: () => Record<string, unknown> }>;
  /** Target: S/B1 with it on ≥ minimum × S/B1 with it off. */
  minimum: number;
  /** Targets of the Warden with it on, beyond the ratio. */
  more?: (lagOn: CheckpointLag) => Record<string, boolean>;
}

/** An OTLP/HTTP receiver that counts what it is sent and keeps nothing. */
async function otlpSink() {
  const counts = { requests: 0, bytes: 0 };
  const server = createServer((req, res) => {
    req.on('data', (chunk: Buffer) => {
      counts.bytes += chunk.length;
    });
    req.on('end', () => {
      counts.requests += 1;
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  onCleanup(async () => void server.close().closeAllConnections());
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, counts };
}

export const observabilitySetting: Setting = {
  name: 'observability',
  about: 'metrics scraped every second and tracing with the default sampler, on vs off',
  inFullRun: true,
  minimum: 0.9,
  async prepare() {
    const sink = await otlpSink();
    const metricsPort = await freePort();
    // BENCH_OBSERVABILITY=metrics|tracing turns on one of the two only, to tell their costs apart
    const which = process.env.BENCH_OBSERVABILITY || 'both';
    if (!['both', 'metrics', 'tracing'].includes(which))
      throw new Error(`BENCH_OBSERVABILITY must be both, metrics or tracing, got '${which}'`);
    // BENCH_OTEL_<NAME> reaches that Warden as OTEL_<NAME> (a sampler, the OTLP protocol…)
    const otel = Object.fromEntries(
      Object.entries(process.env).flatMap(([name, value]) => (name.startsWith('BENCH_OTEL_') && value ? [[name.slice(6), value]] : [])),
    );
    const scrapes = { count: 0, bytes: 0 };
    // a Prometheus that scrapes the on Warden every second
    const scraper = setInterval(() => {
      fetch(`http://127.0.0.1:${metricsPort}/metrics`)
        .then(async (res) => {
          const text = await res.text();
          if (res.ok) [scrapes.count, scrapes.bytes] = [scrapes.count + 1, scrapes.bytes + text.length];
        })
        .catch(() => undefined);
    }, 1000);
    onCleanup(async () => clearInterval(scraper));
    return {
      env: {
        ...(which !== 'tracing' && { WARDEN_METRICS_PORT: String(metricsPort) }),
        ...(which !== 'metrics' && { OTEL_EXPORTER_OTLP_ENDPOINT: sink.url, OTEL_SERVICE_NAME: 'warden-bench', ...otel }),
      },
      figures: () => ({
        which,
        otel,
        otlpRequests: sink.counts.requests,
        otlpBytes: sink.counts.bytes,
        scrapes: scrapes.count,
        scrapeBytes: scrapes.bytes,
      }),
    };
  },
};

const witness: Setting = {
  name: 'witness',
  about: 'one `warden witness` process cosigning every checkpoint, vs none',
  inFullRun: false,
  minimum: 0.95,
  more: (lag) => ({ 'checkpoint lag p99 <= 2 s with the cosignature': (lag.p99Ms ?? Number.POSITIVE_INFINITY) <= 2000 }),
  async prepare() {
    const key = generateSigningKey();
    const dataDir = mkdtempSync(join(tmpdir(), 'warden-bench-witness-'));
    onCleanup(async () => rmSync(dataDir, { recursive: true, force: true }));
    const args = [
      '--import',
      'tsx',
      join(ROOT, 'apps/server/src/cli/main.ts'),
      'witness',
      '--name',
      'bench.witness/w1',
      '--data-dir',
      dataDir,
    ];
    args.push('--listen', '127.0.0.1:0', '--log-key', key.publicKey.toString('base64'), '--json');
    const child = spawnGroup(process.execPath, args, 'witness', { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] });
    const started = await new Promise<{ url: string; vkey: string; name: string }>((resolve, reject) => {
      let out = '';
      child.stdout?.on('data', (chunk: Buffer) => {
        out += chunk;
        if (out.includes('\n')) resolve(JSON.parse(out.slice(0, out.indexOf('\n'))));
      });
      child.once('exit', (code) => reject(new Error(`the witness exited (${code}) before it listened`)));
    });
    log(`witness ${started.name} at ${started.url}`);
    return {
      env: { WARDEN_AUDIT_SIGNING_KEY: exportSigningKey(key), WARDEN_AUDIT_WITNESSES: `${started.url} ${started.vkey}` },
      figures: () => ({ name: started.name, vkey: started.vkey }),
    };
  },
};

async function compare(config: BenchConfig, setting: Setting) {
  const mcp = await mcpUpstream();
  const prepared = await setting.prepare();
  const off = await warden(config, { label: `${setting.name}-off`, seedWith: mcp.url });
  const on = await warden(config, { label: `${setting.name}-on`, seedWith: mcp.url, env: prepared.env });
  const b1 = await baseline('b1', off.db);
  const loads = {
    b1: evaluateLoad('B1', b1, `${b1.origin}/api/v1/policy/evaluate`, off.key, 'bench_audit_events'),
    off: evaluateLoad(`S (${setting.name} off)`, off, `${off.baseUrl}/policy/evaluate`, off.key, 'audit_events'),
    on: evaluateLoad(`S (${setting.name} on)`, on, `${on.baseUrl}/policy/evaluate`, on.key, 'audit_events'),
  };
  const order = ['b1', 'off', 'on'] as const;
  const { connections } = config;
  for (const name of order)
    await runLoad(loads[name], { mode: 'closed', connections, warmupSeconds: 1, seconds: Math.min(5, config.seconds) });
  const rounds: Array<{ round: number; order: string[]; b1: number; off: number; on: number }> = [];
  const cpu = { off: [] as number[], on: [] as number[], offDb: [] as number[], onDb: [] as number[] };
  const windows = { off: [] as Array<[Date, Date]>, on: [] as Array<[Date, Date]> };
  for (let round = 1; round <= config.rounds; round++) {
    const turn = order.map((_, i) => order[(round - 1 + i) % order.length] as (typeof order)[number]);
    const rps: Record<string, number> = {};
    for (const name of turn) {
      log(`${setting.name}: ${loads[name].target} closed loop (round ${round})…`);
      const from = new Date();
      const m = await runLoad(loads[name], {
        mode: 'closed',
        connections,
        warmupSeconds: config.warmupSeconds,
        seconds: config.seconds,
        round,
      });
      log(describeRun(m));
      if (m.load.errors + m.load.non2xx > 0 || m.audit?.ok === false)
        throw new Error(`${loads[name].target}: errors or lost audit rows in round ${round}`);
      rps[name] = m.load.rps;
      if (name !== 'b1') {
        cpu[name].push(m.cpuMsPerRequest);
        cpu[`${name}Db`].push(m.dbCpuMsPerRequest ?? Number.NaN);
        windows[name].push([from, new Date()]);
      }
    }
    rounds.push({ round, order: [...turn], b1: Math.round(rps.b1 ?? 0), off: Math.round(rps.off ?? 0), on: Math.round(rps.on ?? 0) });
  }
  const [lagOff, lagOn] = await Promise.all([checkpointLag(off.db.pool, windows.off), checkpointLag(on.db.pool, windows.on)]);
  const ratioOff = median(rounds.map((r) => r.off / r.b1));
  const ratioOn = median(rounds.map((r) => r.on / r.b1));
  const figures = {
    cpuMsPerRequest: {
      off: round(median(cpu.off)),
      on: round(median(cpu.on)),
      offPostgres: round(median(cpu.offDb)),
      onPostgres: round(median(cpu.onDb)),
    },
    relative: round(ratioOn / ratioOff) as number,
    ratioOff: round(ratioOff),
    ratioOn: round(ratioOn),
    rounds,
    checkpointLag: { off: lagOff, on: lagOn },
    [setting.name]: prepared.figures(),
  };
  const lag = (l: CheckpointLag) => `p50 ${l.p50Ms} ms, p99 ${l.p99Ms} ms over ${l.events} events`;
  return {
    report: [
      `${setting.about} (closed loop, POST /policy/evaluate, rounds of B1, S off, S on in rotating order):`,
      `  CPU ms per request: off ${figures.cpuMsPerRequest.off} + ${figures.cpuMsPerRequest.offPostgres} in PostgreSQL, on ${figures.cpuMsPerRequest.on} + ${figures.cpuMsPerRequest.onPostgres}`,
      `  S/B1 off ${figures.ratioOff}, on ${figures.ratioOn}: ${figures.relative} × (target ≥ ${setting.minimum})`,
      ...rounds.map((r) => `  round ${r.round} (${r.order.join(', ')}): B1 ${r.b1}/s, S off ${r.off}/s, S on ${r.on}/s`),
      `  checkpoint lag: off ${lag(lagOff)}; on ${lag(lagOn)}`,
      `  ${setting.name}: ${JSON.stringify(figures[setting.name])}`,
    ],
    targets: {
      [`S/B1 with ${setting.name} on >= ${setting.minimum} x off`]: figures.relative >= setting.minimum,
      ...setting.more?.(lagOn),
    },
    figures,
  };
}

export const comparisons: Scenario[] = [observabilitySetting, witness].map((setting) => ({
  name: setting.name,
  about: setting.about,
  inFullRun: setting.inFullRun,
  run: (config) => compare(config, setting),
}));
