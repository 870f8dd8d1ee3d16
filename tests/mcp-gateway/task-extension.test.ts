/**
 * The tasks extension of MCP 2026-07-28 (`io.modelcontextprotocol/tasks`, SEP-2663) through
 * Warden's gateway, in front of an upstream that makes tasks (tests/support/tasks-upstream.ts):
 * the official suite's tasks scenarios pass through Warden as they pass directly; a task's call
 * is decided and recorded as any call, its end once; its questions are decided for the agent
 * before the client sees them, and a refused one ends the task; another agent cannot reach it.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BearerProxies, type Checks, passedChecks, runConformance } from '../support/conformance-suite.ts';
import { useTestServer } from '../support/server.ts';
import { startTasksUpstream, type TasksUpstream } from '../support/tasks-upstream.ts';
import { until } from '../support/until.ts';

const server = useTestServer({ egressAllowlist: ['127.0.0.1/32'] });
const proxies = new BearerProxies();
let upstream: TasksUpstream;
const TASKS = 'io.modelcontextprotocol/tasks';
/** One run of one scenario, at most (each takes a few seconds). */
const RUN_TIMEOUT_MS = 90_000;

/** The suite's scenarios of the extension whose fixtures the upstream has. */
const SCENARIOS = [
  'tasks-lifecycle',
  'tasks-capability-negotiation',
  'tasks-wire-fields',
  'tasks-request-state-removal',
  'tasks-mrtr-input',
  'tasks-request-headers',
  'tasks-dispatch-and-envelope',
  'tasks-required-task-error',
];

const keys: Record<string, string> = {};
beforeAll(async () => {
  upstream = await startTasksUpstream();
  for (const slug of ['tasker', 'other']) {
    keys[slug] = `ak_${slug}_${Math.random().toString(36).slice(2)}`;
    expect((await server.api('POST', '/agents', { body: { name: slug, slug, provider: 'local', api_key: keys[slug] } })).status).toBe(201);
  }
  expect((await server.api('POST', '/mcp-servers', { body: { name: 'Tasks', slug: 'tasks', transport_url: upstream.url } })).status).toBe(
    201,
  );
});
afterAll(async () => {
  await proxies.close();
  await upstream?.close();
});

it('passes through Warden every check of the tasks scenarios the upstream passes directly', { timeout: 4 * RUN_TIMEOUT_MS }, async () => {
  const viaWarden = await proxies.open(`${server.url}/mcp/tasks`, keys.tasker as string);
  const run = async (url: string) => {
    const all: Checks = new Map();
    for (const scenario of SCENARIOS) for (const [id, check] of await runConformance(url, { scenario }, RUN_TIMEOUT_MS)) all.set(id, check);
    return all;
  };
  const [direct, warden] = await Promise.all([run(upstream.url), run(viaWarden)]);
  const directPassed = passedChecks(direct);
  const wardenPassed = new Set(passedChecks(warden));
  const lost = directPassed.filter((id) => !wardenPassed.has(id));
  console.log(`MCP tasks extension: directly ${directPassed.length} of ${direct.size} checks pass, through Warden ${wardenPassed.size}`);
  for (const id of lost) console.log(`  only directly: ${id} (${warden.get(id)?.status}: ${warden.get(id)?.error ?? ''})`);
  expect(directPassed.length).toBeGreaterThan(25);
  expect(lost).toEqual([]);
});

