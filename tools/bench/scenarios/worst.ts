/**
 * The worst decisions the policy limits admit (issue 21): in-process (micro.ts; target p99 ≤
 * 5 ms for every shape), then through the API, each shape in a workspace of its own with one
 * client looping its decisions; then GET /health at 100/s alone and while one client loops the
 * shape slowest through the API (target p99 ≤ 20 ms).
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { log, type Scenario, warden } from '../lab.ts';
import { describeRun, probe, runLoad } from '../load.ts';
import { shapePolicies, WORST_SHAPES, type WorstFigures } from '../micro.ts';
import { ROOT, sleep } from '../procs.ts';
import { inProcess } from './decide.ts';

const run = promisify(execFile);

export const worstScenario: Scenario = {
  name: 'worst',
  about: 'the worst decisions the limits admit, in-process and through the API, /health beside them',
  inFullRun: true,
  async run(config) {
    const inProc = await inProcess<WorstFigures[]>('worst', config);
    for (const f of inProc) log(`  ${f.shape}: p50 ${f.ms.p50} ms, p99 ${f.ms.p99} ms (${f.outcome})`);
    const s = await warden(config, { label: 'worst' });
    const cli = (...args: string[]) =>
      run('npx', ['tsx', 'apps/server/src/cli/main.ts', ...args, '--json'], { cwd: ROOT, env: { ...process.env, DATABASE_URL: s.db.url } });
    const loops = [];
    for (const shape of WORST_SHAPES) {
      // a workspace of its own, with a key holding every permission
      const slug = `worst-${shape.name.replace(/_/g, '-')}`;
      await cli('workspaces', 'create', '--slug', slug);
      const key = (JSON.parse((await cli('keys', 'create', '--workspace', slug, '--permissions', '*')).stdout) as { key: string }).key;
      const post = async (path: string, body: unknown) => {
        const res = await fetch(`${s.baseUrl}${path}`, {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
          body: JSON.stringify(body),
        });
        if (res.status !== 201) throw new Error(`POST ${path} for shape ${shape.name}: ${res.status} ${await res.text()}`);
      };
      await post('/agents', { name: 'worst-agent', slug: 'worst-agent', provider: 'local', environment: 'production' });
      for (const policy of shapePolicies(shape)) await post('/policies', { ...policy, enabled: true });
      const body = JSON.stringify({ input: { ...shape.input, agent: 'worst-agent' } });
      const load = {
        target: 'S',
        scenario: `worst_${shape.name}`,
        server: s,
        url: `${s.baseUrl}/policy/evaluate`,
        method: 'POST' as const,
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body,
      };
      const measured = await runLoad(load, { mode: 'closed', connections: 1, warmupSeconds: 1, seconds: 3 });
      log(`${shape.name}:${describeRun(measured)}`);
      loops.push({
        shape: shape.name,
        load,
        bodyBytes: body.length,
        p50: measured.load.latencyMs.p50,
        p99: measured.load.latencyMs.p99,
        cpuMsPerRequest: measured.cpuMsPerRequest,
      });
    }
    const health = `${s.baseUrl}/health`;
    const alone = probe(health);
    await sleep(config.seconds * 1000);
    const healthAlone = await alone();
    const slowest = [...loops].sort((a, b) => b.p50 - a.p50)[0];
    const beside = probe(health);
    if (slowest) await runLoad(slowest.load, { mode: 'closed', connections: 1, warmupSeconds: 1, seconds: config.seconds });
    const healthBeside = await beside();
    const report = ['Worst decisions the limits admit (1,000 rules each; in-process decide(), then through the API with one client):'];
    for (const f of inProc) {
      const api = loops.find((l) => l.shape === f.shape);
      report.push(
        `  ${f.shape.padEnd(14)} in-process p50 ${f.ms.p50} ms, p99 ${f.ms.p99} ms (${f.outcome}); API p50 ${api?.p50} ms, p99 ${api?.p99} ms, CPU ${api?.cpuMsPerRequest.toFixed(2)} ms/req (body ${api?.bodyBytes} B) — ${f.what}`,
      );
    }
    report.push(
      `  GET /health at 100/s: p99 ${healthAlone.p99} ms alone, ${healthBeside.p99} ms while one client loops '${slowest?.shape}'`,
    );
    return {
      report,
      targets: {
        'worst admitted decision <= 5 ms (in-process p99, every shape)': inProc.every((f) => f.ms.p99 <= 5),
        'GET /health p99 <= 20 ms while one client loops the worst decision': healthBeside.p99 <= 20,
      },
      figures: { inProcess: inProc, api: loops.map(({ load, ...rest }) => rest), healthAlone, healthBeside, attack: slowest?.shape },
    };
  },
};
