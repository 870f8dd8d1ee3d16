/**
 * `warden policies test` (issue 53) over BENCH_POLICY_CASES (10,000) distinct cases against the
 * heavy bench set (50 policies × 10 rules, conditions included), as CI runs it: the built CLI
 * (tools/warden.mjs) from start to exit, BENCH_POLICY_TEST_RUNS (5) times; its wall time and
 * CPU time (user + system of the child, from bash's `times`), and the part spent deciding,
 * in this process.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { readPolicyBundle } from '../../../apps/server/src/features/policies/policy-bundle.ts';
import { policyCases, runPolicyCases } from '../../../apps/server/src/features/policies/policy-tests.ts';
import { positive } from '../config.ts';
import { log, type Scenario } from '../lab.ts';
import { ROOT } from '../procs.ts';
import { median } from '../report.ts';
import { benchPolicies } from '../workload.ts';

const ACTIONS = ['files.read', 'files.write', 'payments.charge', 'svc7.delete', 'db.truncate', 'deploy.api', 'report.3.read', 'email.send'];
const ENVIRONMENTS = ['production', 'staging', 'development'] as const;

/** `count` distinct cases; each expects what the evaluator decides, so that a run passes (exit 0). */
function writeCases(dir: string, count: number): void {
  const cases = Array.from({ length: count }, (_, i) => ({
    name: `case ${i}`,
    agent: { slug: i % 5 === 0 ? `ops-${i % 7}` : `agent-${i % 11}`, environment: ENVIRONMENTS[i % 3], risk_level: 'low' },
    input: {
      action: ACTIONS[i % ACTIONS.length],
      resource: [`accounts/${i % 50}/orders/${i}`, `docs/${i}`, `secrets/${i % 50}/key`, `shared/private/${i}`][i % 4],
      environment: ENVIRONMENTS[i % 3],
      tool: i % 9 === 0 ? 'shell' : undefined,
      context: { amount: (i * 37) % 2000, user: i % 2 ? 'alice' : 'bob', roles: i % 3 ? ['dev'] : ['admin'] },
    },
    expect: { effect: 'allow' },
  }));
  const bundle = readPolicyBundle(dir);
  const decided = runPolicyCases(bundle, policyCases({ ...bundle, tests: [{ file: 'bench.test.yaml', content: { cases } }] }));
  cases.forEach((c, i) => {
    const got = decided[i]?.got;
    Object.assign(c.expect, { effect: got?.effect, rule: got?.rule, policy: got?.policy });
  });
  writeFileSync(join(dir, 'bench.test.yaml'), stringify({ cases }));
}

export const policiesTestScenario: Scenario = {
  name: 'policies-test',
  about: '`warden policies test` over 10,000 cases and 50 × 10 rules, the built CLI from start to exit',
  inFullRun: true,
  async run() {
    const count = positive('BENCH_POLICY_CASES', 10_000);
    const runs = positive('BENCH_POLICY_TEST_RUNS', 5);
    const dir = mkdtempSync(join(tmpdir(), 'warden-bench-policies-'));
    try {
      for (const policy of benchPolicies(50)) writeFileSync(join(dir, `${policy.name}.yaml`), stringify(policy));
      writeCases(dir, count);
      const inProcess: number[] = [];
      for (let i = 0; i < runs; i++) {
        const started = performance.now();
        const bundle = readPolicyBundle(dir);
        runPolicyCases(bundle, policyCases(bundle));
        inProcess.push(performance.now() - started);
      }
      const cli: { ms: number; cpuMs: number }[] = [];
      for (let i = 0; i < runs; i++) {
        const started = performance.now();
        // bash's `times`: the second line is the children's user and system time, as 0m1.234s 0m0.056s
        const out = execFileSync('bash', ['-c', 'node tools/warden.mjs policies test "$0" --json > /dev/null && times', dir], {
          cwd: ROOT,
          encoding: 'utf8',
        });
        const ms = performance.now() - started;
        const [user, system] = (out.trim().split('\n')[1] ?? '').split(' ').map((t) => {
          const [, m, s] = /(\d+)m([\d.]+)s/.exec(t) ?? [];
          return (Number(m) * 60 + Number(s)) * 1000;
        });
        cli.push({ ms, cpuMs: (user ?? 0) + (system ?? 0) });
        log(`policies-test: run ${i + 1}/${runs}: ${Math.round(ms)} ms, CPU ${Math.round(cli.at(-1)?.cpuMs ?? 0)} ms`);
      }
      const medianMs = Math.round(median(cli.map((r) => r.ms)));
      const cpuMedianMs = Math.round(median(cli.map((r) => r.cpuMs)));
      const decideMs = Math.round(median(inProcess));
      return {
        report: [
          `warden policies test, ${count.toLocaleString('en')} cases, 50 policies × 10 rules (built CLI, ${runs} runs):`,
          `  wall median ${medianMs} ms (runs ${cli.map((r) => Math.round(r.ms)).join(', ')}), CPU median ${cpuMedianMs} ms; read and decided in-process ${decideMs} ms`,
        ],
        targets: { 'warden policies test over 10,000 cases <= 2 s (median, wall)': medianMs <= 2_000 },
        figures: { count, runs, cli, medianMs, cpuMedianMs, inProcessMs: inProcess },
      };
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  },
};
