/**
 * No secret in plaintext, neither in the database nor in the logs, after a full run of the
 * flows that handle secrets; and no difference between the 401 of an unknown key and that of
 * a revoked one.
 *
 * The flow runs against Warden as a child process (so its stdout/stderr — the logs, with
 * WARDEN_LOG_REQUESTS=true — are captured), on a temporary embedded database, or on a fresh
 * PostgreSQL database when DATABASE_URL is set:
 *   bootstrap key → `warden keys create` (an admin key) → an agent with its api_key → an
 *   agent with a key Warden generated (its create replayed; a decision; a gateway request) →
 *   `warden webhooks create` (https://hooks.example.com/x, paused at once and a delivery poll of
 *   an hour: nothing is ever sent to it) → decisions with the agent key → a dashboard login
 *   with the API key → a key created and revoked → requests that fail inside the server.
 * Then every table of the public schema is dumped as text (row_to_json) and searched for
 * each secret, as are the logs (and, on the embedded database, every file of its data
 * directory).
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ChildServer, childEnv, ROOT, randomKey, startChildServer } from '../reliability/support/child-server.ts';
import { freshDatabase } from '../support/database.ts';

const BASE_URL = process.env.DATABASE_URL;
/** What `npm run warden` runs: the CLI, built (tools/warden.mjs). */
const CLI = join(ROOT, 'tools/warden.mjs');

let dataEnv: Record<string, string>;
let dataDir: string | undefined;
let dropDatabase: (() => Promise<void>) | undefined;
let databaseUrl: string | undefined;
let server: ChildServer | undefined;
const bootstrapKey = randomKey('boot');
const secrets: Record<string, string> = {};
let tables: Record<string, string> = {};
let logs = '';
let dataFiles: { path: string; bytes: Buffer }[] = [];
const unauthorized: Record<string, { status: number; text: string; headers: string[] }> = {};

/** Runs the `warden` CLI against the same data (through the running server on the embedded database). */
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

async function call(
  method: string,
  path: string,
  options: { key?: string | null; body?: unknown; headers?: Record<string, string>; base?: string } = {},
) {
  const headers: Record<string, string> = { ...options.headers };
  if (options.key) headers.authorization = `Bearer ${options.key}`;
  if (options.body !== undefined) headers['content-type'] = 'application/json';
  const base = options.base ?? (server as ChildServer).url;
  const res = await fetch(`${base}${path}`, {
    method,
    headers,
    body: options.body === undefined ? undefined : JSON.stringify(options.body),
  });
  const text = await res.text();
  return {
    status: res.status,
    text,
    headers: res.headers,
    json: (() => {
      try {
        return JSON.parse(text);
      } catch {
        return undefined;
      }
    })(),
  };
}

/** What a secret may look like when stored carelessly: itself, its random part, the hex of its bytes. */
function variants(secret: string): string[] {
  const out = [secret];
  const random = secret.replace(/^(wk_(boot_|test_)?|whsec_|wak_[0-9a-f]{16}_)/, '');
  if (random !== secret && random.length >= 16) out.push(random);
  if (secret.startsWith('whsec_')) out.push(Buffer.from(random, 'base64').toString('hex'));
  return out;
}

function findings(haystack: string | Buffer): string[] {
  const hits: string[] = [];
  for (const [name, secret] of Object.entries(secrets)) {
    for (const variant of variants(secret))
      if (haystack.includes(variant)) hits.push(`${name} (${variant === secret ? 'whole' : 'variant'})`);
  }
  return hits;
}

async function dumpTables(query: (sql: string) => Promise<Record<string, unknown>[]>): Promise<Record<string, string>> {
  const names = (
    await query(
      "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE' ORDER BY table_name",
    )
  ).map((r) => String(r.table_name));
  const out: Record<string, string> = {};
  for (const name of names) {
    const rows = await query(`SELECT row_to_json(t)::text AS row FROM "${name.replace(/"/g, '""')}" t`);
    out[name] = rows.map((r) => String(r.row)).join('\n');
  }
  return out;
}

function filesUnder(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? filesUnder(path) : [path];
  });
}

