/**
 * Policies as code against running workspaces (issue 53): `warden policies export` writes a
 * workspace's policies and default decisions as a directory that `apply` takes; applied to a
 * fresh workspace it decides 10,000 acts as the first one does, and applying it twice changes
 * nothing; `policies fixtures --from-audit` cuts cases from decisions the server recorded, and
 * they pass against the policies that made them; `apply --what-if` refuses a bundle that changes
 * too many recent decisions.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse, stringify } from 'yaml';
import { readPolicyBundle } from '../../apps/server/src/features/policies/policy-bundle.ts';
import { policyCases, runPolicyCases } from '../../apps/server/src/features/policies/policy-tests.ts';
import { useTestServer } from '../support/server.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const CLI = join(ROOT, 'tools/warden.mjs');

const POLICIES = [
  {
    name: 'Refund limits',
    description: 'Refunds: big ones need a human',
    priority: 50,
    rules: [
      { id: 'no-deletes', match: { action: ['db.delete*'] }, effect: 'block', severity: 'high', message: 'No deletes' },
      { id: 'big-refunds', match: { action: ['refund.create'] }, condition: 'context.amount_eur > 100', effect: 'require_approval' },
    ],
  },
  {
    name: 'Production care: writes & payments',
    rules: [
      { id: 'prod-writes', match: { action: ['*.write'], environment: ['production'] }, effect: 'require_approval' },
      { id: 'risky-agents', match: { action: ['payments.*'] }, condition: "agent.risk_level == 'high'", effect: 'block' },
      { id: 'reads-via-proxy', match: { action: ['files.read'] }, effect: 'allow', require_execution_proxy: true },
      { id: 'staging-ok', match: { action: ['*'], environment: ['staging'] }, effect: 'allow' },
    ],
  },
  { name: 'Watching only', mode: 'monitor', rules: [{ id: 'watch-all', match: { action: ['*'] }, effect: 'block' }] },
  { name: 'Switched off', enabled: false, rules: [{ id: 'off', match: { action: ['refund.create'] }, effect: 'block' }] },
];
const AGENTS = [
  { slug: 'steady', environment: 'production', risk_level: 'low', tags: ['billing'] },
  { slug: 'risky', environment: 'production', risk_level: 'high' },
  { slug: 'tester', environment: 'staging', risk_level: 'medium', allowed_resources: ['orders/*'] },
  { slug: 'dev', environment: 'development', risk_level: 'low' },
];
const ACTIONS = ['db.delete', 'refund.create', 'orders.write', 'payments.send', 'files.read', 'files.write', 'email.send', 'reports.read'];

/** `n` acts spread over agents, actions, resources and contexts (a fixed sequence, not random). */
function acts(n: number) {
  return Array.from({ length: n }, (_, i) => {
    const agent = AGENTS[i % AGENTS.length] as (typeof AGENTS)[number];
    return {
      agent,
      input: {
        action: ACTIONS[(i * 7) % ACTIONS.length] as string,
        resource: i % 3 === 0 ? `orders/${i % 50}` : `customers/${i % 40}`,
        environment: agent.environment,
        context: { amount_eur: (i * 37) % 400 },
      },
    };
  });
}

function run(args: string[], key?: string): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [CLI, ...args],
      { cwd: ROOT, timeout: 120_000, env: { ...process.env, ...(key ? { WARDEN_API_KEY: key } : {}) } },
      (error, stdout, stderr) => resolve({ code: error ? Number(error.code ?? 1) : 0, stdout, stderr }),
    );
  });
}

