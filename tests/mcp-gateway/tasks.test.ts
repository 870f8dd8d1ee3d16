/**
 * MCP tasks through the gateway: a task-augmented tools/call is decided as the call itself,
 * then created upstream on an upstream session of the task's own, and the client knows the task
 * by an id of Warden's. tasks/get, tasks/result and tasks/cancel reach that session again (each
 * request attaches to it by its stored id, as any server process would); the task's end is
 * recorded once; another agent never reaches the task; the idle sweep spares the task's
 * session, and once the task expires the session is terminated with DELETE.
 */
import { readFileSync } from 'node:fs';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { CallToolResultSchema, CreateTaskResultSchema } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { keyFor, useTestServer } from '../support/server.ts';
import { type CountingUpstream, connectClient, eventually, startCountingUpstream } from './support.ts';

const spec = JSON.parse(readFileSync(new URL('../../spec/dist/openapi.json', import.meta.url), 'utf8'));
const ALL: string = spec.components.schemas.Permission.enum.join(',');
const IDLE_MS = 400;
// pooled upstream sessions end after IDLE_MS unused; the sweeps run every IDLE_MS / 2
const server = useTestServer({ egressAllowlist: ['127.0.0.1/32'], mcpUpstreamIdleMs: IDLE_MS, mcpApprovalWaitMs: 300 });
let upstream: CountingUpstream;
let workspaces = 0;
const clients: Client[] = [];
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

beforeAll(async () => {
  upstream = await startCountingUpstream();
});
afterAll(async () => {
  for (const client of clients) await client.close().catch(() => undefined);
  await upstream?.close();
});

interface Workspace {
  key: string;
  agentKeys: { bot: string; other: string };
  /** A client of agent `bot` (or `other`) on `/mcp/tools`, or on the aggregate `/mcp`. */
  client: (options?: { agent?: 'bot' | 'other'; aggregate?: boolean }) => Promise<Client>;
}

/** A workspace with the upstream registered as `tools`, agents `bot` and `other`, and these policies. */
async function workspace(policies: unknown[] = []): Promise<Workspace> {
  const key = await keyFor(server, ALL, `tasks-${++workspaces}`);
  const agentKeys = { bot: `ak_tasks_bot_${workspaces}_${Date.now()}`, other: `ak_tasks_other_${workspaces}_${Date.now()}` };
  const post = (path: string, body: unknown) => server.api('POST', path as '/agents', { key, body, unchecked: true });
  expect((await post('/mcp-servers', { name: 'tools', slug: 'tools', transport_url: upstream.url })).status).toBe(201);
  for (const [slug, apiKey] of Object.entries(agentKeys))
    expect((await post('/agents', { name: slug, slug, provider: 'local', api_key: apiKey })).status).toBe(201);
  for (const policy of policies) expect((await post('/policies', policy)).status).toBe(201);
  return {
    key,
    agentKeys,
    client: async ({ agent = 'bot', aggregate = false } = {}) => {
      const client = await connectClient(`${server.url}/mcp${aggregate ? '' : '/tools'}`, { authorization: `Bearer ${agentKeys[agent]}` });
      clients.push(client);
      return client;
    },
  };
}

const createTask = (client: Client, name: string, args: Record<string, unknown>, ttl = 60_000) =>
  client.request({ method: 'tools/call', params: { name, arguments: args, task: { ttl } } }, CreateTaskResultSchema);
const textOf = (result: unknown): string => (result as { content: { text?: string }[] }).content[0]?.text ?? '';
const callsOf = (tool: string) => upstream.calls().filter((c) => c.startsWith(`${tool}:`)).length;
const events = async (key: string) =>
  (await server.api('GET', '/audit-logs', { key, query: { action: 'mcp.call', limit: 100 }, unchecked: true })).body.data as {
    result: string;
    message: string;
    context: Record<string, unknown>;
  }[];

