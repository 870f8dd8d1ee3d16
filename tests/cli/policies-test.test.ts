/**
 * Policies as code (issue 53), `warden policies test DIR`: a directory's cases decided offline
 * give what the server decides for the same policies (the same evaluator, not a copy of it);
 * the CLI as a person runs it: a summary line, a failing case named with what it expected and
 * what it got, JUnit XML a CI reads, exit codes 0/1/2, a file that is not a policy named.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { readPolicyBundle } from '../../apps/server/src/features/policies/policy-bundle.ts';
import { policyCases, runPolicyCases } from '../../apps/server/src/features/policies/policy-tests.ts';
import { useTestServer } from '../support/server.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
/** What `npm run warden` runs: the CLI, built (tools/warden.mjs). */
const CLI = join(ROOT, 'tools/warden.mjs');

const POLICIES = [
  {
    name: 'Refund limits',
    priority: 50,
    rules: [
      { id: 'no-deletes', match: { action: ['db.delete*'] }, effect: 'block', severity: 'high' },
      { id: 'big-refunds', match: { action: ['refund.create'] }, condition: 'context.amount_eur > 100', effect: 'require_approval' },
    ],
  },
  {
    name: 'Production care',
    rules: [
      { id: 'prod-writes', match: { action: ['*.write'], environment: ['production'] }, effect: 'require_approval' },
      { id: 'risky-agents', match: { action: ['payments.*'] }, condition: "agent.risk_level == 'high'", effect: 'block' },
      { id: 'mcp-deletes', match: { tool: ['delete_*'], server: ['github'] }, effect: 'block' },
    ],
  },
  { name: 'Watching only', mode: 'monitor', rules: [{ id: 'watch-all', match: { action: ['*'] }, effect: 'block' }] },
  { name: 'Switched off', enabled: false, rules: [{ id: 'off', match: { action: ['refund.create'] }, effect: 'block' }] },
];

/** Acts on both sides: agents of several kinds, conditions, environments, MCP executions. */
const CASES = [
  { agent: 'steady', input: { action: 'db.delete', resource: 'customers/42' } },
  { agent: 'steady', input: { action: 'refund.create', context: { amount_eur: 250 } } },
  { agent: 'steady', input: { action: 'refund.create', context: { amount_eur: 40 } } },
  { agent: 'steady', input: { action: 'orders.write' } },
  { agent: 'staging', input: { action: 'orders.write' } },
  { agent: 'risky', input: { action: 'payments.send', context: { amount_eur: 5 } } },
  { agent: 'steady', input: { action: 'payments.send' } },
  {
    agent: 'steady',
    input: { action: 'mcp.call' },
    execution: { mcp: { server: 'github', tool: 'delete_repo', arguments: { repo: 'x' } } },
  },
  { agent: 'steady', input: { action: 'mcp.call' }, execution: { mcp: { server: 'github', tool: 'create_issue', arguments: {} } } },
  { agent: 'steady', input: { action: 'mcp.call' }, execution: { mcp: { server: 'linear', tool: 'delete_issue', arguments: {} } } },
];
const AGENTS: Record<string, { environment: string; risk_level: string }> = {
  steady: { environment: 'production', risk_level: 'low' },
  staging: { environment: 'staging', risk_level: 'low' },
  risky: { environment: 'production', risk_level: 'high' },
};

function cli(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [CLI, ...args], { cwd: ROOT, timeout: 60_000 }, (error, stdout, stderr) =>
      resolve({ code: error ? Number(error.code ?? 1) : 0, stdout, stderr }),
    );
  });
}

