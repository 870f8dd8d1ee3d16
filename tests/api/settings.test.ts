/**
 * The workspace's default decision per environment (GET/PATCH /settings and the dashboard's
 * /dashboard/api/settings): what a decision that no rule matches comes to, how it reaches the
 * policy engine (through the policy version, in every server process), and the compliance
 * control `production-default-block`.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../apps/server/src/logger.ts';
import { type RunningServer, startServer } from '../../apps/server/src/server.ts';
import { hashSecret } from '../../apps/server/src/shared/crypto.ts';
import { type ApiResponse, dashboardLogin, keyFor, request, startTestServer, type TestServer } from '../support/server.ts';

let server: TestServer;
let origin: string;
beforeAll(async () => {
  server = await startTestServer();
  origin = new URL(server.url).origin;
});
afterAll(async () => {
  await server?.close();
});

const spec = JSON.parse(readFileSync(new URL('../../spec/dist/openapi.json', import.meta.url), 'utf8'));
const PERMISSIONS: string[] = spec.components.schemas.Permission.enum;
const ALL = PERMISSIONS.join(',');
const ALLOW_ALL = { development: 'allow', staging: 'allow', production: 'allow' };

let workspaces = 0;
/** A key with every permission of a workspace of its own, and the workspace's slug. */
async function freshWorkspace(): Promise<{ key: string; slug: string }> {
  const slug = `settings-${++workspaces}`;
  return { key: await keyFor(server, ALL, slug), slug };
}

const getSettings = (key: string) => server.api('GET', '/settings', { key });
const patchSettings = (key: string, body: unknown) => server.api('PATCH', '/settings', { key, body, unchecked: true });

async function setDefaults(key: string, defaults: Record<string, string>) {
  const res = await patchSettings(key, { default_decision: defaults });
  expect(res.status).toBe(200);
  return res.body.data;
}

/** One active agent per environment: `dev-bot`, `staging-bot`, `prod-bot`. */
async function createAgents(key: string) {
  for (const [slug, environment] of [
    ['dev-bot', 'development'],
    ['staging-bot', 'staging'],
    ['prod-bot', 'production'],
  ] as const) {
    const res = await server.api('POST', '/agents', { key, body: { name: slug, slug, provider: 'local', environment, risk_level: 'low' } });
    expect(res.status).toBe(201);
  }
}

const evaluate = async (key: string, input: Record<string, unknown>, url = server.url) => {
  const res = await request(url, key, 'POST', '/policy/evaluate', { body: { input } });
  expect(res.status).toBe(200);
  return res.body.data;
};

const workspaceIdOf = async (key: string) =>
  (await sql<{ workspace_id: string }>`SELECT workspace_id FROM api_keys WHERE key_hash = ${hashSecret(key)}`.execute(server.database.db))
    .rows[0]?.workspace_id as string;

const policyVersionOf = async (key: string) =>
  Number(
    (
      await sql<{ policy_version: string }>`SELECT policy_version FROM workspaces WHERE id = ${await workspaceIdOf(key)}`.execute(
        server.database.db,
      )
    ).rows[0]?.policy_version,
  );

/** Polls `probe` until it returns true, for at most `ms`; returns how long it took, or -1. */
async function within(ms: number, probe: () => Promise<boolean>): Promise<number> {
  const started = performance.now();
  while (performance.now() - started < ms) {
    if (await probe()) return performance.now() - started;
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  return -1;
}

/** Notifications arrive in a few milliseconds (see tests/reliability/key-cache.test.ts); room for a loaded machine. */
const NOTIFIED_WITHIN_MS = 500;

function expectError(res: ApiResponse, status: number, code: string) {
  expect(res.status, JSON.stringify(res.body)).toBe(status);
  expect(res.body.error.code).toBe(code);
}

describe('GET /settings (getSettings)', () => {
  it('answers allow in every environment for a new workspace', async () => {
    const { key } = await freshWorkspace();
    const res = await getSettings(key);
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      data: { default_decision: ALLOW_ALL, agents_hold_no_credentials: false, audit_mcp_arguments: 'redacted', audit_log_public: false },
    });
  });

  it('answers with policies:read alone; 403 insufficient_permission without it, 401 without a key', async () => {
    const { slug } = await freshWorkspace();
    expect((await getSettings(await keyFor(server, 'policies:read', slug))).status).toBe(200);
    expectError(
      await getSettings(await keyFor(server, PERMISSIONS.filter((p) => p !== 'policies:read').join(','), slug)),
      403,
      'insufficient_permission',
    );
    expectError(await server.api('GET', '/settings', { key: null }), 401, 'unauthorized');
  });
});