describe('tools/call with a task, through /mcp/{server}', { timeout: 60_000 }, () => {
  it('creates the task upstream and answers it under an id of its own; tasks/result answers its result', async () => {
    const ws = await workspace();
    const client = await ws.client();
    const before = callsOf('report');
    const { task } = await createTask(client, 'report', { topic: 'q3' });
    expect(task.taskId).toMatch(UUID);
    expect(task.status).toMatch(/^(working|completed)$/);
    expect(callsOf('report')).toBe(before + 1);
    const result = await client.experimental.tasks.getTaskResult(task.taskId, CallToolResultSchema);
    expect(textOf(result)).toBe('report on q3');
    expect(result._meta?.['io.modelcontextprotocol/related-task']).toEqual({ taskId: task.taskId });
    expect(await client.experimental.tasks.getTask(task.taskId)).toMatchObject({ taskId: task.taskId, status: 'completed' });
  });

  it('runs a task the way an unmodified client streams one (callToolStream): created, then its result', async () => {
    const client = await (await workspace()).client();
    // as such a client does: it learns from the listing which tools run as tasks
    await client.listTools();
    const kinds: string[] = [];
    let result: unknown;
    for await (const message of client.experimental.tasks.callToolStream({ name: 'slow_report', arguments: { topic: 'q4', ms: 300 } })) {
      kinds.push(message.type);
      if (message.type === 'result') result = message.result;
      if (message.type === 'error') throw message.error;
    }
    expect(kinds[0]).toBe('taskCreated');
    expect(kinds.at(-1)).toBe('result');
    expect(textOf(result)).toBe('slow report on q4');
  });

  it('records the decision, the task created, and its end once however often the result is asked for', async () => {
    const ws = await workspace();
    const client = await ws.client();
    const { task } = await createTask(client, 'report', { topic: 'audit' });
    await client.experimental.tasks.getTaskResult(task.taskId, CallToolResultSchema);
    await client.experimental.tasks.getTaskResult(task.taskId, CallToolResultSchema);
    await client.experimental.tasks.getTask(task.taskId);
    const mine = await events(ws.key);
    const created = mine.filter((e) => e.context.task_id === task.taskId && e.context.outcome === 'succeeded');
    const ended = mine.filter((e) => e.context.task_id === task.taskId && e.context.outcome === 'task_ended');
    expect(created).toHaveLength(1);
    expect(created[0]?.context.task_status).toMatch(/^(working|completed)$/);
    expect(ended).toHaveLength(1);
    expect(ended[0]).toMatchObject({ result: 'allowed', message: 'task ended' });
    // both name the decision that allowed the act
    expect(ended[0]?.context.decision_event_id).toBe(created[0]?.context.decision_event_id);
  });

  it('tasks/result waits for a task still working, and tasks/cancel cancels one upstream', async () => {
    const client = await (await workspace()).client();
    const slow = await createTask(client, 'slow_report', { topic: 'wait', ms: 400 });
    expect(slow.task.status).toBe('working');
    expect(textOf(await client.experimental.tasks.getTaskResult(slow.task.taskId, CallToolResultSchema))).toBe('slow report on wait');
    const long = await createTask(client, 'slow_report', { topic: 'never', ms: 60_000 });
    const cancelled = await client.experimental.tasks.cancelTask(long.task.taskId);
    expect(cancelled).toMatchObject({ taskId: long.task.taskId, status: 'cancelled' });
    expect(await client.experimental.tasks.getTask(long.task.taskId)).toMatchObject({ status: 'cancelled' });
  });
});

describe('a task-augmented tools/call of a tool that does not run as a task', { timeout: 60_000 }, () => {
  it('is refused (-32602) before anything is sent to run, and its session is ended', async () => {
    const client = await (await workspace()).client();
    const before = callsOf('echo');
    const opened = upstream.openedIds().length;
    await expect(createTask(client, 'echo', { text: 'as a task' })).rejects.toMatchObject({
      code: -32602,
      message: expect.stringContaining("Tool 'echo' does not run as a task (execution.taskSupport 'forbidden')"),
    });
    expect(callsOf('echo')).toBe(before);
    const [session] = upstream.openedIds().slice(opened);
    expect(session).toBeDefined();
    await eventually(() => (upstream.deletedIds().includes(session as string) ? true : undefined));
  });
});

