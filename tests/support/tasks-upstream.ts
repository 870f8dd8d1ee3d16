/**
 * An upstream that speaks MCP 2026-07-28 with the tasks extension (`io.modelcontextprotocol/tasks`,
 * SEP-2663), built on the v2 SDK as a server author would: `createMcpHandler` for the revision's
 * wire, `tasks/get`, `tasks/update` and `tasks/cancel` registered with schemas of their own (the
 * SDK knows no tasks methods), tasks kept in memory. Its tools are the fixtures the official
 * suite's tasks scenarios name (greet, slow_compute, failing_job, protocol_error_job,
 * confirm_delete), so the suite can be run against it directly and through Warden.
 *
 * It is server-directed, as the extension says: a task-supporting tool called by a request that
 * declares the extension answers a task; the same call without the declaration runs to its end.
 * A task waiting for input (confirm_delete) names its question under a key used once.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { toNodeHandler } from '@modelcontextprotocol/node';
import { createMcpHandler, ProtocolError, Server, type ServerContext } from '@modelcontextprotocol/server';
import { z } from 'zod';

const TASKS = 'io.modelcontextprotocol/tasks';
const TTL_MS = 10 * 60_000;
const POLL_MS = 200;

type Status = 'working' | 'input_required' | 'completed' | 'failed' | 'cancelled';
interface StoredTask {
  taskId: string;
  status: Status;
  statusMessage?: string;
  createdAt: string;
  lastUpdatedAt: string;
  ttlMs: number;
  pollIntervalMs: number;
  result?: Record<string, unknown>;
  error?: { code: number; message: string };
  inputRequests?: Record<string, unknown>;
  /** Takes the answers of the outstanding question (confirm_delete). */
  answer?: (responses: Record<string, unknown>) => void;
  stop: AbortController;
}

export interface TasksUpstream {
  url: string;
  /** Every JSON-RPC method POSTed, with its `Mcp-Name` header. */
  requests: () => { method: string; mcpName: string | null; params: Record<string, unknown> }[];
  /** The tasks this upstream holds, by its own ids. */
  tasks: () => StoredTask[];
  close: () => Promise<void>;
}

const TOOLS = [
  { name: 'greet', description: 'Says hello (never a task)', inputSchema: { type: 'object', properties: { name: { type: 'string' } } } },
  {
    name: 'slow_compute',
    description: 'Sleeps `seconds`, then answers (a task when the client takes tasks)',
    inputSchema: { type: 'object', properties: { seconds: { type: 'number' }, label: { type: 'string' } } },
  },
  { name: 'failing_job', description: 'Ends with a tool error after a second', inputSchema: { type: 'object' } },
  { name: 'protocol_error_job', description: 'Ends with a JSON-RPC error', inputSchema: { type: 'object' } },
  { name: 'reuse_key', description: 'Asks two questions under one key (against the rules)', inputSchema: { type: 'object' } },
  {
    name: 'confirm_delete',
    description: 'Asks the user to confirm, then deletes',
    inputSchema: { type: 'object', properties: { path: { type: 'string' } } },
  },
];
const TASK_TOOLS = new Set(['slow_compute', 'failing_job', 'protocol_error_job', 'confirm_delete', 'reuse_key']);
/** Tools that run only as tasks: a request that cannot take one is refused -32021. */
const TASK_ONLY = new Set(['failing_job', 'protocol_error_job']);

const text = (value: string, isError = false) => ({ content: [{ type: 'text', text: value }], ...(isError ? { isError } : {}) });

/** Whether this request declared the tasks extension in its per-request capabilities. */
function declaresTasks(ctx: ServerContext): boolean {
  const envelope = (ctx.mcpReq.envelope ?? {}) as Record<string, unknown>;
  const capabilities = (envelope['io.modelcontextprotocol/clientCapabilities'] ?? envelope.clientCapabilities) as
    | { extensions?: Record<string, unknown> }
    | undefined;
  return capabilities?.extensions?.[TASKS] !== undefined;
}

const missingTasks = () =>
  new ProtocolError(-32021, 'Missing required client capability', { requiredCapabilities: { extensions: { [TASKS]: {} } } });

const sleep = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve, reject) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener('abort', () => {
      clearTimeout(timer);
      reject(signal.reason);
    });
  });

