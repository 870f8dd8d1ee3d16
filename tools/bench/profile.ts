/**
 * `npm run bench -- --profile`: one Warden under --cpu-prof, one evaluate load (closed loop, or
 * open at BENCH_PROFILE_RATE), SIGINT so that it writes its profile, and the functions and
 * packages with the most self time over the load window only (V8's profile clock and
 * process.hrtime are both CLOCK_MONOTONIC on Linux). The profile itself opens in Chrome
 * DevTools or speedscope for everything else. Standalone: `npx tsx tools/bench/profile.ts <file.cpuprofile> [top]`.
 */
import { copyFileSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { log, mcpUpstream, OUT_DIR, onCleanup, type Scenario, warden } from './lab.ts';
import { describeRun, evaluateLoad, runLoad } from './load.ts';
import { observabilitySetting } from './scenarios/compare.ts';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}

/** The package (node_modules/<pkg>), the source file, node core or V8 itself. */
const moduleOf = (url: string) => {
  if (!url) return '(native / VM)';
  if (url.startsWith('node:')) return 'node: (core)';
  const path = url.replace(/^file:\/\//, '').replace(process.cwd(), '');
  const nm = path.lastIndexOf('/node_modules/');
  if (nm < 0) return path.replace(/^\//, '');
  const [scope, name] = path.slice(nm + 14).split('/');
  return scope?.startsWith('@') ? `${scope}/${name}` : (scope as string);
};

/** Self time per function and per package, in ms and as a share of the busy (non-idle) time. */
export function summariseProfile(file: string, window?: { startUs: number; endUs: number }, top = 15): string[] {
  const profile = JSON.parse(readFileSync(file, 'utf8')) as {
    nodes: ProfileNode[];
    startTime: number;
    endTime: number;
    samples: number[];
    timeDeltas: number[];
  };
  const byId = new Map(profile.nodes.map((node) => [node.id, node]));
  const selfUs = new Map<number, number>();
  let t = profile.startTime;
  const stamps = profile.timeDeltas.map((delta) => (t += delta));
  // DevTools' attribution: sample i lasts until sample i + 1
  profile.samples.forEach((id, i) => {
    const start = stamps[i] as number;
    if (window && (start < window.startUs || start > window.endUs)) return;
    selfUs.set(id, (selfUs.get(id) ?? 0) + Math.max(0, (stamps[i + 1] ?? profile.endTime) - start));
  });
  const functions = new Map<string, number>();
  const modules = new Map<string, number>();
  let [busy, idle] = [0, 0];
  for (const [id, us] of selfUs) {
    const { functionName, url, lineNumber } = (byId.get(id) as ProfileNode).callFrame;
    if (functionName === '(idle)') {
      idle += us;
      continue;
    }
    busy += us;
    const name = `${functionName || '(anonymous)'}  ${url ? `${moduleOf(url)}:${lineNumber + 1}` : ''}`;
    functions.set(name, (functions.get(name) ?? 0) + us);
    modules.set(moduleOf(url), (modules.get(moduleOf(url)) ?? 0) + us);
  }
  const ranked = (map: Map<string, number>) =>
    [...map]
      .sort((a, b) => b[1] - a[1])
      .slice(0, top)
      .map(([name, us]) => `  ${((100 * us) / (busy || 1)).toFixed(1).padStart(5)} %  ${(us / 1000).toFixed(1).padStart(8)} ms  ${name}`);
  // what metrics and tracing cost, as their packages' own share (natives they call are not in it)
  const observed = [...modules].filter(([name]) => /^(@opentelemetry\/|prom-client)/.test(name)).reduce((sum, [, us]) => sum + us, 0);
  return [
    `CPU profile ${file}: ${(busy / 1000).toFixed(0)} ms busy, ${((100 * idle) / (busy + idle || 1)).toFixed(0)} % idle${window ? ' (load window only)' : ''}`,
    `Self time in OpenTelemetry and prom-client: ${((100 * observed) / (busy || 1)).toFixed(1)} % of the busy time`,
    'Self time by function:',
    ...ranked(functions),
    'Self time by package or file:',
    ...ranked(modules),
  ];
}

export const profileScenario: Scenario = {
  name: 'profile',
  about: 'one Warden under --cpu-prof and one evaluate load: where its CPU time goes',
  inFullRun: false,
  async run(config) {
    const profDir = mkdtempSync(join(tmpdir(), 'warden-cpu-prof-'));
    onCleanup(async () => rmSync(profDir, { recursive: true, force: true }));
    const mcp = await mcpUpstream();
    // BENCH_PROFILE_OBSERVABILITY=1: metrics scraped and traces exported as the observability scenario has them on
    const observed = process.env.BENCH_PROFILE_OBSERVABILITY === '1' ? await observabilitySetting.prepare() : undefined;
    const s = await warden(config, {
      label: 'profiled',
      env: observed?.env,
      workers: 1,
      nodeFlags: ['--cpu-prof', `--cpu-prof-dir=${profDir}`],
      seedWith: mcp.url,
    });
    const window = { startUs: 0, endUs: 0 };
    const load = evaluateLoad('S', s, `${s.baseUrl}/policy/evaluate`, s.key);
    const rate = config.profileRate;
    const measured = await runLoad(load, {
      mode: rate ? 'open' : 'closed',
      rate,
      connections: config.connections,
      warmupSeconds: config.warmupSeconds,
      seconds: config.profileSeconds,
      onMeasure: (phase, us) => {
        window[phase === 'start' ? 'startUs' : 'endUs'] = us;
      },
    });
    log(`under the profiler:${describeRun(measured)}`);
    await s.stop('SIGINT');
    // CPU.<date>.<time>.<pid>.<thread>.<seq>.cpuprofile: the server's main thread is thread 0
    const file = readdirSync(profDir).find((name) => name.split('.')[3] === String(s.pids[0]) && name.split('.')[4] === '0');
    if (!file) throw new Error(`no profile of pid ${s.pids[0]} in ${profDir}`);
    const kept = join(OUT_DIR, 'warden.cpuprofile');
    copyFileSync(join(profDir, file), kept);
    const report = summariseProfile(kept, window);
    return {
      report: [
        `${describeRun(measured)} (profiler overhead included)`,
        ...report,
        `(open ${kept} in Chrome DevTools → Performance, or speedscope)`,
      ],
      targets: {},
      figures: { load: measured, profile: kept, window },
    };
  },
};

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  if (!process.argv[2]) throw new Error('usage: tsx tools/bench/profile.ts <file.cpuprofile> [top]');
  process.stdout.write(`${summariseProfile(process.argv[2], undefined, Number(process.argv[3] ?? 15)).join('\n')}\n`);
}