describe('warden policies export, fixtures and apply --what-if', () => {
  const source = useTestServer();
  const fresh = useTestServer();
  const dirs: string[] = [];
  const tempDir = () => {
    const dir = mkdtempSync(join(tmpdir(), 'warden-ws-'));
    dirs.push(dir);
    return dir;
  };
  afterAll(() => {
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  });

  beforeAll(async () => {
    for (const policy of POLICIES)
      expect((await source.api('POST', '/policies', { body: policy as never, unchecked: true })).status).toBe(201);
    for (const server of [source, fresh])
      for (const agent of AGENTS)
        expect(
          (await server.api('POST', '/agents', { body: { name: agent.slug, provider: 'local', ...agent } as never, unchecked: true }))
            .status,
        ).toBe(201);
    expect(
      (await source.api('PATCH', '/settings', { body: { default_decision: { production: 'block', development: 'block' } } })).status,
    ).toBe(200);
  });

  /** What a server decides: its answer, or the refusal of an act allowed only through the proxy (recorded as blocked). */
  const evaluate = async (server: typeof source, body: never) => {
    const res = await server.api('POST', '/policy/evaluate', { body, unchecked: true });
    if (res.status === 403 && res.body.error?.code === 'execution_proxy_required') return { effect: 'block', policy: null };
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    return { effect: res.body.data.action, policy: res.body.data.policy };
  };

  /** The cases of `list` decided offline on the bundle in `dir`. */
  const decideOffline = (dir: string, list: ReturnType<typeof acts>) => {
    const bundle = readPolicyBundle(dir);
    const cases = list.map((act, i) => ({ name: `act ${i}`, agent: act.agent, input: act.input, expect: { effect: 'allow' } }));
    return runPolicyCases(bundle, policyCases({ ...bundle, tests: [{ file: 'acts.test.yaml', content: { cases } }] })).map((r) => r.got);
  };

  it('exports a workspace that, applied to a fresh one, decides 10,000 acts as the first does; apply twice changes nothing', async () => {
    const exported = tempDir();
    const out = await run(['policies', 'export', exported, '--url', source.url, '--json'], source.key);
    expect(out.code, out.stderr).toBe(0);
    const summary = JSON.parse(out.stdout);
    expect(summary.policies).toBe(4);
    expect(readdirSync(exported).sort()).toEqual([
      'defaults.yaml',
      'production-care-writes-payments.yaml',
      'refund-limits.yaml',
      'switched-off.yaml',
      'watching-only.yaml',
    ]);
    expect(parse(readFileSync(join(exported, 'defaults.yaml'), 'utf8'))).toEqual({
      default_decision: { development: 'block', staging: 'allow', production: 'block' },
    });
    expect(parse(readFileSync(join(exported, 'refund-limits.yaml'), 'utf8'))).toEqual({ ...POLICIES[0], enabled: true, mode: 'enforce' });

    // into a fresh workspace, twice: the second time nothing changes and nothing is recorded
    const first = await run(['policies', 'apply', exported, '--url', fresh.url, '--json'], fresh.key);
    expect(first.code, first.stderr).toBe(0);
    expect(JSON.parse(first.stdout)).toMatchObject({
      digest: summary.digest,
      created: expect.arrayContaining(POLICIES.map((p) => p.name)),
      default_decision_changed: ['development', 'production'],
    });
    const second = await run(['policies', 'apply', exported, '--url', fresh.url, '--json'], fresh.key);
    expect(JSON.parse(second.stdout)).toMatchObject({
      created: [],
      updated: [],
      deleted: [],
      default_decision_changed: [],
      audit_event_id: null,
    });
    const events = (await fresh.api('GET', '/audit-logs', { query: { action: 'policies.bundle_applied' } })).body.data;
    expect(events).toHaveLength(1);
    expect(events[0]?.context).toMatchObject({ default_decision: { development: 'block', production: 'block' } });

    // the fresh workspace exported again is the same bundle, file for file
    const again = tempDir();
    expect((await run(['policies', 'export', again, '--url', fresh.url], fresh.key)).code).toBe(0);
    for (const file of readdirSync(exported))
      expect(readFileSync(join(again, file), 'utf8'), file).toBe(readFileSync(join(exported, file), 'utf8'));

    // 10,000 acts decided on each export: identical, and not all alike
    const many = acts(10_000);
    const mine = decideOffline(exported, many);
    expect(decideOffline(again, many)).toEqual(mine);
    expect(new Set(mine.map((d) => `${d.effect}/${d.rule}`)).size).toBeGreaterThanOrEqual(6);

    // and the two servers decide a sample of them as the offline evaluator does
    for (let i = 0; i < many.length; i += 97) {
      const act = many[i] as (typeof many)[number];
      const body = { input: { ...act.input, agent: act.agent.slug } } as never;
      const [a, b] = [await evaluate(source, body), await evaluate(fresh, body)];
      expect(b).toEqual(a);
      expect(a.effect, JSON.stringify(act)).toBe(mine[i]?.effect);
    }
  });

  it('refuses to export over policy files unless --force, which keeps the test files', async () => {
    const dir = tempDir();
    writeFileSync(join(dir, 'old.yaml'), stringify({ name: 'Old' }));
    writeFileSync(join(dir, 'mine.test.yaml'), stringify({ cases: [] }));
    const refused = await run(['policies', 'export', dir, '--url', source.url], source.key);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toContain('has policy files already (old.yaml…); --force replaces them');
    const forced = await run(['policies', 'export', dir, '--url', source.url, '--force'], source.key);
    expect(forced.code, forced.stderr).toBe(0);
    expect(readdirSync(dir)).toContain('mine.test.yaml');
    expect(readdirSync(dir)).not.toContain('old.yaml');
  });

  it('cuts fixtures from recorded decisions that pass against the policies that made them', async () => {
    const sample = acts(240);
    for (const act of sample) await evaluate(source, { input: { ...act.input, agent: act.agent.slug } } as never);
    const dir = tempDir();
    expect((await run(['policies', 'export', dir, '--url', source.url], source.key)).code).toBe(0);
    const fixtures = join(dir, 'recorded.test.yaml');
    const cut = await run(
      ['policies', 'fixtures', '--from-audit', '--since', '1h', '--url', source.url, '--out', fixtures, '--json'],
      source.key,
    );
    expect(cut.code, cut.stderr).toBe(0);
    const summary = JSON.parse(cut.stdout);
    // every decision reproduces: none left out; distinct acts only (the sample repeats none, the first test's sample is 104 more)
    expect(summary.left_out).toEqual({ decided_otherwise: 0, digest_only: 0 });
    expect(summary.cases).toBeGreaterThanOrEqual(240);
    const file = parse(readFileSync(fixtures, 'utf8'));
    expect(Object.keys(file.agents).sort()).toEqual(['dev', 'risky', 'steady', 'tester']);
    expect(file.agents.tester).toMatchObject({ environment: 'staging', allowed_resources: ['orders/*'] });
    expect(new Set(file.cases.map((c: { expect: { effect: string } }) => c.expect.effect))).toEqual(
      new Set(['allow', 'block', 'require_approval']),
    );

    // the server's own replay of those decisions with the export as the draft: nothing changes
    const exported = readPolicyBundle(dir);
    const replay = await source.api('POST', '/policies/simulate', {
      body: { policies: exported.policies.map((p) => p.policy), default_decision: exported.defaults, limit: 10_000 },
    });
    expect(replay.status).toBe(200);
    // every decision recorded: this test's 240 and the first test's 104
    expect(replay.body.data).toMatchObject({ replayed: 240 + 104, changed: 0, drift: { changed: 0 } });

    const tested = await run(['policies', 'test', dir]);
    expect(tested.code, tested.stdout).toBe(0);
    expect(tested.stdout).toMatch(new RegExp(`^policies test: ${summary.cases} cases, ${summary.cases} passed, 0 failed`));

    // a policy changed since: the cases it now decides otherwise fail, named
    writeFileSync(join(dir, 'refund-limits.yaml'), stringify({ ...POLICIES[0], rules: [POLICIES[0]?.rules[1]] }));
    const drifted = await run(['policies', 'test', dir]);
    expect(drifted.code).toBe(1);
    expect(drifted.stdout).toMatch(
      /FAIL recorded\.test\.yaml › \S+ db\.delete .*: expected block \(rule no-deletes\), got block \(no rule\)/,
    );
  });

  it('refuses a guard that would do nothing and a window it cannot read as meant: exit 2, nothing sent', async () => {
    const dir = tempDir();
    for (const [args, message] of [
      [
        ['policies', 'apply', dir, '--url', source.url, '--max-changed', '5'],
        '--max-changed is an option of apply --what-if: add --what-if',
      ],
      [['policies', 'diff', dir, '--url', source.url, '--what-if'], '--what-if is an option of apply (diff changes nothing)'],
      [
        ['policies', 'apply', dir, '--url', source.url, '--what-if', '--max-changed', 'lots'],
        '--max-changed is a percentage from 0 to 100',
      ],
      [
        ['policies', 'fixtures', '--from-audit', '--since', '7', '--url', source.url],
        '--since is a duration (7d, 24h, 30m) or a past ISO 8601 timestamp',
      ],
      [['policies', 'fixtures', '--from-audit', '--since', '2999-01-01', '--url', source.url], "not '2999-01-01'"],
    ] as const) {
      const refused = await run([...args], source.key);
      expect(refused.code, refused.stderr).toBe(2);
      expect(refused.stderr).toContain(message);
    }
  });

  it('apply --what-if refuses a bundle that changes more of the recent decisions than --max-changed', async () => {
    const dir = tempDir();
    expect((await run(['policies', 'export', dir, '--url', source.url], source.key)).code).toBe(0);
    // the same bundle changes no decision: applied (nothing to change)
    const same = await run(['policies', 'apply', dir, '--url', source.url, '--what-if'], source.key);
    expect(same.code, same.stderr).toBe(0);
    expect(same.stdout).toMatch(/^policies apply: nothing to change/);

    // block every delete-free act in production by default no more: allow there
    writeFileSync(join(dir, 'defaults.yaml'), stringify({ default_decision: { production: 'allow' } }));
    const refused = await run(['policies', 'apply', dir, '--url', source.url, '--what-if', '--max-changed', '1'], source.key);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/what-if: the bundle decides \d+ of \d+ recent decisions \([\d.]+ %\) otherwise/);
    expect(refused.stderr).toMatch(/\d+ blocked → allowed \(default decision\)/);
    expect(refused.stderr).toContain('refusing: more than --max-changed 1 % of the decisions change');
    expect((await source.api('GET', '/settings')).body.data.default_decision.production).toBe('block');

    const accepted = await run(['policies', 'apply', dir, '--url', source.url, '--what-if', '--max-changed', '1', '--yes'], source.key);
    expect(accepted.code, accepted.stderr).toBe(0);
    expect(accepted.stdout).toContain('~ default decision (production): allow');
    expect((await source.api('GET', '/settings')).body.data.default_decision.production).toBe('allow');
  });
});
