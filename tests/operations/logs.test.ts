/**
 * Structured logs (pino): Warden as a child process with WARDEN_LOG_LEVEL=debug (request lines
 * are written at debug unless WARDEN_LOG_REQUESTS=true) serves requests that carry known
 * secrets — the bootstrap key, an API key made by the CLI, an agent key, a dashboard session
 * cookie and CSRF token, a webhook endpoint's secret — and requests that fail. Then: every line
 * it wrote is one JSON object; each request has exactly one `request` line with its operation
 * id, status, duration, workspace id, key id and request id; and no secret appears anywhere.
 * The redaction list itself is checked on a logger writing to memory.
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../apps/server/src/logger.ts';
import { type ChildServer, childEnv, ROOT, randomKey, startChildServer } from '../reliability/support/child-server.ts';
import { freshDatabase } from '../support/database.ts';

const BASE_URL = process.env.DATABASE_URL;
/** What `npm run warden` runs: the CLI, built (tools/warden.mjs). */
const CLI = join(ROOT, 'tools/warden.mjs');

let server: ChildServer | undefined;
let dataDir: string | undefined;
let drop: (() => Promise<void>) | undefined;
let dataEnv: Record<string, string> = {};
const secrets: Record<string, string> = {};
/** Requests sent, by the X-Request-Id they carried: what their log line must say. */
const sent = new Map<string, { operation: string | null; status: number; authenticated: boolean }>();
let lines: string[] = [];

function warden(args: string[]): Promise<any> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, ...args, '--json'], {
      cwd: ROOT,
      env: childEnv(dataEnv),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (c) => {
      out += c;
    });
    child.stderr.on('data', (c) => {
      err += c;
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
    child.on('close', (code) => {
      clearTimeout(timer);
      if (code !== 0) return reject(new Error(`warden ${args.join(' ')} exited ${code}: ${err}`));
      resolve(JSON.parse(out.trim().split('\n').at(-1) as string));
    });
  });
}