describe('tasks through the aggregate /mcp', { timeout: 60_000 }, () => {
  it("creates a task by its namespaced name and reaches it by Warden's id", async () => {
    const client = await (await workspace()).client({ aggregate: true });
    const { task } = await createTask(client, 'tools__report', { topic: 'all' });
    expect(textOf(await client.experimental.tasks.getTaskResult(task.taskId, CallToolResultSchema))).toBe('report on all');
  });
});

describe('who reaches a task', { timeout: 60_000 }, () => {
  it('another agent of the workspace does not: tasks/get, tasks/result and tasks/cancel answer Task not found', async () => {
    const ws = await workspace();
    const { task } = await createTask(await ws.client(), 'slow_report', { topic: 'mine', ms: 60_000 });
    const other = await ws.client({ agent: 'other' });
    await expect(other.experimental.tasks.getTask(task.taskId)).rejects.toThrow(/Task not found/);
    await expect(other.experimental.tasks.getTaskResult(task.taskId, CallToolResultSchema)).rejects.toThrow(/Task not found/);
    await expect(other.experimental.tasks.cancelTask(task.taskId)).rejects.toThrow(/Task not found/);
    expect(await (await ws.client()).experimental.tasks.getTask(task.taskId)).toMatchObject({ status: 'working' });
  });

  it('an agent holds at most 100 live tasks, however many calls arrive at once: the rest are refused (-32600)', async () => {
    const ws = await workspace();
    const client = await ws.client();
    const settled = await Promise.allSettled(Array.from({ length: 110 }, (_, i) => createTask(client, 'report', { topic: `n${i}` })));
    expect(settled.filter((r) => r.status === 'fulfilled')).toHaveLength(100);
    const refused = settled.filter((r): r is PromiseRejectedResult => r.status === 'rejected').map((r) => r.reason);
    expect(refused).toHaveLength(10);
    for (const reason of refused) expect(reason).toMatchObject({ code: -32600, message: expect.stringContaining('holds 100 live tasks') });
    // another agent of the workspace has its own allowance
    expect((await createTask(await ws.client({ agent: 'other' }), 'report', { topic: 'mine' })).task.taskId).toMatch(UUID);
  });

  it("a task is reached on its own server's endpoint and the aggregate, not on another server's", async () => {
    const ws = await workspace();
    const { task } = await createTask(await ws.client(), 'slow_report', { topic: 'where', ms: 60_000 });
    const registered = await server.api('POST', '/mcp-servers', {
      key: ws.key,
      body: { name: 'same', slug: 'same', transport_url: upstream.url },
      unchecked: true,
    });
    expect(registered.status).toBe(201);
    expect(await (await ws.client({ aggregate: true })).experimental.tasks.getTask(task.taskId)).toMatchObject({ status: 'working' });
    const elsewhere = await connectClient(`${server.url}/mcp/same`, { authorization: `Bearer ${ws.agentKeys.bot}` });
    clients.push(elsewhere);
    await expect(elsewhere.experimental.tasks.getTask(task.taskId)).rejects.toThrow(/Task not found/);
  });

  it('an id that is no task, or not a UUID, is not found', async () => {
    const client = await (await workspace()).client();
    await expect(client.experimental.tasks.getTask('00000000-0000-4000-8000-000000000000')).rejects.toThrow(/Task not found/);
    await expect(client.experimental.tasks.getTask("x' OR 1=1 --")).rejects.toThrow(/Task not found/);
  });
});

