/**
 * For the MCP gateway's tests: an SDK-built upstream (stateful Streamable HTTP on a loopback
 * port) that counts what it is sent — sessions opened, DELETEs, tool calls — and can restart
 * on the same port (forgetting its sessions); server-everything as a child process; and an
 * SDK Client connected to Warden.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import { type AddressInfo, connect } from 'node:net';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { InMemoryTaskStore } from '@modelcontextprotocol/sdk/experimental/tasks/stores/in-memory.js';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { afterAll, beforeAll } from 'vitest';
import { z } from 'zod';
import { type ChildServer, startChildServer } from '../reliability/support/child-server.ts';
import { readJson } from '../support/mcp-server.ts';
import type { TestServer } from '../support/server.ts';

export interface CountingUpstream {
  url: string;
  /** Sessions opened (initialize requests answered). */
  sessions: () => number;
  /** DELETE requests received (sessions terminated by the client). */
  deletes: () => number;
  /** Sessions currently open. */
  open: () => number;
  /** Ids of the sessions opened, in order, and of those a DELETE was received for. */
  openedIds: () => string[];
  deletedIds: () => string[];
  /** Tool calls received, as `tool:argumentsJSON`. */
  calls: () => string[];
  /** The method of every message POSTed, in order (requests and notifications alike). */
  methods: () => string[];
  /** Closes every connection and session and listens again on the same port, as a restarted server would. */
  restart: () => Promise<void>;
  close: () => Promise<void>;
}

function buildServer(calls: string[]): McpServer {
  const server = new McpServer(
    { name: 'counting-upstream', version: '1.0.0' },
    { capabilities: { logging: {}, tasks: { requests: { tools: { call: {} } } } }, taskStore: new InMemoryTaskStore() },
  );
  server.registerTool(
    'echo',
    {
      title: 'Echo',
      description: 'Echoes its text',
      inputSchema: { text: z.string() },
      annotations: { readOnlyHint: true, openWorldHint: false },
      _meta: { 'example.dev/origin': 'test' },
    },
    async ({ text }) => {
      calls.push(`echo:${JSON.stringify({ text })}`);
      return { content: [{ type: 'text', text }] };
    },
  );
  server.registerTool(
    'add',
    { description: 'Adds two numbers', inputSchema: { a: z.number(), b: z.number() }, outputSchema: { sum: z.number() } },
    async ({ a, b }) => {
      calls.push(`add:${JSON.stringify({ a, b })}`);
      return { content: [{ type: 'text', text: String(a + b) }], structuredContent: { sum: a + b } };
    },
  );
  server.registerTool('delete_everything', { description: 'Dangerous', annotations: { destructiveHint: true } }, async () => {
    calls.push('delete_everything:{}');
    return { content: [{ type: 'text', text: 'deleted' }] };
  });
  server.registerTool(
    'wait',
    { description: 'Answers after `ms` milliseconds, or when the call is cancelled', inputSchema: { ms: z.number() } },
    async ({ ms }, extra) => {
      calls.push(`wait:${JSON.stringify({ ms })}`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, ms);
        extra.signal.addEventListener('abort', () => {
          clearTimeout(timer);
          resolve();
        });
      });
      return { content: [{ type: 'text', text: extra.signal.aborted ? 'cancelled' : 'waited' }] };
    },
  );
  server.registerTool('countdown', { description: 'Reports progress three times', inputSchema: {} }, async (_args, extra) => {
    calls.push('countdown:{}');
    const token = extra._meta?.progressToken;
    for (let i = 1; i <= 3; i++) {
      if (token !== undefined)
        await extra.sendNotification({ method: 'notifications/progress', params: { progressToken: token, progress: i, total: 3 } });
    }
    return { content: [{ type: 'text', text: 'liftoff' }] };
  });
  // runs only as a task (execution.taskSupport 'required')
  server.experimental.tasks.registerToolTask(
    'report',
    { title: 'Report', description: 'Writes a report in the background', inputSchema: { topic: z.string() } },
    {
      async createTask({ topic }, { taskStore, taskRequestedTtl }) {
        calls.push(`report:${JSON.stringify({ topic })}`);
        const task = await taskStore.createTask({ ttl: taskRequestedTtl });
        await taskStore.storeTaskResult(task.taskId, 'completed', { content: [{ type: 'text', text: `report on ${topic}` }] });
        return { task };
      },
      getTask: (_args, { taskId, taskStore }) => taskStore.getTask(taskId),
      getTaskResult: (_args, { taskId, taskStore }) => taskStore.getTaskResult(taskId) as never,
    },
  );
  // a task that works for `ms` before it completes (cancellable meanwhile)
  server.experimental.tasks.registerToolTask(
    'slow_report',
    { description: 'Writes a report slowly', inputSchema: { topic: z.string(), ms: z.number() }, execution: { taskSupport: 'optional' } },
    {
      async createTask({ topic, ms }, { taskStore, taskRequestedTtl }) {
        calls.push(`slow_report:${JSON.stringify({ topic, ms })}`);
        const task = await taskStore.createTask({ ttl: taskRequestedTtl, pollInterval: 50 });
        setTimeout(() => {
          taskStore
            .storeTaskResult(task.taskId, 'completed', { content: [{ type: 'text', text: `slow report on ${topic}` }] })
            .catch(() => {
              // cancelled meanwhile: a terminal task keeps its status
            });
        }, ms).unref();
        return { task };
      },
      getTask: (_args, { taskId, taskStore }) => taskStore.getTask(taskId),
      getTaskResult: (_args, { taskId, taskStore }) => taskStore.getTaskResult(taskId) as never,
    },
  );
  server.registerResource(
    'greeting',
    'test://greeting',
    { title: 'Greeting', description: 'A greeting', mimeType: 'text/plain' },
    async (uri) => ({ contents: [{ uri: uri.href, text: 'hello', mimeType: 'text/plain' }] }),
  );
  server.registerResource('secret', 'test://secret', { mimeType: 'text/plain' }, async (uri) => ({
    contents: [{ uri: uri.href, text: 'the secret' }],
  }));
  server.registerPrompt('greet', { title: 'Greet', description: 'Greets someone', argsSchema: { name: z.string() } }, ({ name }) => ({
    messages: [{ role: 'user', content: { type: 'text', text: `Say hello to ${name}` } }],
  }));
  return server;
}

