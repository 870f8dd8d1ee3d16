/**
 * POST /policies and POST /policy/evaluate against policies that cost too much: each attack
 * that froze the shared event loop is refused when the policy is saved, or its decision fails
 * closed (400 evaluation_failed, audited as blocked) well within a second. And CEL conditions
 * cannot read an agent's key hash.
 */
import { readFileSync } from 'node:fs';
import type { AgentCreateWritable, EvaluationInput, PolicyCreate, PolicyRule } from '@warden/contract';
import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { keyFor, useTestServer } from '../support/server.ts';

const server = useTestServer();

const spec = JSON.parse(readFileSync(new URL('../../spec/dist/openapi.json', import.meta.url), 'utf8'));
const ALL = (spec.components.schemas.Permission.enum as string[]).join(',');
let workspaces = 0;
const freshWorkspace = () => keyFor(server, ALL, `limits-${++workspaces}`);

const createAgent = async (key: string, body: Omit<AgentCreateWritable, 'provider'>) => {
  const res = await server.api('POST', '/agents', { key, body: { provider: 'local', ...body } });
  expect(res.status).toBe(201);
};
const savePolicy = (key: string, body: PolicyCreate) => server.api('POST', '/policies', { key, body });
const evaluate = (key: string, input: EvaluationInput, headers?: Record<string, string>) =>
  server.api('POST', '/policy/evaluate', { key, body: { input }, headers });

/** An answer well within this proves the event loop was not frozen (the attacks took 2.8–9.1 s). */
const GENEROUS_MS = 1_000;

async function timed<T>(call: () => Promise<T>): Promise<{ result: T; ms: number }> {
  const t0 = performance.now();
  const result = await call();
  return { result, ms: performance.now() - t0 };
}

