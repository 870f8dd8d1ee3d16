/**
 * Two Wardens that differ in one setting, each beside B1 in the same rounds (closed loop, POST
 * /policy/evaluate): what the setting costs, as S/B1 with it on over S/B1 with it off (medians
 * over the rounds) and as CPU per request. Used by the observability phase (metrics and tracing)
 * and the witness phase (a witness cosigning every checkpoint).
 *
 * Each Warden has a database of its own, seeded alike (50 policies × 10 rules, 100 agents); B1
 * writes into the first. Each target is primed once, unmeasured; then the order of the three
 * runs rotates from round to round, so neither Warden always follows the other.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { type CheckpointLag, measureCheckpointLag } from './checkpoint-lag.ts';
import type { BenchConfig } from './config.ts';
import { type BenchDatabase, createBenchDatabase } from './database.ts';
import { ROOT } from './procs.ts';
import { median } from './report.ts';
import { type Measured, runLoad, type Scenario } from './runner.ts';
import { B1_APP_NAME, startBaseline, startMcpUpstream, startWarden, WARDEN_APP_NAME, type WardenTarget } from './targets.ts';
import { EVALUATE_BODY, jsonHeaders, seedWarden } from './workload.ts';

const OUT_DIR = join(ROOT, 'test-output/bench');
const POLICIES = 50;

export interface AbFigures {
  /** Closed-loop requests per second of each target, per round. */
  rounds: Array<{ round: number; order: string[]; b1: number; off: number; on: number }>;
  /** Medians over the rounds of S/B1, with the setting off and on. */
  ratioOff: number;
  ratioOn: number;
  /** ratioOn / ratioOff. */
  relative: number;
  /** CPU ms per request of each Warden (medians). */
  cpuMsPerRequest: { off: number; on: number };
  /** How long each Warden's events waited for a signed checkpoint (its measured runs' events). */
  checkpointLag: { off: CheckpointLag | null; on: CheckpointLag | null };
  loadAvgAtStart: number[];
}

export interface AbSetup {
  /** Names the phase in logs, databases and directories, e.g. `obs`. */
  label: string;
  /** What the Warden with the setting on gets in its environment (the other gets nothing more). */
  onEnv: Record<string, string>;
  /** What each target is called in the log, e.g. `metrics and tracing`. */
  setting: string;
}