describe('PATCH /settings (updateSettings)', () => {
  it('changes only the environments named and answers the new settings, which GET then reads', async () => {
    const { key } = await freshWorkspace();
    expect(await setDefaults(key, { production: 'block' })).toEqual({
      default_decision: { development: 'allow', staging: 'allow', production: 'block' },
      agents_hold_no_credentials: false,
      audit_mcp_arguments: 'redacted',
      audit_log_public: false,
    });
    expect(await setDefaults(key, { staging: 'block' })).toEqual({
      default_decision: { development: 'allow', staging: 'block', production: 'block' },
      agents_hold_no_credentials: false,
      audit_mcp_arguments: 'redacted',
      audit_log_public: false,
    });
    expect(await setDefaults(key, { development: 'block', staging: 'allow', production: 'allow' })).toEqual({
      default_decision: { development: 'block', staging: 'allow', production: 'allow' },
      agents_hold_no_credentials: false,
      audit_mcp_arguments: 'redacted',
      audit_log_public: false,
    });
    expect((await getSettings(key)).body.data).toEqual({
      default_decision: { development: 'block', staging: 'allow', production: 'allow' },
      agents_hold_no_credentials: false,
      audit_mcp_arguments: 'redacted',
      audit_log_public: false,
    });
  });

  it('bumps the workspace policy version like a policy change', async () => {
    const { key } = await freshWorkspace();
    const before = await policyVersionOf(key);
    await setDefaults(key, { production: 'block' });
    const once = await policyVersionOf(key);
    expect(once).toBeGreaterThan(before);
    await setDefaults(key, { production: 'allow' });
    expect(await policyVersionOf(key)).toBeGreaterThan(once);
  });

  it('answers 400 invalid_request for an unknown environment or value, an empty change or an unknown field, and changes nothing', async () => {
    const { key } = await freshWorkspace();
    await setDefaults(key, { production: 'block' });
    const current = (await getSettings(key)).body.data;
    for (const body of [
      { default_decision: { qa: 'block' } },
      { default_decision: { production: 'deny' } },
      { default_decision: { production: 'require_approval' } },
      { default_decision: { production: null } },
      { default_decision: { production: 'BLOCK' } },
      { default_decision: {} },
      { default_decision: 'block' },
      { default_decision: { production: 'allow', qa: 'allow' } },
      {},
      { default: { production: 'allow' } },
    ]) {
      expectError(await patchSettings(key, body), 400, 'invalid_request');
    }
    expect((await getSettings(key)).body.data).toEqual(current);
  });

  it('answers 403 insufficient_permission to a key without policies:write (policies:read is not enough), changing nothing', async () => {
    const { key, slug } = await freshWorkspace();
    const reader = await keyFor(server, 'policies:read,runtime:evaluate,admin', slug);
    expectError(await patchSettings(reader, { default_decision: { production: 'block' } }), 403, 'insufficient_permission');
    expect((await getSettings(key)).body.data.default_decision).toEqual(ALLOW_ALL);
    const writer = await keyFor(server, 'policies:write', slug);
    expect((await patchSettings(writer, { default_decision: { production: 'block' } })).status).toBe(200);
    expect((await getSettings(key)).body.data.default_decision.production).toBe('block');
  });

  it("changes only the key's workspace: another workspace keeps allowing unmatched actions", async () => {
    const a = await freshWorkspace();
    const b = await freshWorkspace();
    await createAgents(a.key);
    await createAgents(b.key);
    expect((await evaluate(b.key, { action: 'files.read', agent: 'prod-bot' })).allowed).toBe(true); // b's set cached
    await setDefaults(a.key, { development: 'block', staging: 'block', production: 'block' });
    expect((await getSettings(b.key)).body.data.default_decision).toEqual(ALLOW_ALL);
    expect(await evaluate(b.key, { action: 'files.read', agent: 'prod-bot' })).toMatchObject({ allowed: true, result: 'allowed' });
    expect(await evaluate(a.key, { action: 'files.read', agent: 'prod-bot' })).toMatchObject({ allowed: false, result: 'blocked' });
  });
});