/** One request, remembered with the operation and status its log line must carry. */
async function call(
  method: string,
  url: string,
  expected: { operation: string | null; authenticated: boolean },
  init: { key?: string; headers?: Record<string, string>; body?: unknown } = {},
) {
  const requestId = randomUUID();
  const headers: Record<string, string> = { 'x-request-id': requestId, ...init.headers };
  if (init.key) headers.authorization = `Bearer ${init.key}`;
  if (init.body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(url, { method, headers, body: init.body === undefined ? undefined : JSON.stringify(init.body) });
  const text = await res.text();
  sent.set(requestId, { ...expected, status: res.status });
  return { status: res.status, headers: res.headers, json: text.startsWith('{') ? JSON.parse(text) : undefined };
}

beforeAll(async () => {
  if (BASE_URL) {
    const db = await freshDatabase(BASE_URL, 'warden_logs');
    drop = db.drop;
    dataEnv = { DATABASE_URL: db.url };
  } else {
    dataDir = mkdtempSync(join(tmpdir(), 'warden-logs-'));
    dataEnv = { WARDEN_DATA_DIR: dataDir };
  }
  secrets.bootstrap = randomKey('boot');
  server = await startChildServer({
    env: { ...dataEnv, WARDEN_BOOTSTRAP_KEY: secrets.bootstrap, WARDEN_LOG_LEVEL: 'debug', WARDEN_WEBHOOK_POLL_MS: '3600000' },
  });
  const v1 = server.url;
  const dash = v1.replace('/api/v1', '/dashboard/api');

  const created = await warden(['keys', 'create', '--workspace', 'default', '--permissions', '*', '--name', 'logs test']);
  secrets.apiKey = created.key;
  const key = secrets.apiKey as string;
  secrets.agentKey = `agent-${randomKey('agent')}`;
  const agent = await call(
    'POST',
    `${v1}/agents`,
    { operation: 'createAgent', authenticated: true },
    { key, body: { name: 'Log Bot', provider: 'local', slug: 'log-bot', api_key: secrets.agentKey } },
  );
  expect(agent.status).toBe(201);
  for (let i = 0; i < 3; i++) {
    const res = await call(
      'POST',
      `${v1}/policy/evaluate`,
      { operation: 'evaluatePolicy', authenticated: true },
      {
        key: secrets.bootstrap,
        headers: { 'x-warden-agent-key': secrets.agentKey },
        body: { input: { action: 'orders.read', agent: 'log-bot' } },
      },
    );
    expect(res.status).toBe(200);
  }
  const wrongAgent = await call(
    'POST',
    `${v1}/policy/evaluate`,
    { operation: 'evaluatePolicy', authenticated: true },
    { key, headers: { 'x-warden-agent-key': `${secrets.agentKey}-x` }, body: { input: { action: 'orders.read', agent: 'log-bot' } } },
  );
  expect(wrongAgent.status).toBe(401);
  secrets.unknownKey = randomKey('unknown');
  expect((await call('GET', `${v1}/agents`, { operation: null, authenticated: false }, { key: secrets.unknownKey })).status).toBe(401);
  expect((await call('GET', `${v1}/health`, { operation: 'getHealth', authenticated: false })).status).toBe(200);
  expect((await call('GET', `${v1}/nowhere`, { operation: null, authenticated: true }, { key })).status).toBe(404);

  // the dashboard: a session (cookie and CSRF token), a webhook endpoint and its secret
  const login = await call('POST', `${dash}/session`, { operation: 'login', authenticated: false }, { body: { api_key: key } });
  expect(login.status).toBe(200);
  const cookie = (login.headers.get('set-cookie') ?? '').split(';')[0] as string;
  secrets.sessionToken = cookie.split('=')[1] as string;
  secrets.csrf = login.json.data.csrf_token;
  const session = { cookie, 'x-csrf-token': secrets.csrf as string };
  const hook = await call(
    'POST',
    `${dash}/webhooks`,
    { operation: 'createWebhookEndpoint', authenticated: true },
    { headers: session, body: { url: 'https://hooks.example.com/logs', events: ['*'] } },
  );
  expect(hook.status).toBe(201);
  secrets.webhookSecret = hook.json.data.secret;
  expect(secrets.webhookSecret).toMatch(/^whsec_/);

  await server.stop();
  expect(server.exitStatus()).toEqual({ code: 0, signal: null });
  lines = server
    .output()
    .split('\n')
    .filter((line) => line.trim() !== '');
}, 300_000);

afterAll(async () => {
  await server?.stop();
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  await drop?.();
});

describe(`server logs (${BASE_URL ? 'PostgreSQL' : 'embedded database'}, WARDEN_LOG_LEVEL=debug)`, () => {
  it('writes every line as one JSON object with level, time and message', () => {
    expect(lines.length).toBeGreaterThan(sent.size);
    const bad = lines.filter((line) => {
      try {
        const parsed = JSON.parse(line);
        return typeof parsed.level !== 'string' || typeof parsed.time !== 'string' || typeof parsed.message !== 'string';
      } catch {
        return true;
      }
    });
    expect(bad).toEqual([]);
  });

  it('writes one request line per request, with operation id, status, duration, workspace id, key id and request id', () => {
    const requests = lines.map((line) => JSON.parse(line)).filter((entry) => entry.message === 'request');
    for (const [requestId, expected] of sent) {
      const mine = requests.filter((entry) => entry.requestId === requestId);
      expect(mine, `request ${requestId} (${expected.operation})`).toHaveLength(1);
      const entry = mine[0];
      expect(entry.level).toBe('debug');
      expect(entry.operation).toBe(expected.operation);
      expect(entry.status).toBe(expected.status);
      expect(typeof entry.durationMs).toBe('number');
      expect(entry.durationMs).toBeGreaterThanOrEqual(0);
      if (expected.authenticated) {
        expect(entry.workspaceId).toMatch(/^[0-9a-f-]{36}$/);
        expect(entry.keyId).toMatch(/^[0-9a-f-]{36}$/);
      } else {
        expect(entry.keyId).toBeNull();
      }
      expect(entry.traceId).toBeUndefined(); // tracing is off
    }
  });

  it('writes none of the secrets the requests carried (keys, agent key, session, CSRF token, webhook secret)', () => {
    expect(Object.keys(secrets)).toEqual(
      expect.arrayContaining(['bootstrap', 'apiKey', 'agentKey', 'sessionToken', 'csrf', 'webhookSecret', 'unknownKey']),
    );
    const text = lines.join('\n');
    const found = Object.entries(secrets)
      .filter(([, secret]) => secret.length >= 16 && text.includes(secret))
      .map(([name]) => name);
    expect(found).toEqual([]);
  });
});

describe('the redaction list (LOG_REDACT_PATHS)', () => {
  const capture = () => {
    const chunks: string[] = [];
    const destination = new Writable({
      write(chunk, _encoding, done) {
        chunks.push(String(chunk));
        done();
      },
    });
    return {
      destination,
      lines: () =>
        chunks
          .join('')
          .trim()
          .split('\n')
          .map((l) => JSON.parse(l)),
    };
  };

  it('redacts secret fields and credential headers wherever a caller puts them', () => {
    const out = capture();
    const logger = createLogger(false, { destination: out.destination });
    logger.info('careless', {
      secret: 's-1',
      password: 'p-1',
      token: 't-1',
      key: 'k-1',
      api_key: 'a-1',
      keyId: 'kept',
      endpoint: { secret: 's-2', url: 'kept' },
      headers: { authorization: 'Bearer b-1', 'x-warden-agent-key': 'ag-1', cookie: 'c-1', accept: 'kept' },
      req: { headers: { authorization: 'Bearer b-2', 'x-warden-agent-key': 'ag-2', cookie: 'c-2' } },
    });
    const [line] = out.lines();
    const text = JSON.stringify(line);
    for (const secret of ['s-1', 'p-1', 't-1', 'k-1', 'a-1', 's-2', 'b-1', 'ag-1', 'c-1', 'b-2', 'ag-2', 'c-2'])
      expect(text, secret).not.toContain(secret);
    expect(line.keyId).toBe('kept');
    expect(line.endpoint.url).toBe('kept');
    expect(line.headers.accept).toBe('kept');
    expect(line.headers.authorization).toBe('[redacted]');
  });

  it('writes only lines at or above its level (WARDEN_LOG_LEVEL)', () => {
    const out = capture();
    const logger = createLogger(false, { level: 'error', destination: out.destination });
    logger.info('not written');
    logger.debug?.('not written either');
    logger.error('written', { cause: new Error('boom') });
    const lines = out.lines();
    expect(lines.map((l) => l.message)).toEqual(['written']);
    expect(lines[0].cause).toMatchObject({ name: 'Error', message: 'boom' });
    expect(logger.enabled?.('info')).toBe(false);
  });
});
