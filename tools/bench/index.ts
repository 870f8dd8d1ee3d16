/**
 * `npm run bench`: Warden against its own baselines, in one run, on one machine and database.
 * The scenarios are data (each names what it starts, what it measures and its targets); this
 * runner runs the full set or `--only=<name>`, prints each one's report and targets, and writes
 * one JSON object as the last line of stdout (also test-output/bench/<name>-latest.json, or
 * latest.json for the full run). Progress goes to stderr. tools/bench/README.md has the rest.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { cpus, freemem, loadavg, totalmem } from 'node:os';
import { join } from 'node:path';
import { type BenchConfig, loadBenchConfig, UsageError } from './config.ts';
import { aborted, cleanup, log, OUT_DIR, type Outcome, type Scenario } from './lab.ts';
import { ROOT } from './procs.ts';
import { profileScenario } from './profile.ts';
import { comparisons } from './scenarios/compare.ts';
import { decideScenario, evaluatorScenario } from './scenarios/decide.ts';
import { mcpMemoryScenario, mcpScenario } from './scenarios/mcp.ts';
import { policiesTestScenario } from './scenarios/policies-test.ts';
import { scaleScenario } from './scenarios/scale.ts';
import { simulateScenario } from './scenarios/simulate.ts';
import { worstScenario } from './scenarios/worst.ts';

/** In the order of the full run: the in-process and replay figures first, on a machine not yet warmed by load. */
const SCENARIOS: Scenario[] = [
  evaluatorScenario,
  simulateScenario,
  policiesTestScenario,
  ...comparisons,
  decideScenario,
  mcpScenario,
  worstScenario,
  scaleScenario,
  mcpMemoryScenario,
  profileScenario,
];

const git = (...args: string[]) => {
  try {
    return execFileSync('git', args, { cwd: ROOT, stdio: ['ignore', 'pipe', 'ignore'] })
      .toString()
      .trim();
  } catch {
    return '';
  }
};

async function main(): Promise<void> {
  let config: BenchConfig;
  try {
    config = loadBenchConfig();
    if (config.profile) config.only = 'profile';
    if (config.only && !SCENARIOS.some((s) => s.name === config.only))
      throw new UsageError(`--only: unknown scenario '${config.only}' (known: ${SCENARIOS.map((s) => s.name).join(', ')})`);
    if (!existsSync('/proc/self/stat')) throw new UsageError('npm run bench reads /proc for CPU time and memory: it runs on Linux only');
  } catch (error) {
    process.stderr.write(`${(error as Error).message}\n`);
    process.exit(error instanceof UsageError ? 2 : 1);
  }
  mkdirSync(OUT_DIR, { recursive: true });
  const machine = {
    cores: cpus().length,
    cpuModel: cpus()[0]?.model ?? 'unknown',
    node: process.version,
    totalMemMb: Math.round(totalmem() / 2 ** 20),
    freeMemMbAtStart: Math.round(freemem() / 2 ** 20),
    loadAvgAtStart: loadavg().map((v) => Number(v.toFixed(2))),
  };
  if ((machine.loadAvgAtStart[0] ?? 0) > machine.cores / 2)
    log(`warning: load average ${machine.loadAvgAtStart.join(' ')} on ${machine.cores} cores: other work will disturb the figures`);
  // which code was measured: the commit and what is modified on top of it
  const code = {
    commit: git('rev-parse', '--short', 'HEAD') || 'unknown',
    modified: git('status', '--porcelain', '--', 'apps', 'packages').split('\n').filter(Boolean),
  };
  const chosen = SCENARIOS.filter((s) => (config.only ? s.name === config.only : s.inFullRun));
  const outcomes: Record<string, Outcome> = {};
  const failures: string[] = [];
  for (const scenario of chosen) {
    if (aborted) break;
    log(`── ${scenario.name}: ${scenario.about}`);
    try {
      outcomes[scenario.name] = await scenario.run(config);
      failures.push(...(outcomes[scenario.name]?.failures ?? []).map((f) => `${scenario.name}: ${f}`));
    } catch (error) {
      log(`${scenario.name} FAILED: ${(error as Error).stack}`);
      failures.push(`${scenario.name}: ${(error as Error).message}`);
    }
    // each scenario on servers of its own: stopped before the next one starts
    await cleanup();
  }
  const targets = Object.assign({}, ...Object.values(outcomes).map((o) => o.targets)) as Record<string, boolean>;
  const lines = [
    `Warden benchmark — ${new Date().toISOString()}, commit ${code.commit}${code.modified.length ? ` + ${code.modified.length} modified paths` : ''}`,
  ];
  lines.push(
    `machine: ${machine.cores} cores (${machine.cpuModel}), node ${machine.node}, load average ${machine.loadAvgAtStart.join(' ')} at start, ${loadavg()
      .map((v) => v.toFixed(2))
      .join(' ')} at end`,
  );
  for (const [name, outcome] of Object.entries(outcomes)) lines.push('', `## ${name}`, ...outcome.report);
  lines.push('', 'Targets:', ...Object.entries(targets).map(([name, ok]) => `  ${ok ? 'PASS' : 'FAIL'}  ${name}`));
  if (failures.length) lines.push('Failed:', ...failures.map((f) => `  ${f}`));
  const result = {
    benchmark: config.only ? `warden-${config.only}` : 'warden',
    machine,
    code,
    settings: {
      seconds: config.seconds,
      warmupSeconds: config.warmupSeconds,
      rounds: config.rounds,
      openRounds: config.openRounds,
      connections: config.connections,
      workers: config.workers,
    },
    targets,
    failures,
    ...Object.fromEntries(Object.entries(outcomes).map(([name, o]) => [name, o.figures])),
  };
  const file = join(OUT_DIR, config.only ? `${config.only}-latest.json` : 'latest.json');
  writeFileSync(file, `${JSON.stringify(result, null, 2)}\n`);
  process.stdout.write(`${lines.join('\n')}\n(JSON also in ${file})\n${JSON.stringify(result)}\n`);
  if (failures.length) process.exitCode = 1;
}

await main().finally(cleanup);