export async function startCountingUpstream(): Promise<CountingUpstream> {
  let transports = new Map<string, StreamableHTTPServerTransport>();
  const calls: string[] = [];
  let sessions = 0;
  let deletes = 0;
  const openedIds: string[] = [];
  const deletedIds: string[] = [];
  const methods: string[] = [];
  const handler = async (req: IncomingMessage, res: import('node:http').ServerResponse) => {
    try {
      const sessionId = req.headers['mcp-session-id'] as string | undefined;
      if (req.method === 'DELETE') {
        deletes += 1;
        if (sessionId) deletedIds.push(sessionId);
      }
      const body = req.method === 'POST' ? await readJson(req) : undefined;
      for (const message of (Array.isArray(body) ? body : [body]) as ({ method?: unknown } | undefined)[])
        if (typeof message?.method === 'string') methods.push(message.method);
      let transport = sessionId ? transports.get(sessionId) : undefined;
      if (!transport) {
        if (sessionId) {
          // a session this server does not have: 404, as the transport specification says
          res
            .writeHead(404, { 'content-type': 'application/json' })
            .end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32001, message: 'Session not found' }, id: null }));
          return;
        }
        const owner = transports;
        const created = new StreamableHTTPServerTransport({
          sessionIdGenerator: () => randomUUID(),
          onsessioninitialized: (id) => {
            sessions += 1;
            openedIds.push(id);
            owner.set(id, created);
          },
        });
        created.onclose = () => {
          if (created.sessionId) owner.delete(created.sessionId);
        };
        await buildServer(calls).connect(created);
        transport = created;
      }
      await transport.handleRequest(req, res, body);
    } catch (error) {
      if (!res.headersSent) res.writeHead(500).end(String(error));
    }
  };
  let http: Server = createServer(handler);
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  const { port } = http.address() as AddressInfo;
  const stop = async () => {
    const closing = [...transports.values()];
    transports = new Map();
    for (const t of closing) await t.close().catch(() => undefined);
    http.closeAllConnections();
    await new Promise<void>((resolve) => http.close(() => resolve()));
  };
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    sessions: () => sessions,
    deletes: () => deletes,
    open: () => transports.size,
    openedIds: () => [...openedIds],
    deletedIds: () => [...deletedIds],
    calls: () => [...calls],
    methods: () => [...methods],
    restart: async () => {
      await stop();
      http = createServer(handler);
      await new Promise<void>((resolve) => http.listen(port, '127.0.0.1', resolve));
    },
    close: stop,
  };
}