export async function compareWardens(
  config: BenchConfig,
  setup: AbSetup,
  register: (cleanup: () => Promise<void>) => void,
  log: (message: string) => void,
): Promise<AbFigures> {
  const loadAvgAtStart = loadavg().map((v) => Math.round(v * 100) / 100);
  const mcp = await startMcpUpstream();
  register(mcp.stop);

  const start = async (label: string, env: Record<string, string>): Promise<{ db: BenchDatabase; warden: WardenTarget }> => {
    const db = await createBenchDatabase(config.databaseUrl, `${label.replaceAll('-', '_')}_${process.pid}`);
    register(async () => {
      await db.drop();
      log(`dropped database ${db.name}`);
    });
    const dataDir = mkdtempSync(join(tmpdir(), `${label}-`));
    register(async () => rmSync(dataDir, { recursive: true, force: true }));
    const warden = await startWarden({
      databaseUrl: db.url,
      redisUrl: config.redisUrl,
      dataDir,
      logDir: OUT_DIR,
      nodeFlags: config.nodeFlags,
      label,
      workers: config.workers,
      env,
    });
    register(() => warden.stop());
    await seedWarden(warden.baseUrl, warden.key, mcp.url, POLICIES);
    log(`${label}: Warden at ${warden.baseUrl} (pids ${warden.pids.join(', ')}), database ${db.name}`);
    return { db, warden };
  };

  const off = await start(`warden-${setup.label}-off`, {});
  const on = await start(`warden-${setup.label}-on`, setup.onEnv);
  const b1 = await startBaseline('b1', off.db.url);
  register(b1.stop);

  const body = JSON.stringify(EVALUATE_BODY);
  const wardenScenario = (label: string, warden: WardenTarget): Scenario => ({
    target: label,
    scenario: 'evaluate',
    pids: warden.pids,
    dbApplication: WARDEN_APP_NAME,
    url: `${warden.baseUrl}/policy/evaluate`,
    method: 'POST',
    headers: jsonHeaders(warden.key),
    body,
    audit: { table: 'audit_events', perOk: 1 },
  });
  const targets = {
    b1: {
      scenario: {
        target: 'B1',
        scenario: 'evaluate',
        pids: [b1.pid],
        dbApplication: B1_APP_NAME,
        url: `${b1.origin}/api/v1/policy/evaluate`,
        method: 'POST',
        headers: jsonHeaders(off.warden.key),
        body,
        audit: { table: 'bench_audit_events', perOk: 1 },
      } satisfies Scenario,
      pool: off.db.pool,
    },
    off: { scenario: wardenScenario(`S (${setup.setting} off)`, off.warden), pool: off.db.pool },
    on: { scenario: wardenScenario(`S (${setup.setting} on)`, on.warden), pool: on.db.pool },
  };

  const order = ['b1', 'off', 'on'] as const;
  // Each target primed once, unmeasured (JIT, pools, caches), as the full run primes its S.
  for (const name of order) {
    const { scenario, pool } = targets[name];
    log(`${setup.label}: priming ${scenario.target} (5 s, not counted)…`);
    await runLoad(scenario, 'closed', {
      connections: config.connections,
      warmupSeconds: 1,
      seconds: Math.min(5, config.seconds),
      round: 0,
      pool,
    });
  }
  const rounds: AbFigures['rounds'] = [];
  const cpu: { off: number[]; on: number[] } = { off: [], on: [] };
  const windows: { off: Array<[Date, Date]>; on: Array<[Date, Date]> } = { off: [], on: [] };
  for (let round = 1; round <= config.rounds; round++) {
    const shift = (round - 1) % order.length;
    const turn = [...order.slice(shift), ...order.slice(0, shift)];
    const rps: Record<string, number> = {};
    for (const name of turn) {
      const { scenario, pool } = targets[name];
      log(`${setup.label}: ${scenario.target} closed loop (round ${round})…`);
      const from = new Date();
      const measured: Measured = await runLoad(scenario, 'closed', {
        connections: config.connections,
        warmupSeconds: config.warmupSeconds,
        seconds: config.seconds,
        round,
        pool,
      });
      const l = measured.load;
      if (l.errors + l.non2xx > 0) throw new Error(`${scenario.target}: ${l.errors + l.non2xx} errors in round ${round}`);
      if (measured.audit && !measured.audit.ok)
        throw new Error(`${scenario.target}: audit ${measured.audit.written}/${measured.audit.expected}`);
      rps[name] = l.rps;
      if (name !== 'b1') {
        cpu[name].push(measured.cpuMsPerRequest);
        windows[name].push([from, new Date()]);
      }
      log(`  ${l.rps.toFixed(0)} req/s, p50 ${l.latencyMs.p50.toFixed(2)} ms, ${measured.cpuMsPerRequest.toFixed(3)} CPU ms/req`);
    }
    rounds.push({ round, order: turn, b1: rps.b1 as number, off: rps.off as number, on: rps.on as number });
  }
  const lag = (pool: typeof off.db.pool, w: Array<[Date, Date]>) => measureCheckpointLag(pool, w).catch(() => null);
  const [lagOff, lagOn] = await Promise.all([lag(off.db.pool, windows.off), lag(on.db.pool, windows.on)]);

  const ratioOff = median(rounds.map((r) => r.off / r.b1));
  const ratioOn = median(rounds.map((r) => r.on / r.b1));
  const r3 = (v: number) => Math.round(v * 1000) / 1000;
  return {
    rounds: rounds.map((r) => ({ ...r, b1: Math.round(r.b1), off: Math.round(r.off), on: Math.round(r.on) })),
    ratioOff: r3(ratioOff),
    ratioOn: r3(ratioOn),
    relative: r3(ratioOn / ratioOff),
    cpuMsPerRequest: { off: r3(median(cpu.off)), on: r3(median(cpu.on)) },
    checkpointLag: { off: lagOff, on: lagOn },
    loadAvgAtStart,
  };
}

/** The rounds and ratios as the report prints them. */
export function formatAb(f: AbFigures, setting: string, target: string): string[] {
  const lag = (l: CheckpointLag | null) => (l ? `p50 ${l.p50Ms} ms, p99 ${l.p99Ms} ms over ${l.events} events` : 'not measured');
  return [
    ...f.rounds.map((r) => `  round ${r.round} (${r.order.join(', ')}): B1 ${r.b1}/s, S off ${r.off}/s, S on ${r.on}/s`),
    `  S/B1 with ${setting} off ${f.ratioOff}, on ${f.ratioOn}: ${f.relative} × (${target})`,
    `  CPU ms per request: off ${f.cpuMsPerRequest.off}, on ${f.cpuMsPerRequest.on}`,
    `  checkpoint lag: off ${lag(f.checkpointLag.off)}; on ${lag(f.checkpointLag.on)}`,
  ];
}