describe('warden policies test', () => {
  const server = useTestServer();
  const dir = mkdtempSync(join(tmpdir(), 'warden-policies-'));
  const file = (name: string, content: unknown) =>
    writeFileSync(join(dir, name), typeof content === 'string' ? content : stringify(content));

  beforeAll(async () => {
    for (const [i, policy] of POLICIES.entries()) file(`${i}-policy.yaml`, policy);
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('decides every case as the server decides the same act under the same policies', async () => {
    for (const policy of POLICIES)
      expect((await server.api('POST', '/policies', { body: policy as never, unchecked: true })).status).toBe(201);
    for (const [slug, attributes] of Object.entries(AGENTS))
      expect(
        (await server.api('POST', '/agents', { body: { name: slug, slug, provider: 'local', ...attributes } as never, unchecked: true }))
          .status,
      ).toBe(201);

    // what the server decides (POST /policy/evaluate); the MCP cases are checked offline below (their servers are not registered here)
    const evaluated = [];
    for (const c of CASES.filter((c) => !c.execution))
      evaluated.push({
        c,
        res: await server.api('POST', '/policy/evaluate', {
          body: { input: { ...c.input, environment: AGENTS[c.agent]?.environment, agent: c.agent } } as never,
          unchecked: true,
        }),
      });
    const offline = runPolicyCases(
      readPolicyBundle(dir),
      policyCases({
        policies: [],
        digest: '',
        tests: [
          {
            file: 'x.test.yaml',
            content: {
              cases: CASES.map((c, i) => ({
                name: `case ${i}`,
                agent: { slug: c.agent, ...AGENTS[c.agent] },
                // as the server demands when a policy matches on environment
                input: { ...c.input, environment: AGENTS[c.agent]?.environment },
                execution: c.execution,
                expect: { effect: 'allow' },
              })),
            },
          },
        ],
      }),
    );
    for (const { c, res } of evaluated) {
      const mine = offline[CASES.indexOf(c)]?.got;
      expect(res?.status, JSON.stringify(res?.body)).toBe(200);
      expect({ effect: mine?.effect, policy: mine?.policy }, JSON.stringify(c)).toEqual({
        effect: res?.body.data.action,
        policy: res?.body.data.policy,
      });
    }
    expect(offline.map((r) => r.got.effect)).toEqual([
      'block',
      'require_approval',
      'allow',
      'require_approval',
      'allow',
      'block',
      'allow',
      'block',
      'allow',
      'allow',
    ]);
    expect(offline[7]?.got.rule).toBe('mcp-deletes');
  });

  it('passes a directory whose cases hold: one summary line, exit 0, JUnit XML', async () => {
    file('cases.test.yaml', {
      cases: [
        {
          name: 'deletes are blocked',
          input: { action: 'db.delete', environment: 'production' },
          expect: { effect: 'block', rule: 'no-deletes', policy: 'Refund limits' },
        },
        {
          name: 'big refunds ask a human',
          input: { action: 'refund.create', environment: 'production', context: { amount_eur: 101 } },
          expect: { effect: 'require_approval' },
        },
        {
          name: 'the disabled policy does nothing',
          input: { action: 'refund.create', environment: 'production', context: { amount_eur: 1 } },
          expect: { effect: 'allow', rule: null },
        },
      ],
    });
    const junit = join(dir, 'junit.xml');
    const run = await cli(['policies', 'test', dir, '--junit', junit]);
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toMatch(
      new RegExp(`^policies test: 3 cases, 3 passed, 0 failed \\(4 policies in ${dir}, bundle [0-9a-f]{12}\\)\\n$`),
    );
    const xml = readFileSync(junit, 'utf8');
    expect(xml).toContain('<testsuites name="warden policies test" tests="3" failures="0">');
    expect(xml.match(/<testcase /g)).toHaveLength(3);
  });

  it('fails a case naming it, the effect and rule expected and those decided: exit 1, a JUnit failure', async () => {
    file('cases.test.yaml', {
      cases: [
        { name: 'deletes are blocked', input: { action: 'db.delete', environment: 'production' }, expect: { effect: 'block' } },
        {
          name: 'small refunds ask a human',
          input: { action: 'refund.create', environment: 'production', context: { amount_eur: 5 } },
          expect: { effect: 'require_approval', rule: 'big-refunds' },
        },
      ],
    });
    const junit = join(dir, 'junit.xml');
    const run = await cli(['policies', 'test', dir, '--junit', junit]);
    expect(run.code).toBe(1);
    expect(run.stdout.split('\n')[0]).toBe(
      'FAIL cases.test.yaml › small refunds ask a human: expected require_approval (rule big-refunds), got allow (no rule)',
    );
    expect(run.stdout).toContain('policies test: 2 cases, 1 passed, 1 failed');
    expect(readFileSync(junit, 'utf8')).toContain('<failure message="expected require_approval (rule big-refunds), got allow (no rule)"/>');
  });

  it('refuses a file that is not a policy, or whose condition does not compile, naming the file: exit 2', async () => {
    file('z-broken.yaml', { name: 'Broken', rules: [{ match: { action: ['x'] }, effect: 'maybe' }] });
    let run = await cli(['policies', 'test', dir]);
    expect(run.code).toBe(2);
    expect(run.stderr).toMatch(/^warden: z-broken\.yaml: not a policy: \/rules\/0\/effect /);
    file('z-broken.yaml', { name: 'Broken', rules: [{ match: { action: ['x'] }, condition: 'context.amount >', effect: 'block' }] });
    run = await cli(['policies', 'test', dir]);
    expect(run.code).toBe(2);
    expect(run.stderr).toMatch(/^warden: z-broken\.yaml: rules\[0\]\.condition: /);
    file('z-broken.yaml', { name: 'Refund limits', rules: [] });
    run = await cli(['policies', 'test', dir]);
    expect(run.stderr).toBe(`warden: z-broken.yaml: policy 'Refund limits' is also in 0-policy.yaml (names are unique per workspace)\n`);
    rmSync(join(dir, 'z-broken.yaml'));
  });
});

describe('warden policies diff and apply, against a running Warden', () => {
  const server = useTestServer();
  const dir = mkdtempSync(join(tmpdir(), 'warden-bundle-'));
  const file = (name: string, content: unknown) => writeFileSync(join(dir, name), stringify(content));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const sync = (verb: string, ...extra: string[]) =>
    new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
      execFile(
        process.execPath,
        [CLI, 'policies', verb, dir, '--url', server.url, ...extra],
        { cwd: ROOT, timeout: 60_000, env: { ...process.env, WARDEN_API_KEY: server.key } },
        (error, stdout, stderr) => resolve({ code: error ? Number(error.code ?? 1) : 0, stdout, stderr }),
      );
    });
  const bundleEvents = async () =>
    (await server.api('GET', '/audit-logs', { query: { action: 'policies.bundle_applied' } })).body.data as {
      resource: string;
      context: Record<string, unknown>;
    }[];
  const policyNames = async () => ((await server.api('GET', '/policies')).body.data as { name: string }[]).map((p) => p.name).sort();

  it('diff says what would change and writes nothing; apply makes it one change; again, nothing', async () => {
    file('refunds.yaml', POLICIES[0]);
    file('care.yaml', POLICIES[1]);
    const digest = readPolicyBundle(dir).digest;

    const diff = await sync('diff');
    expect(diff.code, diff.stderr).toBe(0);
    expect(diff.stdout).toBe(
      `+ Production care\n+ Refund limits\npolicies diff: 2 to create, 0 to update, 0 to delete, 0 unchanged (bundle ${digest.slice(0, 12)})\n`,
    );
    expect(await policyNames()).toEqual([]);
    expect(await bundleEvents()).toEqual([]);

    const applied = await sync('apply');
    expect(applied.code, applied.stderr).toBe(0);
    const events = await bundleEvents();
    expect(events).toHaveLength(1);
    expect(applied.stdout).toContain(
      `policies apply: 2 created, 0 updated, 0 deleted, 0 unchanged (bundle ${digest.slice(0, 12)}, audit event `,
    );
    expect(events[0]).toMatchObject({
      resource: digest,
      context: { digest, created: ['Production care', 'Refund limits'], updated: [], deleted: [] },
    });
    expect(events[0]?.context.source).toEqual({ path: dir });
    expect(await policyNames()).toEqual(['Production care', 'Refund limits']);

    const again = await sync('apply');
    expect(again.stdout).toBe(`policies apply: nothing to change (bundle ${digest.slice(0, 12)})\n`);
    expect(await bundleEvents()).toHaveLength(1);
  });

  it('updates what differs, prunes only when asked, and a workspace read back is the same bundle', async () => {
    file('refunds.yaml', { ...POLICIES[0], priority: 10 });
    rmSync(join(dir, 'care.yaml'));
    const kept = await sync('apply');
    expect(kept.stdout.split('\n')[0]).toBe('~ Refund limits');
    expect(await policyNames()).toEqual(['Production care', 'Refund limits']);
    const pruned = await sync('apply', '--prune');
    expect(pruned.stdout.split('\n')[0]).toBe('- Production care');
    expect((await bundleEvents())[0]?.context).toMatchObject({ updated: [], deleted: ['Production care'] });
    expect(await policyNames()).toEqual(['Refund limits']);

    // the workspace's policies written back as files are the bundle applied: the same digest
    const back = mkdtempSync(join(tmpdir(), 'warden-export-'));
    for (const p of (await server.api('GET', '/policies')).body.data as Record<string, unknown>[]) {
      // as a policy file states it: the API's fields of PolicyCreate, a description only when there is one
      const { id: _id, version: _v, created_at: _c, updated_at: _u, description, ...policy } = p;
      writeFileSync(join(back, `${String(policy.name)}.json`), JSON.stringify(description === null ? policy : { ...policy, description }));
    }
    expect(readPolicyBundle(back).digest).toBe(readPolicyBundle(dir).digest);
    rmSync(back, { recursive: true, force: true });
  });

  it('sets the default decisions defaults.yaml states: the diff names them, apply records them in its one event', async () => {
    file('defaults.yaml', { default_decision: { staging: 'block' } });
    const diff = await sync('diff');
    expect(diff.stdout).toContain(
      '~ default decision (staging): block\npolicies diff: 0 to create, 0 to update, 0 to delete, 1 default decisions,',
    );
    expect((await server.api('GET', '/settings')).body.data.default_decision.staging).toBe('allow');
    const applied = await sync('apply', '--json');
    expect(JSON.parse(applied.stdout)).toMatchObject({ created: [], updated: [], default_decision_changed: ['staging'] });
    expect((await server.api('GET', '/settings')).body.data.default_decision.staging).toBe('block');
    expect((await bundleEvents())[0]?.context).toMatchObject({ default_decision: { staging: 'block' }, created: [], updated: [] });
    expect((await server.api('GET', '/audit-logs', { query: { action: 'settings.updated' } })).body.data).toEqual([]);
    const again = await sync('apply', '--json');
    expect(JSON.parse(again.stdout)).toMatchObject({ default_decision_changed: [], audit_event_id: null });
    rmSync(join(dir, 'defaults.yaml'));
  });

  it('refuses to prune with a directory that has no policy', async () => {
    const empty = mkdtempSync(join(tmpdir(), 'warden-empty-'));
    const run = await new Promise<{ code: number; stderr: string }>((resolve) =>
      execFile(
        process.execPath,
        [CLI, 'policies', 'apply', empty, '--url', server.url, '--prune'],
        { cwd: ROOT, timeout: 60_000, env: { ...process.env, WARDEN_API_KEY: server.key } },
        (error, _stdout, stderr) => resolve({ code: error ? Number(error.code ?? 1) : 0, stderr }),
      ),
    );
    rmSync(empty, { recursive: true, force: true });
    expect(run.code).toBe(2);
    expect(run.stderr).toBe(`warden: ${empty} has no policy files: --prune would delete every policy of the workspace; refusing\n`);
    expect(await policyNames()).toEqual(['Refund limits']);
  });

  it('refuses a bundle with two policies of one name, or one whose condition does not compile, naming it', async () => {
    const twice = await server.api('POST', '/policies/bundle', { body: { policies: [{ name: 'A' }, { name: 'A' }] } });
    expect(twice.status).toBe(400);
    expect(twice.body.error).toMatchObject({ code: 'invalid_request', message: "the bundle has two policies named 'A'" });
    const broken = await server.api('POST', '/policies/bundle', {
      body: { policies: [{ name: 'B', rules: [{ match: { action: ['x'] }, condition: 'context.a >', effect: 'block' }] }] },
    });
    expect(broken.status).toBe(400);
    expect(broken.body.error.code).toBe('invalid_policy');
    expect(broken.body.error.message).toMatch(/^policy 'B': rules\[0\]\.condition: /);
    expect(await policyNames()).toEqual(['Refund limits']);
  });
});