export async function startTasksUpstream(): Promise<TasksUpstream> {
  const tasks = new Map<string, StoredTask>();
  const requests: { method: string; mcpName: string | null; params: Record<string, unknown> }[] = [];

  const settle = (task: StoredTask, change: Partial<StoredTask>) => {
    if (['completed', 'failed', 'cancelled'].includes(task.status)) return;
    Object.assign(task, change, { lastUpdatedAt: new Date().toISOString() });
  };

  /** Puts the task in input_required with one form question under `key`; answers what the client answered. */
  const ask = async (task: StoredTask, key: string, message: string): Promise<unknown> => {
    const answers = await new Promise<Record<string, unknown>>((resolve) => {
      settle(task, {
        status: 'input_required',
        statusMessage: 'waiting for an answer',
        inputRequests: {
          [key]: {
            method: 'elicitation/create',
            params: {
              mode: 'form',
              message,
              requestedSchema: { type: 'object', properties: { confirm: { type: 'boolean' } }, required: ['confirm'] },
            },
          },
        },
        answer: (responses) => {
          if (responses[key] !== undefined) resolve(responses);
        },
      });
    });
    settle(task, { status: 'working', statusMessage: undefined, inputRequests: undefined, answer: undefined });
    return answers[key];
  };

  /** The work of a task-supporting tool: runs the same whether a task holds it or the request waits for it. */
  const work = async (tool: string, args: Record<string, unknown>, signal: AbortSignal, task?: StoredTask) => {
    switch (tool) {
      case 'slow_compute': {
        const seconds = typeof args.seconds === 'number' ? args.seconds : 1;
        await sleep(seconds * 1000, signal);
        return text(`computed ${String(args.label ?? '')} in ${seconds}s`);
      }
      case 'failing_job':
        await sleep(1000, signal);
        return text('the job failed', true);
      case 'protocol_error_job':
        await sleep(300, signal);
        throw new ProtocolError(-32603, 'the job broke');
      case 'confirm_delete': {
        if (!task) return text(`deleted ${String(args.path ?? '')} (no one was asked)`);
        const key = `confirm-${task.taskId.slice(0, 8)}`;
        const answer = (await ask(task, key, `Delete ${String(args.path ?? 'the file')}?`)) as {
          action?: string;
          content?: { confirm?: boolean };
        };
        return answer.action === 'accept' && answer.content?.confirm ? text(`deleted ${String(args.path ?? '')}`) : text('kept');
      }
      case 'reuse_key': {
        // an upstream that breaks the extension's rule: a second, other question under a key already answered
        if (!task) return text('no one was asked');
        await ask(task, 'q', 'May I read your calendar?');
        await ask(task, 'q', 'May I send mail as you?');
        return text('asked twice');
      }
      default:
        throw new ProtocolError(-32602, `Unknown tool: ${tool}`);
    }
  };

  const createTask = (tool: string, args: Record<string, unknown>): StoredTask => {
    const now = new Date().toISOString();
    const task: StoredTask = {
      taskId: crypto.randomUUID(),
      status: 'working',
      createdAt: now,
      lastUpdatedAt: now,
      ttlMs: TTL_MS,
      pollIntervalMs: POLL_MS,
      stop: new AbortController(),
    };
    tasks.set(task.taskId, task);
    work(tool, args, task.stop.signal, task).then(
      (result) => settle(task, { status: 'completed', result }),
      (error: unknown) =>
        task.stop.signal.aborted
          ? settle(task, { status: 'cancelled', statusMessage: 'cancelled by the client' })
          : settle(task, {
              status: 'failed',
              statusMessage: String((error as Error).message),
              error: { code: error instanceof ProtocolError ? error.code : -32603, message: String((error as Error).message) },
            }),
    );
    return task;
  };

  /** The task as the wire shows it: no answer hook, no controller. */
  const detailed = ({ answer: _answer, stop: _stop, ...task }: StoredTask) => task;
  const known = (taskId: string, ctx: ServerContext) => {
    if (!declaresTasks(ctx)) throw missingTasks();
    const task = tasks.get(taskId);
    if (!task) throw new ProtocolError(-32602, `Failed to retrieve task: Task not found (${taskId})`);
    return task;
  };

  const build = () => {
    const server = new Server(
      { name: 'tasks-upstream', version: '1.0.0' },
      { capabilities: { tools: {}, extensions: { [TASKS]: {} } } as never },
    );
    server.setRequestHandler('tools/list', async () => ({ tools: TOOLS }) as never);
    server.setRequestHandler('tools/call', async (request, ctx) => {
      const { name, arguments: args = {} } = request.params as { name: string; arguments?: Record<string, unknown> };
      if (name === 'greet') return text(`Hello, ${String(args.name ?? 'World')}!`) as never;
      if (!TASK_TOOLS.has(name)) throw new ProtocolError(-32602, `Unknown tool: ${name}`);
      if (declaresTasks(ctx)) {
        const { stop: _stop, answer: _answer, result: _result, error: _error, inputRequests: _inputs, ...task } = createTask(name, args);
        return { ...task, resultType: 'task' } as never;
      }
      if (TASK_ONLY.has(name)) throw missingTasks();
      return (await work(name, args, ctx.mcpReq.signal)) as never;
    });
    const taskId = z.object({ taskId: z.string() }).passthrough();
    server.setRequestHandler('tasks/get', { params: taskId }, async (params, ctx) => detailed(known(params.taskId, ctx)) as never);
    server.setRequestHandler('tasks/update', { params: taskId }, async (params, ctx) => {
      // the SDK lifts `inputResponses` out of the params, as it does for every request
      const { inputResponses } = ctx.mcpReq as { inputResponses?: Record<string, unknown> };
      const task = known(params.taskId, ctx);
      if (inputResponses) task.answer?.(inputResponses);
      return {} as never;
    });
    server.setRequestHandler('tasks/cancel', { params: taskId }, async (params, ctx) => {
      const task = known(params.taskId, ctx);
      if (!['completed', 'failed', 'cancelled'].includes(task.status)) {
        settle(task, { status: 'cancelled', statusMessage: 'cancelled by the client' });
        task.stop.abort();
      }
      return {} as never;
    });
    return server;
  };

  const modern = createMcpHandler(build, { legacy: 'reject' });
  const handler = toNodeHandler({
    fetch: async (request: Request) => {
      if (request.method === 'POST') {
        const body = (await request
          .clone()
          .json()
          .catch(() => undefined)) as { method?: unknown; params?: Record<string, unknown> } | undefined;
        if (typeof body?.method === 'string')
          requests.push({ method: body.method, mcpName: request.headers.get('mcp-name'), params: body.params ?? {} });
      }
      return modern.fetch(request);
    },
  });
  const http = createServer((req, res) => void handler(req, res));
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(http.address() as AddressInfo).port}/mcp`,
    requests: () => [...requests],
    tasks: () => [...tasks.values()],
    close: async () => {
      for (const task of tasks.values()) task.stop.abort();
      await modern.close();
      http.closeAllConnections();
      await new Promise<void>((resolve) => http.close(() => resolve()));
    },
  };
}
