/**
 * The contract suite (tests/contract/support/contract-suite.ts, also `npm run contract`) against
 * two targets, one test per operation of spec/dist/openapi.json:
 * - `mock`: a Prism mock of the spec (static: it answers the spec's examples);
 * - `server`: the real server on a fresh database (tests/support/server.ts; PostgreSQL with
 *   DATABASE_URL), with loopback upstreams its egress guard allows.
 * `CONTRACT_TARGET=mock` or `CONTRACT_TARGET=server` picks one; unset, both run. Then
 * `npm run contract -- --target URL --key …` runs against that server as a user would, without
 * upstreams (the path a server at a URL takes).
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../support/server.ts';
import { formatReport, runContractSuite, SCENARIOS, type SuiteReport, specOperations } from './support/contract-suite.ts';
import { createSpecValidator, loadSpec } from './support/spec-validator.ts';
import { ROOT, SPEC_FILE, type StartedTarget, startMockTarget, startUpstreams } from './support/targets.ts';

const spec = loadSpec(SPEC_FILE);
const operations = specOperations(spec);
const TARGETS = (process.env.CONTRACT_TARGET ?? 'mock,server').split(',').map((t) => t.trim());

/** The problems of one operation in the report, as a person reads them. */
function problemsOf(report: SuiteReport, operationId: string): string {
  const op = report.operations.find((o) => o.operationId === operationId);
  if (!op) return `${operationId} is not in the report`;
  const lines = [...op.problems];
  for (const call of op.calls) {
    for (const problem of call.problems)
      lines.push(`${call.method} ${call.path}${call.note ? ` (${call.note})` : ''} → ${call.status}: ${problem}`);
  }
  return lines.join('\n');
}

describe('the contract suite covers the spec', () => {
  it('every operation of the spec has a case, and every case is of an operation of the spec', () => {
    const covered = new Set(SCENARIOS.flatMap((s) => s.covers));
    const ids = operations.map((o) => o.operationId);
    expect(
      ids.filter((id) => !covered.has(id)),
      'operations without a case: add them to SCENARIOS',
    ).toEqual([]);
    expect([...covered].filter((id) => !ids.includes(id))).toEqual([]);
  });
});

let server: TestServer | undefined;

/**
 * What the bootstrap key's workspace holds that a run could leave behind: the ids of its agents,
 * policies, MCP servers, webhook endpoints, live API keys and pending approvals, and its
 * settings (audit events and MCP sessions aside: the log is append-only, sessions expire).
 */
async function workspaceResources(running: TestServer) {
  const db = running.database.db;
  const { id } = await db.selectFrom('workspaces').select('id').where('slug', '=', 'default').executeTakeFirstOrThrow();
  const sorted = (rows: { id: string }[]) => rows.map((row) => row.id).sort();
  return {
    agents: sorted(await db.selectFrom('agents').select('id').where('workspace_id', '=', id).execute()),
    policies: sorted(await db.selectFrom('policies').select('id').where('workspace_id', '=', id).execute()),
    mcpServers: sorted(await db.selectFrom('mcp_servers').select('id').where('workspace_id', '=', id).execute()),
    webhooks: sorted(await db.selectFrom('webhook_endpoints').select('id').where('workspace_id', '=', id).execute()),
    keys: sorted(await db.selectFrom('api_keys').select('id').where('workspace_id', '=', id).where('revoked_at', 'is', null).execute()),
    pendingApprovals: sorted(
      await db.selectFrom('approvals').select('id').where('workspace_id', '=', id).where('status', '=', 'pending').execute(),
    ),
    settings: (await running.api('GET', '/settings')).body.data,
  };
}

const starts: Record<string, () => Promise<StartedTarget>> = {
  mock: () => startMockTarget(),
  server: async () => {
    const upstreams = await startUpstreams();
    try {
      server = await startTestServer({ egressAllowlist: ['127.0.0.1/32'], auditCheckpointIntervalMs: 200 });
    } catch (error) {
      await upstreams.close();
      throw error;
    }
    const started = server;
    return {
      name: 'server',
      kind: 'server',
      baseUrl: started.url,
      key: started.key,
      upstreams,
      close: async () => {
        await started.close();
        await upstreams.close();
      },
    };
  },
};