describe('a task-augmented tools/call policy does not allow', { timeout: 60_000 }, () => {
  it('blocked: a JSON-RPC error naming the policy, and nothing is created upstream', async () => {
    const ws = await workspace([
      { name: 'No reports', rules: [{ match: { tool: ['report'] }, effect: 'block', message: 'reports are off' }] },
    ]);
    const before = callsOf('report');
    await expect(createTask(await ws.client(), 'report', { topic: 'q3' })).rejects.toThrow(/No reports.*reports are off|reports are off/);
    expect(callsOf('report')).toBe(before);
  });

  it('require_approval: held, then a JSON-RPC error naming the approval; created once it is approved', async () => {
    const ws = await workspace([{ name: 'Ask for reports', rules: [{ match: { tool: ['report'] }, effect: 'require_approval' }] }]);
    const client = await ws.client();
    const before = callsOf('report');
    const error = await createTask(client, 'report', { topic: 'ask' }).then(
      () => undefined,
      (e: { message: string; data?: Record<string, { id?: string }> }) => e,
    );
    expect(error?.message).toMatch(/Approval required/);
    const approvalId = error?.data?.['dev.agentwarden/approval']?.id as string;
    expect(approvalId).toMatch(UUID);
    expect(callsOf('report')).toBe(before);
    const patched = await server.api('PATCH', `/approvals/${approvalId}` as '/approvals/{id}', {
      key: ws.key,
      body: { status: 'approved' },
      unchecked: true,
    });
    expect(patched.status).toBe(200);
    const { task } = await createTask(client, 'report', { topic: 'ask' });
    expect(textOf(await client.experimental.tasks.getTaskResult(task.taskId, CallToolResultSchema))).toBe('report on ask');
    expect(callsOf('report')).toBe(before + 1);
  });
});

describe("a task's upstream session", { timeout: 60_000 }, () => {
  it('is its own, outlives the idle sweep while the task lives, and is terminated with DELETE once it expires', async () => {
    const ws = await workspace();
    const client = await ws.client();
    const openedBy = async (create: () => Promise<unknown>) => {
      const before = upstream.openedIds().length;
      const value = await create();
      return { value, sessions: upstream.openedIds().slice(before) };
    };
    // opened once the workspace's pooled session exists: whatever a task opens is its own
    await client.callTool({ name: 'echo', arguments: { text: 'warm' } });
    const live = await openedBy(() => createTask(client, 'slow_report', { topic: 'live', ms: 60_000 }, 60_000));
    const brief = await openedBy(() => createTask(client, 'slow_report', { topic: 'brief', ms: 60_000 }, 1_000));
    expect(live.sessions).toHaveLength(1);
    expect(brief.sessions).toHaveLength(1);
    const [liveSession, briefSession] = [live.sessions[0] as string, brief.sessions[0] as string];
    // past the brief task's expiry and several idle periods: its session ended, the live one's did not
    await eventually(() => (upstream.deletedIds().includes(briefSession) ? true : undefined), 10_000);
    await new Promise((resolve) => setTimeout(resolve, 3 * IDLE_MS));
    expect(upstream.deletedIds()).not.toContain(liveSession);
    const liveId = (live.value as { task: { taskId: string } }).task.taskId;
    expect(await client.experimental.tasks.getTask(liveId)).toMatchObject({ status: 'working' });
    const briefId = (brief.value as { task: { taskId: string } }).task.taskId;
    await expect(client.experimental.tasks.getTask(briefId)).rejects.toThrow(/Task not found/);
    // its end, which no request saw, is recorded by the sweep that ended it
    const expired = (await events(ws.key)).filter((e) => e.context.task_id === briefId && e.context.outcome === 'task_expired');
    expect(expired).toEqual([expect.objectContaining({ result: 'allowed', message: 'task expired' })]);
  });

  it('answers an error naming why once the upstream restarted and lost it (run last: it ends every session)', async () => {
    const client = await (await workspace()).client();
    const { task } = await createTask(client, 'slow_report', { topic: 'lost', ms: 60_000 });
    await upstream.restart();
    await expect(client.experimental.tasks.getTask(task.taskId)).rejects.toThrow(/no longer has this upstream session/);
  });
});