describe('POST /policy/evaluate with a default decision (evaluatePolicy)', () => {
  it('blocks an unmatched action in production once production defaults to block, and audits it as blocked', async () => {
    const { key } = await freshWorkspace();
    await createAgents(key);
    // Decided once under the old default, so the compiled set is cached before the change.
    expect(await evaluate(key, { action: 'files.delete', agent: 'prod-bot' })).toMatchObject({ allowed: true, matched: false });
    await setDefaults(key, { production: 'block' });

    const decision = await evaluate(key, { action: 'files.delete', resource: 'docs/1', agent: 'prod-bot', environment: 'production' });
    expect(decision).toMatchObject({
      allowed: false,
      action: 'block',
      matched: false,
      policy: null,
      severity: 'medium',
      result: 'blocked',
      approval_id: null,
      execution_proxy_required: false,
    });
    expect(decision.message).toMatch(/default decision for production/);

    const logs = await server.api('GET', '/audit-logs?limit=100', { key });
    expect(logs.status).toBe(200);
    const event = logs.body.data.find((e: { id: string }) => e.id === decision.audit_event_id);
    expect(event).toMatchObject({
      agent: 'prod-bot',
      action: 'files.delete',
      environment: 'production',
      policy: null,
      result: 'blocked',
      severity: 'medium',
      message: decision.message,
    });
  });

  it('still allows an unmatched action in development and staging while production blocks', async () => {
    const { key } = await freshWorkspace();
    await createAgents(key);
    await setDefaults(key, { production: 'block' });
    for (const agent of ['dev-bot', 'staging-bot']) {
      expect(await evaluate(key, { action: 'files.delete', agent })).toMatchObject({
        allowed: true,
        action: 'allow',
        matched: false,
        policy: null,
        result: 'allowed',
      });
    }
    expect(await evaluate(key, { action: 'files.delete', agent: 'prod-bot' })).toMatchObject({ allowed: false, result: 'blocked' });
  });

  it('still allows an action that a matching allow rule matches, and blocks only what no rule matches', async () => {
    const { key } = await freshWorkspace();
    await createAgents(key);
    await setDefaults(key, { production: 'block' });
    const created = await server.api('POST', '/policies', {
      key,
      body: { name: 'Reads are fine', rules: [{ id: 'reads', match: { action: ['files.read'] }, effect: 'allow' }] },
    });
    expect(created.status).toBe(201);
    expect(await evaluate(key, { action: 'files.read', agent: 'prod-bot' })).toMatchObject({
      allowed: true,
      matched: true,
      policy: 'Reads are fine',
      result: 'allowed',
    });
    expect(await evaluate(key, { action: 'files.write', agent: 'prod-bot' })).toMatchObject({
      allowed: false,
      matched: false,
      result: 'blocked',
    });
  });

  it('allows again at the very next decision once production goes back to allow', async () => {
    const { key } = await freshWorkspace();
    await createAgents(key);
    for (let round = 0; round < 3; round++) {
      await setDefaults(key, { production: 'block' });
      expect((await evaluate(key, { action: 'x.y', agent: 'prod-bot' })).result).toBe('blocked');
      await setDefaults(key, { production: 'allow' });
      expect((await evaluate(key, { action: 'x.y', agent: 'prod-bot' })).result).toBe('allowed');
    }
  });

  it('applies a default changed behind the server’s back (plain SQL, as another process would) to the next decisions', async () => {
    const { key } = await freshWorkspace();
    await createAgents(key);
    expect((await evaluate(key, { action: 'x.y', agent: 'prod-bot' })).result).toBe('allowed');
    await sql`INSERT INTO workspace_settings (workspace_id, default_production) VALUES (${await workspaceIdOf(key)}, 'block')`.execute(
      server.database.db,
    );
    const took = await within(2_000, async () => (await evaluate(key, { action: 'x.y', agent: 'prod-bot' })).result === 'blocked');
    expect(took).toBeGreaterThanOrEqual(0);
    expect(took).toBeLessThan(NOTIFIED_WITHIN_MS);
  });

  describe.skipIf(!process.env.DATABASE_URL)('two server processes on one database (needs DATABASE_URL)', () => {
    let second: RunningServer;
    beforeAll(async () => {
      const databaseUrl = String((server.database.pool?.options as { connectionString?: string } | undefined)?.connectionString);
      second = await startServer(
        { port: 0, host: '127.0.0.1', databaseUrl, dataDir: 'memory://', bootstrapKey: `wk_${randomBytes(24).toString('base64url')}` },
        createLogger(true),
      );
    });
    afterAll(async () => {
      await second?.close();
    });

    it('a default changed through one process decides the other process’s next evaluations', async () => {
      const { key } = await freshWorkspace();
      await createAgents(key);
      const decideOnSecond = async () => (await evaluate(key, { action: 'x.y', agent: 'prod-bot' }, second.url)).result;
      for (let round = 0; round < 3; round++) {
        expect(await decideOnSecond()).toBe('allowed');
        await setDefaults(key, { production: 'block' });
        const blocked = await within(2_000, async () => (await decideOnSecond()) === 'blocked');
        expect(blocked).toBeGreaterThanOrEqual(0);
        expect(blocked).toBeLessThan(NOTIFIED_WITHIN_MS);
        await setDefaults(key, { production: 'allow' });
        expect(await within(2_000, async () => (await decideOnSecond()) === 'allowed')).toBeGreaterThanOrEqual(0);
      }
    });
  });
});

