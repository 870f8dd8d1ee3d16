/**
 * The what-if replay (issue 25): POST /policies/simulate over BENCH_SIMULATE_DECISIONS (100,000)
 * recorded decisions, a realistic draft and a heavy one, BENCH_SIMULATE_RUNS (5) times each,
 * with GET /health probed beside them (a replay must not hold other requests up); then four
 * full audit verifications of those events (issue 36), /health beside them. One server process,
 * so that the probe reaches the process that replays.
 */
import { positive } from '../config.ts';
import { LIVE_POLICIES, seedHistory, seedWorkspace, waitSealed } from '../history.ts';
import { log, type Scenario, warden } from '../lab.ts';
import { probe } from '../load.ts';
import { cpuMs, sleep } from '../procs.ts';
import { median } from '../report.ts';
import { benchPolicies } from '../workload.ts';

/** The live set changed as an admin would try it: a lower threshold, production deploys approved, secrets blocked, a monitor-only rule, MCP merges approved. */
const REALISTIC_DRAFT = [
  LIVE_POLICIES[0],
  {
    name: 'payments-guard',
    priority: 99,
    rules: [{ id: 'r0', match: { action: ['payments.*'] }, condition: 'context.amount > 500', effect: 'require_approval' }],
  },
  {
    name: 'deploy-approvals',
    priority: 98,
    rules: [{ id: 'prod', match: { action: ['deploy.*'], environment: ['production'] }, effect: 'require_approval' }],
  },
  {
    name: 'secrets',
    priority: 97,
    rules: [{ id: 'no-secrets', match: { action: ['secrets.*'], resource: ['secrets/*'] }, effect: 'block' }],
  },
  {
    name: 'mail-watch',
    mode: 'monitor',
    priority: 96,
    rules: [{ id: 'big-mail', match: { action: ['email.send'] }, condition: 'context.amount > 4000', effect: 'block' }],
  },
  { name: 'merges', priority: 95, rules: [{ id: 'merge', match: { action: ['mcp.*.merge_*'] }, effect: 'require_approval' }] },
  LIVE_POLICIES[2],
];
const VERIFICATIONS = 4;

export const simulateScenario: Scenario = {
  name: 'simulate',
  about: 'the what-if replay over 100,000 decisions and four full audit verifications, /health beside them',
  inFullRun: true,
  async run(config) {
    const decisions = positive('BENCH_SIMULATE_DECISIONS', 100_000);
    const runs = positive('BENCH_SIMULATE_RUNS', 5);
    const s = await warden(config, { label: 'simulate', workers: 1 });
    const workspace = await seedWorkspace(s);
    await seedHistory(s, workspace, decisions, decisions);
    const sealed = await waitSealed(s.db.pool, workspace.workspaceId);
    await s.db.pool.query('VACUUM (ANALYZE) audit_events');
    log(`simulate: ${decisions.toLocaleString('en')} decisions sealed in ${sealed.seconds.toFixed(1)} s`);
    const health = `${s.baseUrl}/health`;
    const stopAlone = probe(health);
    await sleep(3_000);
    const healthAlone = await stopAlone();

    /** `times` calls of `work` with /health beside them: each call's round trip and the server's CPU time for it. */
    const timed = async (name: string, times: number, work: () => Promise<Record<string, number>>) => {
      const stopProbe = probe(health);
      const done: Array<Record<string, number>> = [];
      for (let i = 0; i < times; i++) {
        const [cpu, started] = [cpuMs(s.pids[0] as number), performance.now()];
        const figures = await work();
        done.push({ ms: performance.now() - started, cpuMs: cpuMs(s.pids[0] as number) - cpu, ...figures });
        log(`simulate: ${name} ${i + 1}/${times}: ${JSON.stringify(done.at(-1), (_, v) => (typeof v === 'number' ? Math.round(v) : v))}`);
      }
      const med = (key: string) => Math.round(median(done.map((d) => d[key] as number)));
      return {
        name,
        ms: done.map((d) => Math.round(d.ms as number)),
        medianMs: med('ms'),
        cpuMedianMs: med('cpuMs'),
        first: done[0],
        health: await stopProbe(),
      };
    };
    const replay = (policies: unknown) => async () => {
      const { data } = await s.call('POST', '/policies/simulate', { policies, limit: decisions });
      if (data.replayed !== decisions) throw new Error(`the replay replayed ${data.replayed} decisions, not ${decisions}`);
      return { serverMs: data.duration_ms, changed: data.changed, drifted: data.drift.changed };
    };
    await replay(REALISTIC_DRAFT)(); // starts the replay thread
    const realistic = await timed('realistic draft', runs, replay(REALISTIC_DRAFT));
    const heavy = await timed('heavy draft (50 × 10 rules)', runs, replay(benchPolicies(50)));
    const verify = await timed('full verification', VERIFICATIONS, async () => {
      const { data } = await s.call('GET', '/audit/verify?full=true');
      if (!data.valid || data.checked < decisions) throw new Error(`a full verification answered ${JSON.stringify(data)}`);
      return { checked: data.checked };
    });
    const extras = (r: typeof realistic) =>
      Object.entries(r.first ?? {})
        .flatMap(([key, value]) => (key === 'ms' || key === 'cpuMs' ? [] : [`${key} ${Math.round(value)}`]))
        .join(', ');
    const line = (r: typeof realistic) =>
      `  ${r.name}: median ${r.medianMs} ms (runs ${r.ms.join(', ')}), server CPU ${r.cpuMedianMs} ms; ${extras(r)}; ` +
      `GET /health beside it p50 ${r.health.p50} ms, p99 ${r.health.p99} ms, max ${r.health.max} ms (sender late by ${r.health.sendLagP99} ms at p99)`;
    return {
      report: [
        `What-if replay (POST /policies/simulate, limit ${decisions.toLocaleString('en')}; one server process); sealed in ${sealed.seconds.toFixed(1)} s`,
        `  GET /health at 100/s alone: p50 ${healthAlone.p50} ms, p99 ${healthAlone.p99} ms`,
        line(realistic),
        line(heavy),
        line(verify),
      ],
      targets: {
        'POST /policies/simulate, 100,000 decisions, median <= 2 s (realistic draft)': realistic.medianMs <= 2_000,
        'GET /health p99 <= 20 ms while replays run': Math.max(realistic.health.p99, heavy.health.p99) <= 20,
        'GET /health p99 <= 50 ms while 4 full audit verifications run': verify.health.p99 <= 50,
      },
      figures: { decisions, sealed, healthAlone, realistic, heavy, verify },
    };
  },
};