for (const [name, start] of Object.entries(starts)) {
  describe.runIf(TARGETS.includes(name))(`contract against the ${name}`, () => {
    let target: StartedTarget | undefined;
    let report: SuiteReport;
    beforeAll(async () => {
      target = await start();
      report = await runContractSuite(spec, target);
      if (!report.passed) console.log(formatReport(report));
    }, 300_000);
    afterAll(async () => {
      if (name !== 'server') await target?.close();
    }, 30_000);

    it('has no problem outside the operations', () => {
      expect(report.problems).toEqual([]);
    });

    it.each(operations.map((o) => [o.operationId, `${o.method} ${o.path}`]))('%s (%s) conforms', (operationId) => {
      const op = report.operations.find((o) => o.operationId === operationId);
      expect(op?.outcome, problemsOf(report, operationId)).toBe('passed');
    });

    if (name === 'server') {
      it('npm run contract -- --target URL --key KEY passes against the running server (exit 0, one line per operation)', async () => {
        const running = server as TestServer;
        const before = await workspaceResources(running);
        const result = await new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve, reject) => {
          const child = spawn(
            process.execPath,
            [join(ROOT, 'node_modules/tsx/dist/cli.mjs'), join(ROOT, 'tools/contract.ts'), '--target', running.url, '--key', running.key],
            { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] },
          );
          let stdout = '';
          let stderr = '';
          child.stdout.on('data', (chunk) => {
            stdout += chunk;
          });
          child.stderr.on('data', (chunk) => {
            stderr += chunk;
          });
          const timer = setTimeout(() => child.kill('SIGKILL'), 240_000);
          child.on('error', reject);
          child.on('close', (code) => {
            clearTimeout(timer);
            resolve({ code, stdout, stderr });
          });
        });
        expect(result.code, `${result.stdout}\n${result.stderr}`).toBe(0);
        const lines = result.stdout.trim().split('\n');
        expect(lines[0]).toBe(`contract suite: ${operations.length} operations of spec ${spec.info.version} against ${running.url}`);
        for (const op of operations) expect(result.stdout).toMatch(new RegExp(`^ok {3}${op.operationId} `, 'm'));
        expect(lines.at(-1)).toMatch(new RegExp(`^PASSED: ${operations.length} passed, 0 failed, 0 without a case `));
        // it cleaned up after itself: nothing it created remains, no approval of its deleted agent waits
        expect(await workspaceResources(running)).toEqual(before);
      }, 300_000);

      afterAll(async () => {
        await target?.close();
      }, 30_000);
    }
  });
}

describe('npm run contract: usage', () => {
  const contract = (args: string[]) =>
    new Promise<{ code: number | null; stderr: string }>((resolve, reject) => {
      const child = spawn(process.execPath, [join(ROOT, 'node_modules/tsx/dist/cli.mjs'), join(ROOT, 'tools/contract.ts'), ...args], {
        cwd: ROOT,
        env: { ...process.env, WARDEN_CONTRACT_KEY: '' },
        stdio: ['ignore', 'ignore', 'pipe'],
      });
      let stderr = '';
      child.stderr.on('data', (chunk) => {
        stderr += chunk;
      });
      child.on('error', reject);
      child.on('close', (code) => resolve({ code, stderr }));
    });

  it('exits 2 with the usage without --target, with an unknown target, and for a URL without --key', async () => {
    const none = await contract([]);
    expect(none.code).toBe(2);
    expect(none.stderr).toContain('contract: --target is required');
    const unknown = await contract(['--target', 'staging']);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain("--target must be mock, local or an http(s) URL, got 'staging'");
    const keyless = await contract(['--target', 'http://127.0.0.1:9/api/v1']);
    expect(keyless.code).toBe(2);
    expect(keyless.stderr).toContain('needs --key KEY');
  }, 60_000);

  it('exits 2 naming the target when nothing answers at the URL', async () => {
    const result = await contract(['--target', 'http://127.0.0.1:9/api/v1', '--key', 'wk_x']);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain(
      'contract: could not start the target http://127.0.0.1:9/api/v1: no answer from http://127.0.0.1:9/api/v1/health',
    );
  }, 60_000);
});

describe("the spec's examples", () => {
  it('validate against their schemas (every example of a JSON response, named or not, and of a component schema)', () => {
    expect(createSpecValidator(spec).exampleProblems()).toEqual([]);
  });
});

describe('the spec validator itself', () => {
  const validator = createSpecValidator(spec, '/api/v1');
  it('accepts a conforming answer and names what breaks a non-conforming one', () => {
    const agent = { ...spec.components.schemas.Agent.example };
    expect(validator.check('GET', '/api/v1/agents/x', 200, 'application/json', { data: agent })).toEqual([]);
    const { slug: _slug, ...withoutSlug } = agent;
    expect(validator.check('GET', '/api/v1/agents/x', 200, 'application/json', { data: withoutSlug })).toEqual([
      expect.objectContaining({ operation: 'getAgent', problem: expect.stringContaining("must have required property 'slug'") }),
    ]);
    expect(
      validator.check('GET', '/api/v1/agents/x', 404, 'application/json', { error: { code: 'no_such_code', message: 'x' } }),
    ).not.toEqual([]);
    expect(validator.check('GET', '/api/v1/nowhere', 200, 'application/json', {})).not.toEqual([]);
  });
});