beforeAll(async () => {
  if (BASE_URL) {
    const db = await freshDatabase(BASE_URL, 'warden_secrets');
    dropDatabase = db.drop;
    databaseUrl = db.url;
    dataEnv = { DATABASE_URL: db.url };
  } else {
    dataDir = mkdtempSync(join(tmpdir(), 'warden-secrets-'));
    dataEnv = { WARDEN_DATA_DIR: dataDir };
  }
  secrets.bootstrap = bootstrapKey;
  server = await startChildServer({
    env: {
      ...dataEnv,
      WARDEN_BOOTSTRAP_KEY: bootstrapKey,
      WARDEN_LOG_REQUESTS: 'true',
      WARDEN_WEBHOOK_POLL_MS: '3600000',
      WARDEN_AUDIT_SEAL_INTERVAL_MS: '200',
    },
  });

  // an API key with every permission (admin included), from the CLI
  const created = await warden(['keys', 'create', '--workspace', 'default', '--permissions', '*', '--name', 'secrets test']);
  secrets.apiKey = created.key;
  const key = created.key as string;

  // an agent with its own key
  secrets.agentKey = `agent-${randomKey('agent')}`;
  const agent = await call('POST', '/agents', {
    key,
    body: { name: 'Secret Agent', provider: 'local', slug: 'secret-agent', api_key: secrets.agentKey },
  });
  expect(agent.status).toBe(201);

  // an agent whose key Warden generated (created under an Idempotency-Key, and replayed), used
  // in a decision and as the MCP gateway's bearer
  const generated = async () =>
    call('POST', '/agents', { key, headers: { 'idempotency-key': 'generated' }, body: { name: 'Generated Agent', provider: 'local' } });
  const withGenerated = await generated();
  expect(withGenerated.status).toBe(201);
  const generatedKey: string = withGenerated.json.data.api_key;
  secrets.generatedAgentKey = generatedKey;
  expect(generatedKey).toMatch(/^wak_/);
  expect((await generated()).status).toBe(201);
  await call('POST', '/policy/evaluate', {
    key,
    headers: { 'x-warden-agent-key': generatedKey },
    body: { input: { action: 'files.read' } },
  });
  await call('POST', '/mcp/nowhere', {
    key: generatedKey,
    headers: { accept: 'application/json, text/event-stream' },
    body: { jsonrpc: '2.0', id: 1, method: 'tools/list' },
  });

  // a webhook endpoint: created, then paused at once (and the delivery poll is an hour): nothing is sent
  const hook = await warden(['webhooks', 'create', '--workspace', 'default', '--url', 'https://hooks.example.com/x', '--events', '*']);
  secrets.webhookSecret = hook.secret;
  await warden(['webhooks', 'pause', hook.id, '--workspace', 'default']);

  // decisions with the agent key
  for (let i = 0; i < 5; i++) {
    const res = await call('POST', '/policy/evaluate', {
      key,
      headers: { 'x-warden-agent-key': secrets.agentKey },
      body: { input: { action: 'orders.read', agent: 'secret-agent', resource: `orders/${i}` } },
    });
    expect(res.status).toBe(200);
  }
  const wrongAgentKey = await call('POST', '/policy/evaluate', {
    key,
    headers: { 'x-warden-agent-key': `${secrets.agentKey}-wrong` },
    body: { input: { action: 'orders.read' } },
  });
  expect(wrongAgentKey.status).toBe(401);

  // the dashboard: login with the API key, then use the session
  const dashboard = server.url.replace('/api/v1', '/dashboard/api');
  const login = await call('POST', '/session', { base: dashboard, body: { api_key: key } });
  expect(login.status).toBe(200);
  const cookie = (login.headers.get('set-cookie') ?? '').split(';')[0] as string;
  secrets.sessionToken = cookie.split('=')[1] as string;
  expect(secrets.sessionToken.length).toBeGreaterThan(20);
  expect((await call('GET', '/session', { base: dashboard, headers: { cookie } })).status).toBe(200);

  // a key that is revoked
  const doomed = await warden(['keys', 'create', '--workspace', 'default', '--permissions', 'agents:read,admin']);
  secrets.revokedKey = doomed.key;
  expect((await call('GET', '/agents', { key: doomed.key })).status).toBe(200);
  await warden(['keys', 'revoke', doomed.id]);

  // requests that fail inside the server (their errors are logged) while carrying secrets
  secrets.agentKeyOfFailedCreate = `agent-${randomKey('failed')}`;
  await call('POST', '/agents', { key, body: { name: 'Nul\u0000Agent', provider: 'local', api_key: secrets.agentKeyOfFailedCreate } });
  await call('GET', '/agents/%00', { key });
  await call('POST', '/policy/evaluate', {
    key,
    headers: { 'x-warden-agent-key': secrets.agentKey },
    body: { input: { action: 'x', agent: 'secret-agent', context: { note: '\u0000' } } },
  });

  // 401s: missing, malformed, unknown and revoked keys, on v1 and on the dashboard login
  const unknownKey = randomKey('unknown');
  for (const [label, auth] of [
    ['missing', null],
    ['malformed', 'Basic Zm9vOmJhcg=='],
    ['unknown', `Bearer ${unknownKey}`],
    ['revoked', `Bearer ${doomed.key}`],
  ] as const) {
    const res = await call('GET', '/agents', { headers: auth ? { authorization: auth } : {} });
    unauthorized[`v1 ${label}`] = { status: res.status, text: res.text, headers: [...res.headers.keys()].sort() };
  }
  for (const [label, apiKey] of [
    ['unknown', unknownKey],
    ['revoked', doomed.key as string],
  ] as const) {
    const res = await call('POST', '/session', { base: dashboard, body: { api_key: apiKey } });
    unauthorized[`dashboard ${label}`] = { status: res.status, text: res.text, headers: [...res.headers.keys()].sort() };
  }

  // stop (flushes the logs; frees the embedded data directory), then read everything
  await server.stop();
  logs = server.output();
  if (databaseUrl) {
    const client = new pg.Client({ connectionString: databaseUrl });
    await client.connect();
    try {
      tables = await dumpTables(async (sql) => (await client.query(sql)).rows);
    } finally {
      await client.end();
    }
  } else {
    const { PGlite } = await import('@electric-sql/pglite');
    const db = await PGlite.create(`${dataDir}/pgdata`);
    try {
      tables = await dumpTables(async (sql) => (await db.query<Record<string, unknown>>(sql)).rows);
    } finally {
      await db.close();
    }
    dataFiles = filesUnder(dataDir as string).map((path) => ({ path, bytes: readFileSync(path) }));
  }
}, 300_000);