describe('policies that cost too much', () => {
  it('refuses matches() hidden from a text search by a comment and a line break, with its position', async () => {
    // `^(a+)+$` over 28 characters froze the server for 9.1 s per decision
    const key = await freshWorkspace();
    const res = await savePolicy(key, {
      name: 'Sneaky regex',
      rules: [{ id: 'redos', match: { action: ['x'] }, condition: 'context.s.matches // x\n("^(a+)+$")', effect: 'block' }],
    });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('invalid_policy');
    expect(res.body.error.message).toMatch(/^rules\[0\]\.condition: matches\(\) is not supported.* at position 10$/);
    expect((await server.api('GET', '/policies', { key })).body.data).toEqual([]);
  });

  it('refuses five nested all() comprehensions at save', async () => {
    // over 30-element lists they took 2.8 s per decision
    const key = await freshWorkspace();
    const res = await savePolicy(key, {
      name: 'Nested',
      rules: [
        {
          id: 'deep',
          condition: 'context.l.all(a, context.l.all(b, context.l.all(c, context.l.all(d, context.l.all(e, a + b + c + d + e >= 0.0)))))',
          effect: 'block',
        },
      ],
    });
    expect(res.status).toBe(400);
    expect(res.body.error).toEqual({
      code: 'invalid_policy',
      message:
        "rules[0] ('deep').condition: comprehensions (all, exists, exists_one, map, filter) may be nested at most 2 deep; this one nests 5 at position 68",
    });
  });

  it('answers 400 evaluation_failed within a second when nested comprehensions over large input lists exceed the budget, and audits it', async () => {
    const key = await freshWorkspace();
    await createAgent(key, { name: 'Looper', slug: 'looper' });
    const saved = await savePolicy(key, {
      name: 'Pairs',
      rules: [
        { id: 'pairs', match: { action: ['pairs.check'] }, condition: 'context.l.all(a, context.l.all(b, a + b >= 0.0))', effect: 'block' },
      ],
    });
    expect(saved.status).toBe(201);
    const l = Array.from({ length: 5_000 }, (_, i) => i); // 25 million steps
    const { result: res, ms } = await timed(() => evaluate(key, { action: 'pairs.check', agent: 'looper', context: { l } }));
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('evaluation_failed');
    expect(res.body.error.message).toMatch(/^condition of policy 'Pairs' failed: evaluation budget exceeded/);
    expect(ms).toBeLessThan(GENEROUS_MS);

    const events = (await server.api('GET', '/audit-logs?action=pairs.check', { key })).body.data;
    expect(events).toHaveLength(1);
    expect(events[0]).toMatchObject({ result: 'blocked', policy: 'Pairs', message: res.body.error.message });

    // the same policy decides a small input as usual
    const small = await evaluate(key, { action: 'pairs.check', agent: 'looper', context: { l: [1, 2, 3] } });
    expect(small.status).toBe(200);
    expect(small.body.data.result).toBe('blocked');
  });

  it('refuses the long-globs policy set at save (60 rules × 50 globs of 256 characters)', async () => {
    // 3 such policies against a 1,024-character resource took 8.2 s per decision
    const key = await freshWorkspace();
    const glob = (r: number, g: number) => `*${'?a'.repeat(126)}${String.fromCharCode(98 + ((r + g) % 20))}*`;
    const rules = Array.from(
      { length: 60 },
      (_, r): PolicyRule => ({
        match: { resource: Array.from({ length: 50 }, (_, g) => glob(r, g)) },
        effect: 'allow',
      }),
    );
    const res = await savePolicy(key, { name: 'Globs 1', rules });
    expect(res.status).toBe(400);
    expect(res.body.error).toEqual({
      code: 'invalid_policy',
      message: "a workspace may have at most 2,000 globs in all its policies; with this policy's 3,000 it would have 3,000",
    });
  });

  it('counts the workspace: a policy that would bring it over a limit is refused, and a change within it is saved', async () => {
    const key = await freshWorkspace();
    const rules = (count: number, tag: string) =>
      Array.from({ length: count }, (_, i): PolicyRule => ({ match: { tool: [`${tag}-${i}-*`] }, effect: 'allow' }));
    for (let p = 0; p < 9; p++) expect((await savePolicy(key, { name: `P${p}`, rules: rules(100, `p${p}`) })).status).toBe(201);
    expect((await savePolicy(key, { name: 'P9', rules: rules(50, 'p9') })).status).toBe(201);
    expect((await savePolicy(key, { name: 'P10', rules: rules(50, 'p10') })).status).toBe(201);
    const over = await savePolicy(key, { name: 'P11', rules: rules(1, 'p11') });
    expect(over.status).toBe(400);
    expect(over.body.error).toEqual({
      code: 'invalid_policy',
      message: "a workspace may have at most 1,000 rules in all its policies; with this policy's 1 it would have 1,001",
    });
    // replacing a policy's rules counts the other policies, not its old rules
    const replaced = await server.api('PATCH', '/policies/P9', { key, body: { rules: rules(50, 'q9') } });
    expect(replaced.status).toBe(200);
    const grown = await server.api('PATCH', '/policies/P9', { key, body: { rules: rules(51, 'r9') } });
    expect(grown.status).toBe(400);
    expect(grown.body.error.message).toBe(
      "a workspace may have at most 1,000 rules in all its policies; with this policy's 51 it would have 1,001",
    );
  });

  it('counts policies too: 1,000 per workspace, through a bundle or one by one, and a bundle that would pass it is refused whole', async () => {
    const key = await freshWorkspace();
    const names = Array.from({ length: 1000 }, (_, i) => `empty-${String(i).padStart(4, '0')}`);
    const filled = await server.api('POST', '/policies/bundle', { key, body: { policies: names.map((name) => ({ name })) } });
    expect(filled.status, JSON.stringify(filled.body)).toBe(200);
    expect(filled.body.data.created).toHaveLength(1000);
    const one = await savePolicy(key, { name: 'one too many' });
    expect(one.status).toBe(400);
    expect(one.body.error).toMatchObject({
      code: 'invalid_policy',
      message: 'a workspace may have at most 1,000 policies; it would have 1,001',
    });
    const more = await server.api('POST', '/policies/bundle', { key, body: { policies: [{ name: 'another' }] } });
    expect(more.status).toBe(400);
    expect(more.body.error.message).toBe('a workspace may have at most 1,000 policies; it would have 1,001');
    // replacing them is within the limit: pruned, the workspace keeps the bundle's one
    const pruned = await server.api('POST', '/policies/bundle', { key, body: { policies: [{ name: 'another' }], prune: true } });
    expect(pruned.status, JSON.stringify(pruned.body)).toBe(200);
    expect(pruned.body.data.deleted).toHaveLength(1000);
  });

  it('decides within a second on the worst glob set the limits admit and a 1,024-character resource', async () => {
    const key = await freshWorkspace();
    await createAgent(key, { name: 'Globber', slug: 'globber' });
    // 1,000 rules × 2 globs of 32 characters that each search the value: 2,000 globs, 64,000 characters
    for (let p = 0; p < 10; p++) {
      const rules = Array.from(
        { length: 100 },
        (): PolicyRule => ({
          match: { resource: [`*${'?a'.repeat(15)}b*`], tool: [`*${'a'.repeat(29)}b*`] },
          effect: 'allow',
        }),
      );
      expect((await savePolicy(key, { name: `G${p}`, rules })).status).toBe(201);
    }
    const { result: res, ms } = await timed(() =>
      evaluate(key, { action: 'read', agent: 'globber', resource: `${'a'.repeat(1023)}c`, tool: 'a'.repeat(256) }),
    );
    expect([200, 400]).toContain(res.status);
    if (res.status === 400) expect(res.body.error.code).toBe('evaluation_failed');
    expect(ms).toBeLessThan(GENEROUS_MS);
  });
});