describe('compliance control production-default-block (getComplianceStatus)', () => {
  const controlOf = async (key: string) => {
    const res = await server.api('GET', '/compliance/status', { key });
    expect(res.status).toBe(200);
    return { status: res.body.data, control: res.body.data.controls.find((c: { id: string }) => c.id === 'production-default-block')! };
  };

  it('is not applicable without active production agents, fails while production allows by default and passes once it blocks', async () => {
    const { key } = await freshWorkspace();
    const empty = await controlOf(key);
    expect(empty.control).toMatchObject({ status: 'not_applicable', weight: 15, name: 'Production defaults to block' });
    await setDefaults(key, { production: 'block' });
    expect((await controlOf(key)).control.status).toBe('not_applicable'); // no production agent: nothing to govern

    await setDefaults(key, { production: 'allow' });
    await createAgents(key);
    const allowing = await controlOf(key);
    expect(allowing.control).toMatchObject({ status: 'fail', score: 0 });

    await setDefaults(key, { production: 'block', development: 'allow' });
    const blocking = await controlOf(key);
    expect(blocking.control).toMatchObject({ status: 'pass', score: 100 });
    expect(blocking.status.score).toBeGreaterThan(allowing.status.score);
    expect(blocking.status.framework_score).toBeGreaterThan(allowing.status.framework_score);

    // Only production's default counts.
    await setDefaults(key, { production: 'allow', development: 'block', staging: 'block' });
    expect((await controlOf(key)).control).toMatchObject({ status: 'fail', score: 0 });
  });
});

describe('dashboard API /dashboard/api/settings (getDashboardSettings, updateDashboardSettings)', () => {
  it('reads and changes the default decision with admin and policies:read/write, and the change decides v1 evaluations', async () => {
    const { key, slug } = await freshWorkspace();
    await createAgents(key);
    const session = await dashboardLogin(origin, await keyFor(server, 'admin,policies:read,policies:write', slug));

    const read = await session.call('GET', '/settings');
    expect(read.status).toBe(200);
    expect(read.body).toEqual({
      data: { default_decision: ALLOW_ALL, agents_hold_no_credentials: false, audit_mcp_arguments: 'redacted', audit_log_public: false },
    });

    const changed = await session.call('PATCH', '/settings', { default_decision: { production: 'block' } });
    expect(changed.status).toBe(200);
    expect(changed.body.data.default_decision).toEqual({ development: 'allow', staging: 'allow', production: 'block' });
    expect((await getSettings(key)).body.data.default_decision.production).toBe('block');
    expect(await evaluate(key, { action: 'x.y', agent: 'prod-bot' })).toMatchObject({ allowed: false, matched: false, result: 'blocked' });
  });

  it('answers 400 invalid_request for an unknown environment or value', async () => {
    const { slug } = await freshWorkspace();
    const session = await dashboardLogin(origin, await keyFor(server, 'admin,policies:read,policies:write', slug));
    expectError(await session.call('PATCH', '/settings', { default_decision: { qa: 'block' } }), 400, 'invalid_request');
    expectError(await session.call('PATCH', '/settings', { default_decision: { production: 'maybe' } }), 400, 'invalid_request');
    expect((await session.call('GET', '/settings')).body.data.default_decision).toEqual(ALLOW_ALL);
  });

  it('needs policies:read to read and policies:write to change, besides admin (403 insufficient_permission)', async () => {
    const { key, slug } = await freshWorkspace();
    const adminOnly = await dashboardLogin(origin, await keyFor(server, 'admin', slug));
    expectError(await adminOnly.call('GET', '/settings'), 403, 'insufficient_permission');
    const reader = await dashboardLogin(origin, await keyFor(server, 'admin,policies:read', slug));
    expect((await reader.call('GET', '/settings')).status).toBe(200);
    expectError(await reader.call('PATCH', '/settings', { default_decision: { production: 'block' } }), 403, 'insufficient_permission');
    expect((await getSettings(key)).body.data.default_decision).toEqual(ALLOW_ALL);
  });

  it('answers 403 csrf_token_invalid to a change without the CSRF token, changing nothing', async () => {
    const { key, slug } = await freshWorkspace();
    const login = await fetch(`${origin}/dashboard/api/session`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ api_key: await keyFor(server, 'admin,policies:read,policies:write', slug) }),
    });
    const cookie = login.headers
      .getSetCookie()
      .map((c) => c.split(';')[0] as string)
      .find((c) => c.startsWith('warden_session=')) as string;
    const res = await request(`${origin}/dashboard/api`, '', 'PATCH', '/settings', {
      key: null,
      body: { default_decision: { production: 'block' } },
      headers: { cookie },
    });
    expectError(res, 403, 'csrf_token_invalid');
    expect((await getSettings(key)).body.data.default_decision).toEqual(ALLOW_ALL);
  });
});