afterAll(async () => {
  await server?.stop();
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  await dropDatabase?.();
});

describe(`secrets after a full run (${BASE_URL ? 'PostgreSQL' : 'embedded database'})`, () => {
  it('dumped every table of the database, with the flow’s rows in it', () => {
    const names = Object.keys(tables);
    const rows = Object.values(tables).reduce((n, t) => n + (t ? t.split('\n').length : 0), 0);
    const bytes = Object.values(tables).reduce((n, t) => n + t.length, 0);
    console.log(
      `[secrets] dumped ${names.length} tables, ${rows} rows, ${bytes} bytes of text; secrets searched: ${Object.keys(secrets).join(', ')}`,
    );
    expect(names).toEqual(expect.arrayContaining(['api_keys', 'agents', 'webhook_endpoints', 'dashboard_sessions']));
    expect(tables.api_keys).toContain(created('secrets test'));
    expect(tables.agents).toContain('secret-agent');
  });

  it('holds no API key, bootstrap key, agent key, webhook secret or session token in plaintext in any table', () => {
    const hits = Object.entries(tables).flatMap(([name, text]) => findings(text).map((hit) => `${name}: ${hit}`));
    expect(hits).toEqual([]);
  });

  it.skipIf(!!BASE_URL)('holds none of them in any file of the embedded data directory either', () => {
    console.log(
      `[secrets] searched ${dataFiles.length} files, ${dataFiles.reduce((n, f) => n + f.bytes.length, 0)} bytes of the data directory`,
    );
    const hits = dataFiles.flatMap((f) => findings(f.bytes).map((hit) => `${f.path}: ${hit}`));
    expect(hits).toEqual([]);
  });

  it('writes none of them to the server’s logs (stdout and stderr, with WARDEN_LOG_REQUESTS=true)', () => {
    console.log(`[secrets] server logs: ${logs.length} bytes, ${logs.split('\n').filter(Boolean).length} lines`);
    expect(logs).toContain('warden listening');
    expect(findings(logs)).toEqual([]);
  });

  it('answers unknown and revoked keys with the same status and byte-identical 401 bodies (and the same headers)', () => {
    const v1 = ['v1 missing', 'v1 malformed', 'v1 unknown', 'v1 revoked'].map((k) => unauthorized[k]);
    for (const answer of v1) {
      expect(answer?.status).toBe(401);
      expect(answer?.text).toBe(v1[2]?.text);
      expect(answer?.headers).toEqual(v1[2]?.headers);
    }
    expect(JSON.parse(v1[2]?.text as string)).toEqual({ error: { code: 'unauthorized', message: expect.any(String) } });
    const dash = [unauthorized['dashboard unknown'], unauthorized['dashboard revoked']];
    expect(dash[0]?.status).toBe(401);
    expect(dash[1]?.status).toBe(dash[0]?.status);
    expect(dash[1]?.text).toBe(dash[0]?.text);
    expect(dash[1]?.headers).toEqual(dash[0]?.headers);
  });
});

/** The JSON text of a column value, as row_to_json writes it. */
function created(name: string): string {
  return JSON.stringify(name);
}