const EVERYTHING = new URL('../../node_modules/@modelcontextprotocol/server-everything/dist/index.js', import.meta.url).pathname;

async function freePort(): Promise<number> {
  const probe = createServer();
  await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
  const { port } = probe.address() as AddressInfo;
  await new Promise<void>((resolve) => probe.close(() => resolve()));
  return port;
}

const accepts = (port: number) =>
  new Promise<boolean>((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });

/** `@modelcontextprotocol/server-everything` in Streamable HTTP mode on a loopback port. */
export async function startEverything(): Promise<{ url: string; stop: () => Promise<void> }> {
  const port = await freePort();
  const child: ChildProcess = spawn(process.execPath, [EVERYTHING, 'streamableHttp'], {
    env: { ...process.env, PORT: String(port) },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    stderr += chunk.toString('utf8');
  });
  const deadline = Date.now() + 20_000;
  while (!(await accepts(port))) {
    if (child.exitCode !== null || Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`server-everything did not start on port ${port}: ${stderr}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    stop: async () => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 3_000);
      await exited;
      clearTimeout(timer);
    },
  };
}

/** An official SDK Client connected to Warden's gateway at `url` with these headers. */
export async function connectClient(url: string, headers: Record<string, string>): Promise<Client> {
  const client = new Client({ name: 'gateway-test', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } }));
  return client;
}

/** A raw JSON-RPC POST to an MCP endpoint as `bearer`, with these extra headers (a client's exact bytes, no SDK in between). */
export const postMcp = (url: string, bearer: string, body: unknown, headers: Record<string, string> = {}) =>
  fetch(url, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${bearer}`,
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      ...headers,
    },
    body: JSON.stringify(body),
  });

/** Polls `probe` until it answers something other than undefined (at most `ms`). */
export async function eventually<T>(probe: () => Promise<T | undefined> | T | undefined, ms = 10_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/**
 * A second Warden process on the test server's PostgreSQL database, as a deployment runs
 * several: started before the suite's tests, stopped after them. A process of its own (an
 * in-process second server would share the first one's module state), with the deployment's
 * `masterKey` (question ids and relayed messages are keyed by it). Call inside a suite that
 * needs DATABASE_URL; the returned function gives the running process.
 */
export function useSecondProcess(server: TestServer, masterKey: string): () => ChildServer {
  let other: ChildServer | undefined;
  beforeAll(async () => {
    const databaseUrl = String((server.database.pool?.options as { connectionString?: string } | undefined)?.connectionString);
    other = await startChildServer({
      env: {
        DATABASE_URL: databaseUrl,
        WARDEN_BOOTSTRAP_KEY: server.key,
        WARDEN_EGRESS_ALLOWLIST: '127.0.0.1/32',
        WARDEN_MASTER_KEY: masterKey,
      },
    });
  }, 180_000);
  afterAll(async () => {
    await other?.stop();
  });
  return () => other as ChildServer;
}