/** One JSON-RPC request of revision 2026-07-28 to Warden's endpoint for the tasks upstream. */
async function rpc(agent: string, method: string, params: Record<string, unknown>, takesTasks = true) {
  const name = String(method === 'tools/call' ? params.name : params.taskId);
  const res = await fetch(`${server.url}/mcp/tasks`, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${keys[agent]}`,
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      'mcp-protocol-version': '2026-07-28',
      'mcp-method': method,
      ...(method === 'tools/call' || method.startsWith('tasks/') ? { 'mcp-name': name } : {}),
    },
    body: JSON.stringify({
      jsonrpc: '2.0',
      id: 1,
      method,
      params: {
        ...params,
        _meta: {
          'io.modelcontextprotocol/protocolVersion': '2026-07-28',
          'io.modelcontextprotocol/clientInfo': { name: 'test', version: '1' },
          'io.modelcontextprotocol/clientCapabilities': {
            elicitation: { form: {} },
            ...(takesTasks ? { extensions: { [TASKS]: {} } } : {}),
          },
        },
      },
    }),
  });
  const text = await res.text();
  const data = text.startsWith('{') ? text : (/^data: (.*)$/m.exec(text)?.[1] ?? '{}');
  return JSON.parse(data) as { result?: Record<string, unknown>; error?: { code: number; message: string } };
}

/** Polls tasks/get for the agent's task until `done` holds for what it answers (bounded). */
const taskWhen = (what: string, taskId: unknown, done: (task: Record<string, unknown>) => boolean) =>
  until(
    what,
    async () => {
      const got = (await rpc('tasker', 'tasks/get', { taskId })).result as Record<string, unknown>;
      return done(got) ? got : undefined;
    },
    10_000,
  );

const auditOf = async (taskId: string) =>
  (await server.api('GET', '/audit-logs', { query: { limit: 100 } })).body.data.filter((event) =>
    JSON.stringify(event.context).includes(taskId),
  );

describe('a task through the gateway', () => {
  it('is decided and recorded as a call, shown under an id of Warden, its end recorded once', async () => {
    const before = new Set(upstream.tasks().map((t) => t.taskId));
    const created = await rpc('tasker', 'tools/call', { name: 'slow_compute', arguments: { seconds: 0.3 } });
    const task = created.result as Record<string, unknown>;
    expect(task.resultType).toBe('task');
    const made = upstream.tasks().filter((t) => !before.has(t.taskId));
    expect(made).toHaveLength(1);
    expect(made[0]?.taskId).not.toBe(task.taskId);
    const ended = await taskWhen('the task to end', task.taskId, (got) => got.status === 'completed');
    expect(ended.result).toMatchObject({ content: [{ type: 'text' }] });
    // the upstream is asked for its own task, named in Mcp-Name as the extension routes
    expect(upstream.requests().some((r) => r.method === 'tasks/get' && r.mcpName === made[0]?.taskId)).toBe(true);
    await rpc('tasker', 'tasks/get', { taskId: task.taskId });
    const events = await auditOf(task.taskId as string);
    expect(events.filter((e) => e.context.outcome === 'task_ended')).toHaveLength(1);
    expect(events.some((e) => e.context.task_id === task.taskId && e.context.task_status === 'working')).toBe(true);
  });

  it('is no other agent’s, and needs the extension declared', async () => {
    const task = (await rpc('tasker', 'tools/call', { name: 'slow_compute', arguments: { seconds: 5 } })).result as Record<string, unknown>;
    expect((await rpc('other', 'tasks/get', { taskId: task.taskId })).error?.code).toBe(-32602);
    expect((await rpc('tasker', 'tasks/get', { taskId: task.taskId }, false)).error?.code).toBe(-32021);
    expect((await rpc('tasker', 'tasks/cancel', { taskId: task.taskId })).result).toMatchObject({ resultType: 'complete' });
    const sync = (await rpc('tasker', 'tools/call', { name: 'slow_compute', arguments: { seconds: 0 } }, false)).result;
    expect(sync?.resultType).toBe('complete');
  });

  it('refuses a second question under a key already answered: a decision binds the question, not its key', async () => {
    const task = (await rpc('tasker', 'tools/call', { name: 'reuse_key', arguments: {} })).result as Record<string, unknown>;
    const first = await taskWhen('the task to ask or end', task.taskId, (got) => got.status !== 'working');
    expect(Object.keys(first.inputRequests as object)).toEqual(['q']);
    await rpc('tasker', 'tasks/update', { taskId: task.taskId, inputResponses: { q: { action: 'accept', content: { confirm: true } } } });
    const second = await taskWhen(
      'the second question',
      task.taskId,
      (got) => got.status === 'failed' || JSON.stringify(got.inputRequests ?? {}).includes('send mail'),
    );
    expect(second).toMatchObject({ status: 'failed', statusMessage: expect.stringContaining("key 'q'") });
    expect(JSON.stringify(second)).not.toContain('send mail');
  });

  it('shows a question only once it is decided, and a refused question ends the task', async () => {
    const ask = async (name = 'confirm_delete') => {
      const task = (await rpc('tasker', 'tools/call', { name, arguments: { path: '/tmp/x' } })).result as Record<string, unknown>;
      return taskWhen('the task to ask or end', task.taskId, (got) => got.status !== 'working');
    };
    const questions = async () =>
      (await server.api('GET', '/audit-logs', { query: { action: 'mcp.elicitation', view: 'acts', limit: 100 } })).body.data as {
        result: string;
      }[];
    const allowedBefore = (await questions()).filter((e) => e.result === 'allowed').length;
    const upstreamBefore = new Set(upstream.tasks().map((t) => t.taskId));
    const asked = await ask();
    const upstreamId = upstream.tasks().find((t) => !upstreamBefore.has(t.taskId))?.taskId;
    expect(asked.status).toBe('input_required');
    // asked again: the same question, not decided again
    expect((await rpc('tasker', 'tasks/get', { taskId: asked.taskId })).result?.inputRequests).toEqual(asked.inputRequests);
    const [key] = Object.keys(asked.inputRequests as object);
    // an answer to a question never asked is not sent upstream
    await rpc('tasker', 'tasks/update', { taskId: asked.taskId, inputResponses: { made_up: { action: 'accept' } } });
    await rpc('tasker', 'tasks/update', {
      taskId: asked.taskId,
      inputResponses: { [key as string]: { action: 'accept', content: { confirm: true } } },
    });
    // only the answer to the question asked went upstream
    const updates = upstream.requests().filter((r) => r.method === 'tasks/update' && r.params.taskId === upstreamId);
    expect(updates.map((r) => Object.keys(r.params.inputResponses as object))).toEqual([[key]]);
    const done = await taskWhen('the answered task to end', asked.taskId, (got) => got.status === 'completed');
    expect(JSON.stringify(done.result)).toContain('deleted /tmp/x');
    // the question was decided once, however often the task was polled meanwhile
    expect((await questions()).filter((e) => e.result === 'allowed')).toHaveLength(allowedBefore + 1);

    const policy = await server.api('POST', '/policies', {
      body: { name: 'No questions', rules: [{ match: { action: ['mcp.elicitation'] }, effect: 'block' }] },
      unchecked: true,
    });
    expect(policy.status).toBe(201);
    try {
      const before = new Set(upstream.tasks().map((t) => t.taskId));
      const refused = await ask();
      expect(refused).toMatchObject({ status: 'failed', error: { code: -32003 } });
      expect(refused.inputRequests).toBeUndefined();
      // the refused task itself is cancelled upstream, and stays failed for its client
      const mine = upstream.tasks().find((t) => !before.has(t.taskId));
      await until('the refused task to be cancelled upstream', () => mine?.status === 'cancelled', 10_000);
      expect((await rpc('tasker', 'tasks/get', { taskId: refused.taskId })).result).toMatchObject({ status: 'failed' });
      expect((await questions()).some((e) => e.result === 'blocked')).toBe(true);
    } finally {
      await server.api('DELETE', `/policies/${policy.body.id}`, { unchecked: true });
    }
  });
});