describe('what CEL conditions see of the agent', () => {
  it('cannot read its key hash (a prefix was recovered through decisions), but sees the documented fields', async () => {
    const key = await freshWorkspace();
    const agentKey = 'keyed-agent-secret-0123456789abcdef';
    await createAgent(key, { name: 'Keyed', slug: 'keyed', api_key: agentKey, tags: ['ops'] });
    const probe = await savePolicy(key, {
      name: 'Hash probe',
      rules: [{ id: 'probe', condition: 'has(agent.api_key_hash) || has(agent.workspace_id)', effect: 'block' }],
    });
    expect(probe.status).toBe(201);
    const res = await evaluate(key, { action: 'probe' }, { 'x-warden-agent-key': agentKey });
    expect(res.status).toBe(200);
    expect(res.body.data).toMatchObject({ result: 'allowed', matched: false });

    const fields = await savePolicy(key, {
      name: 'Fields',
      rules: [
        {
          id: 'fields',
          condition: 'agent.slug == "keyed" && agent.provider == "local" && "ops" in agent.tags && agent.status == "active"',
          effect: 'block',
        },
      ],
    });
    expect(fields.status).toBe(201);
    const seen = await evaluate(key, { action: 'probe' }, { 'x-warden-agent-key': agentKey });
    expect(seen.body.data).toMatchObject({ result: 'blocked', policy: 'Fields' });
  });
});

describe('POST /policy/evaluate with a saved condition that no longer compiles', () => {
  it('answers 400 evaluation_failed for the decisions that reach the rule, audited, and decides the others', async () => {
    const key = await freshWorkspace();
    await createAgent(key, { name: 'legacy', slug: 'legacy' });
    const saved = await savePolicy(key, {
      name: 'legacy',
      rules: [{ id: 'old', match: { action: ['export.*'] }, condition: 'context.s.startsWith("a")', effect: 'block' }],
    });
    expect(saved.status).toBe(201);
    // as a policy saved before matches() was refused: written past the API's checks (the
    // trigger bumps the workspace's policy version, as for any policy change)
    await sql`UPDATE policies SET rules = ${JSON.stringify([
      { id: 'old', match: { action: ['export.*'] }, condition: 'context.s.matches("^(a+)+$")', effect: 'block' },
    ])}::jsonb, version = version + 1 WHERE id = ${saved.body.data.id}`.execute(server.database.db);
    const failed = await evaluate(key, { action: 'export.all', agent: 'legacy', context: { s: 'aaaa' } });
    expect(failed.status).toBe(400);
    expect(failed.body.error.code).toBe('evaluation_failed');
    expect(failed.body.error.message).toMatch(/no longer compiles/);
    const other = await evaluate(key, { action: 'read.one', agent: 'legacy' });
    expect(other.status).toBe(200);
    expect(other.body.data.allowed).toBe(true);
    const audit = await server.api('GET', '/audit-logs?action=export.all', { key });
    expect(audit.body.data.map((e: { result: string }) => e.result)).toEqual(['blocked']);
  });
});

describe('a decision context over 65,536 bytes of JSON', () => {
  it('answers 400 invalid_request on POST /policy/evaluate and POST /approvals, and records nothing', async () => {
    const key = await freshWorkspace();
    await createAgent(key, { name: 'big', slug: 'big' });
    const context = { l: Array.from({ length: 20_000 }, (_, i) => i) }; // ~109 KB
    const evaluated = await evaluate(key, { action: 'x', agent: 'big', context });
    expect(evaluated.status).toBe(400);
    expect(evaluated.body.error).toMatchObject({ code: 'invalid_request' });
    expect(evaluated.body.error.message).toMatch(/input\.context: at most 65,536 bytes/);
    const asked = await server.api('POST', '/approvals', { key, body: { title: 'big', agent: 'big', context } });
    expect(asked.status).toBe(400);
    expect(asked.body.error.code).toBe('invalid_request');
    const pinned = await server.api('POST', '/approvals', { key, body: { title: 'big', input: { action: 'x', agent: 'big', context } } });
    expect(pinned.status).toBe(400);
    const audit = await server.api('GET', '/audit-logs', { key });
    // the key's and the agent's creation are configuration events; no decision was recorded
    expect(audit.body.data.filter((event) => event.source !== 'configuration')).toEqual([]);
    const fits = await evaluate(key, { action: 'x', agent: 'big', context: { l: context.l.slice(0, 10_000) } });
    expect(fits.status).toBe(200);
  });
});
