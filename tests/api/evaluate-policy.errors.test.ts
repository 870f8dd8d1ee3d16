/**
 * POST /policy/evaluate (evaluatePolicy): each refusal (400, 401, 403, 503 with its code, and
 * whether it is audited) and the security cases (a slow glob, permissions, other workspaces).
 * The decisions themselves: evaluate-policy.decisions.test.ts.
 */
import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { keyFor, useTestServer } from '../support/server.ts';
import { evaluateHelpers, PERMISSIONS } from './support/evaluate-policy.ts';

const server = useTestServer();
const { freshWorkspace, createAgent, createPolicy, evaluate, auditEvents } = evaluateHelpers(server);

describe('POST /policy/evaluate (evaluatePolicy)', () => {
  describe('errors', () => {
    it.each([
      ['missing input', {}],
      ['missing action', { input: { agent: 'bot' } }],
      ['empty action', { input: { action: '', agent: 'bot' } }],
      ['unknown field', { input: { action: 'a', agent: 'bot' }, colour: 'red' }],
      ['unknown input field', { input: { action: 'a', agent: 'bot', colour: 'red' } }],
      ['approval_id not a UUID', { input: { action: 'a', agent: 'bot' }, approval_id: 'nope' }],
    ])('answers 400 invalid_request for %s', async (_label, body) => {
      const res = await server.api('POST', '/policy/evaluate', { body, unchecked: true });
      expect(res.status).toBe(400);
      expect(res.body.error.code).toBe('invalid_request');
      expect(typeof res.body.error.message).toBe('string');
    });

    it('answers 400 agent_context_required when neither input.agent nor an agent key names the agent', async () => {
      const res = await evaluate(server.key, { input: { action: 'a' } });
      expect(res.status).toBe(400);
      expect(res.body.error.code).toBe('agent_context_required');
    });

    it('answers 400 environment_context_required when an enforcing rule matches on environment and none is given', async () => {
      const key = await freshWorkspace();
      await createAgent(key, { name: 'Prod bot', slug: 'prod-bot', environment: 'production' });
      await createPolicy(key, {
        name: 'Prod safety',
        rules: [{ match: { action: ['db.delete*'], environment: ['production'] }, effect: 'block' }],
      });

      const missing = await evaluate(key, { input: { action: 'db.delete', agent: 'prod-bot' } });
      expect(missing.status).toBe(400);
      expect(missing.body.error.code).toBe('environment_context_required');

      const stated = await evaluate(key, { input: { action: 'db.delete', agent: 'prod-bot', environment: 'production' } });
      expect(stated.status).toBe(200);
      expect(stated.body.data).toMatchObject({ allowed: false, result: 'blocked', policy: 'Prod safety' });
    });

    it('does not require input.environment when only a monitor policy matches on environment', async () => {
      const key = await freshWorkspace();
      await createAgent(key, { name: 'Prod watcher', slug: 'prod-watcher', environment: 'production' });
      await createPolicy(key, {
        name: 'Watch prod',
        mode: 'monitor',
        rules: [{ match: { environment: ['production'] }, effect: 'block' }],
      });
      const res = await evaluate(key, { input: { action: 'db.delete', agent: 'prod-watcher' } });
      expect(res.status).toBe(200);
      expect(res.body.data.allowed).toBe(true);
    });

    it('answers 400 agent_identity_mismatch when the agent key belongs to another agent than input.agent', async () => {
      const key = await freshWorkspace();
      await createAgent(key, { name: 'Alpha', slug: 'alpha', api_key: 'alpha-agent-secret-0123456789' });
      await createAgent(key, { name: 'Beta', slug: 'beta' });
      const res = await evaluate(key, { input: { action: 'a', agent: 'beta' } }, { 'x-warden-agent-key': 'alpha-agent-secret-0123456789' });
      expect(res.status).toBe(400);
      expect(res.body.error.code).toBe('agent_identity_mismatch');
    });

    it("answers 400 environment_mismatch when input.environment differs from the agent's", async () => {
      const key = await freshWorkspace();
      await createAgent(key, { name: 'Stage bot', slug: 'stage-bot', environment: 'staging' });
      const res = await evaluate(key, { input: { action: 'a', agent: 'stage-bot', environment: 'production' } });
      expect(res.status).toBe(400);
      expect(res.body.error.code).toBe('environment_mismatch');
    });

    it('answers 400 evaluation_failed when a condition fails at run time, and audits it as blocked', async () => {
      const key = await freshWorkspace();
      await createAgent(key, { name: 'Payments', slug: 'payments' });
      await createPolicy(key, {
        name: 'Amount limit',
        rules: [{ match: { action: ['payments.send'] }, condition: 'context.amount > 100', effect: 'allow' }],
      });
      const res = await evaluate(key, { input: { action: 'payments.send', agent: 'payments', context: { currency: 'EUR' } } });
      expect(res.status).toBe(400);
      expect(res.body.error.code).toBe('evaluation_failed');
      expect(res.body).not.toHaveProperty('data');

      const events = await auditEvents(key, '&action=payments.send');
      expect(events).toHaveLength(1);
      expect(events[0]).toMatchObject({ result: 'blocked', agent: 'payments', policy: 'Amount limit', source: 'evaluation' });
    });

    it('answers 400 evaluation_failed with a bounded message when the failing condition names a long key, and lists its audit event', async () => {
      const key = await freshWorkspace();
      await createAgent(key, { name: 'Keys', slug: 'keys' });
      await createPolicy(key, {
        name: 'Long key',
        rules: [{ match: { action: ['keys.use'] }, condition: `context.${'k'.repeat(3000)} == 1`, effect: 'block' }],
      });
      const res = await evaluate(key, { input: { action: 'keys.use', agent: 'keys', context: {} } });
      expect(res.status).toBe(400);
      expect(res.body.error.code).toBe('evaluation_failed');
      expect(res.body.error.message).toMatch(/^condition of policy 'Long key' failed: .*No such key: k+…$/);
      expect(res.body.error.message.length).toBeLessThanOrEqual(1000);

      // The audit event holds the same message, so GET /audit-logs can answer it within the spec.
      const events = await auditEvents(key, '&action=keys.use');
      expect(events).toHaveLength(1);
      expect(events[0]).toMatchObject({ result: 'blocked', policy: 'Long key', message: res.body.error.message });
    });

    it('answers 401 unauthorized without a key', async () => {
      const res = await evaluate(null, { input: { action: 'a', agent: 'bot' } });
      expect(res.status).toBe(401);
      expect(res.body).toEqual({ error: { code: 'unauthorized', message: 'A valid API key is required' } });
    });

    it('answers 401 agent_key_required when the named agent has a key and none is sent', async () => {
      const key = await freshWorkspace();
      await createAgent(key, { name: 'Locked', slug: 'locked', api_key: 'locked-agent-secret-0123456789' });
      const res = await evaluate(key, { input: { action: 'a', agent: 'locked' } });
      expect(res.status).toBe(401);
      expect(res.body.error.code).toBe('agent_key_required');
      const withKey = await evaluate(
        key,
        { input: { action: 'a', agent: 'locked' } },
        { 'x-warden-agent-key': 'locked-agent-secret-0123456789' },
      );
      expect(withKey.status).toBe(200);
    });

    it('answers 401 invalid_agent_key for a wrong agent key', async () => {
      const key = await freshWorkspace();
      await createAgent(key, { name: 'Guarded', slug: 'guarded', api_key: 'guarded-agent-secret-0123456789' });
      const named = await evaluate(
        key,
        { input: { action: 'a', agent: 'guarded' } },
        { 'x-warden-agent-key': 'guarded-agent-secret-0123456780' },
      );
      expect(named.status).toBe(401);
      expect(named.body.error.code).toBe('invalid_agent_key');
      const alone = await evaluate(key, { input: { action: 'a' } }, { 'x-warden-agent-key': 'not-a-key-of-anyone-0123456789' });
      expect(alone.status).toBe(401);
      expect(alone.body.error.code).toBe('invalid_agent_key');
    });

    it('answers 403 agent_not_found for an agent the workspace does not have', async () => {
      const res = await evaluate(server.key, { input: { action: 'a', agent: 'ghost' } });
      expect(res.status).toBe(403);
      expect(res.body.error.code).toBe('agent_not_found');
    });

    it.each(['suspended', 'inactive', 'retired'] as const)('answers 403 agent_inactive for an agent whose status is %s', async (status) => {
      const key = await freshWorkspace();
      await createAgent(key, { name: `Sleeper ${status}`, slug: `sleeper-${status}`, status });
      const res = await evaluate(key, { input: { action: 'a', agent: `sleeper-${status}` } });
      expect(res.status).toBe(403);
      expect(res.body.error.code).toBe('agent_inactive');
    });

    it('answers 403 execution_proxy_required when the deciding rule allows only through the proxy', async () => {
      const key = await freshWorkspace();
      await createAgent(key, { name: 'Caller', slug: 'caller' });
      await createPolicy(key, {
        name: 'Proxy only',
        rules: [{ match: { action: ['http.call'] }, effect: 'allow', require_execution_proxy: true }],
      });
      const res = await evaluate(key, { input: { action: 'http.call', agent: 'caller' } });
      expect(res.status).toBe(403);
      expect(res.body.error.code).toBe('execution_proxy_required');
      expect(res.body).not.toHaveProperty('data');
      const events = await auditEvents(key, '&action=http.call');
      expect(events).toHaveLength(1);
      expect(events[0]?.result).not.toBe('allowed');
    });

    it('answers 503 audit_persist_failed, never an allow, when the audit event cannot be stored', async () => {
      const key = await freshWorkspace();
      await createAgent(key, { name: 'Fail closed', slug: 'fail-closed' });
      const input = { action: 'files.read', agent: 'fail-closed' };
      expect((await evaluate(key, { input })).body.data.allowed).toBe(true);
      const before = (await auditEvents(key)).length;

      const db = server.database.db;
      let res: Awaited<ReturnType<typeof evaluate>>;
      await sql`ALTER TABLE audit_events RENAME TO audit_events_off`.execute(db);
      try {
        res = await evaluate(key, { input });
      } finally {
        await sql`ALTER TABLE audit_events_off RENAME TO audit_events`.execute(db);
      }
      expect(res.status).toBe(503);
      expect(res.body.error.code).toBe('audit_persist_failed');
      expect(res.body).not.toHaveProperty('data');
      expect(JSON.stringify(res.body)).not.toContain('"allowed":true');

      expect((await auditEvents(key)).length).toBe(before);
      const again = await evaluate(key, { input });
      expect(again.status).toBe(200);
      expect(again.body.data.allowed).toBe(true);
    });
  });

  describe('security', () => {
    it('decides against a glob that would make a backtracking regex run for seconds, at once', async () => {
      const key = await freshWorkspace();
      await createAgent(key, { name: 'Greedy', slug: 'greedy' });
      await createPolicy(key, { name: 'Tricky', rules: [{ match: { action: [`${'*a'.repeat(10)}*b`] }, effect: 'block' }] });
      const started = performance.now();
      const res = await evaluate(key, { input: { action: 'a'.repeat(40), agent: 'greedy' } });
      expect(res.status).toBe(200);
      expect(res.body.data).toMatchObject({ action: 'allow', matched: false });
      // 33 s with the regex matcher; a bound for a hang, not a speed target
      expect(performance.now() - started).toBeLessThan(5_000);
      expect((await evaluate(key, { input: { action: `${'a'.repeat(40)}b`, agent: 'greedy' } })).body.data).toMatchObject({
        action: 'block',
      });
    });

    it('answers 403 insufficient_permission for a key with every permission but runtime:evaluate', async () => {
      const key = await keyFor(server, PERMISSIONS.filter((p) => p !== 'runtime:evaluate').join(','));
      const res = await evaluate(key, { input: { action: 'a', agent: 'ghost' } });
      expect(res.status).toBe(403);
      expect(res.body.error.code).toBe('insufficient_permission');
    });

    it("never resolves another workspace's agent, by name or by key", async () => {
      const owner = await freshWorkspace();
      await createAgent(owner, { name: 'Private agent', slug: 'private-agent', api_key: 'private-agent-secret-0123456789' });
      const intruder = await freshWorkspace();
      const byName = await evaluate(intruder, { input: { action: 'a', agent: 'private-agent' } });
      expect(byName.status).toBe(403);
      expect(byName.body.error.code).toBe('agent_not_found');
      const byKey = await evaluate(intruder, { input: { action: 'a' } }, { 'x-warden-agent-key': 'private-agent-secret-0123456789' });
      expect(byKey.status).toBe(401);
      expect(byKey.body.error.code).toBe('invalid_agent_key');
    });

    it("never applies another workspace's policies", async () => {
      const strict = await freshWorkspace();
      await createPolicy(strict, { name: 'Block all', rules: [{ match: { action: ['*'] }, effect: 'block' }] });
      const other = await freshWorkspace();
      await createAgent(other, { name: 'Free', slug: 'free' });
      const res = await evaluate(other, { input: { action: 'anything', agent: 'free' } });
      expect(res.body.data).toMatchObject({ allowed: true, matched: false });
    });
  });
});
