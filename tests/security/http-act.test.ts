/**
 * The HTTP proxy decides on, binds approvals to, and sends one form of the act (issue 35,
 * attacks 2 and 6), tried as an attacker holding a key with runtime:execute would, against a
 * loopback upstream that records the raw request it received and resolves its path as a lax
 * server does (percent-decoding, `\` as `/`, path parameters dropped, slashes merged):
 * - headers are part of the act: policy sees them, an approval binds their names and values,
 *   the approver and the audit log see every name with credentials redacted;
 * - method and URL overrides (headers, `_method`) are refused before anything is decided;
 * - a path that an upstream could read as another path than the one decided on is refused.
 * Each failed before: a user's approval let an admin token through, an override header passed
 * a rule on DELETE, and `/x/..%2Fadmin/users` reached `/admin/users`.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { posix } from 'node:path';
import type { ExecutionRequest, HttpExecution, PolicyRule } from '@warden/contract';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { keyFor, useTestServer } from '../support/server.ts';

const ALL =
  'agents:read,agents:write,policies:read,policies:write,approvals:read,approvals:write,approvals:decide,audit:read,runtime:execute';

const server = useTestServer({ egressAllowlist: ['127.0.0.1/32'] });
let upstream: Server;
let origin: string;
interface Received {
  method: string;
  /** The request target exactly as it came on the wire. */
  raw: string;
  /** The path as a lax upstream resolves it. */
  resolved: string;
  headers: IncomingHttpHeaders;
  body: string;
}
const received: Received[] = [];

/** What a lax server makes of a raw path: `\` is `/`, escapes decoded, path parameters dropped, slashes merged, dot segments resolved. */
function laxResolve(raw: string): string {
  let path = (raw.split('?')[0] ?? '').replace(/\\/g, '/');
  try {
    path = decodeURIComponent(path);
  } catch {
    path = unescape(path);
  }
  path = path.replace(/\\/g, '/').replace(/;[^/]*/g, '');
  return posix.normalize(path.replace(/\/+/g, '/'));
}

beforeAll(async () => {
  upstream = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const raw = req.url ?? '';
    received.push({
      method: req.method ?? '',
      raw,
      resolved: laxResolve(raw),
      headers: req.headers,
      body: Buffer.concat(chunks).toString(),
    });
    res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}');
  });
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
  origin = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`;
});

afterAll(async () => {
  upstream?.closeAllConnections();
  await new Promise<void>((resolve) => (upstream ? upstream.close(() => resolve()) : resolve()));
});

async function workspace(rules: PolicyRule[]): Promise<string> {
  const key = await keyFor(server, ALL, `w${randomUUID().slice(0, 8)}`);
  expect((await server.api('POST', '/agents', { key, body: { name: 'bot', slug: 'bot', provider: 'local' } })).status).toBe(201);
  if (rules.length)
    expect((await server.api('POST', '/policies', { key, body: { name: 'guard', enabled: true, rules } })).status).toBe(201);
  return key;
}

const execute = (key: string, body: ExecutionRequest) => server.api('POST', '/runtime/execute', { key, body });
const http = (execution: Omit<HttpExecution, 'mode'>, approvalId?: string): ExecutionRequest => ({
  input: { action: 'http.request', agent: 'bot' },
  execution: { mode: 'http_proxy', ...execution },
  ...(approvalId ? { approval_id: approvalId } : {}),
});
async function auditEvents(key: string): Promise<any[]> {
  const res = await server.api('GET', '/audit-logs?limit=100', { key });
  expect(res.status).toBe(200);
  return res.body.data.filter((event: { source: string }) => event.source !== 'configuration');
}

describe('headers are part of the act', () => {
  const USER = 'Bearer USER-token-6f1c';
  const transfer = (headers: Record<string, string>, approvalId?: string) =>
    http({ method: 'POST', url: `${origin}/transfer`, headers, body: { amount: 10 } }, approvalId);

  it('binds an approval to the header names and values: another token or an added header is refused, nothing is sent', async () => {
    const key = await workspace([{ id: 'transfers', match: { path: ['/transfer'] }, effect: 'require_approval' }]);
    const asked = await execute(key, transfer({ Authorization: USER, 'X-Request-Note': 'rent' }));
    expect(asked.body.data.decision.result).toBe('approval_required');
    const id = asked.body.data.decision.approval_id as string;
    expect((await server.api('PATCH', `/approvals/${id}`, { key, body: { status: 'approved' } })).status).toBe(200);
    const sent = received.length;
    const others: Record<string, string>[] = [
      { Authorization: 'Bearer ADMIN-token', 'X-Request-Note': 'rent' },
      { Authorization: USER, 'X-Request-Note': 'rent', 'X-Act-As': 'admin' },
      { Authorization: USER, 'X-Request-Note': 'rent', Cookie: 'session=admin' },
      { Authorization: USER },
      { Authorization: USER, 'X-Request-Note': 'rent', 'Content-Type': 'text/plain' },
    ];
    for (const headers of others) {
      const res = await execute(key, transfer(headers, id));
      expect(res.status, JSON.stringify(headers)).toBe(400);
      expect(res.body.error.code).toBe('approval_invalid');
    }
    expect(received.length).toBe(sent);
    // the approved act itself, header names in another case and values with surrounding spaces
    const exact = await execute(key, transfer({ authorization: ` ${USER}`, 'x-request-note': 'rent ' }, id));
    expect(exact.body.data.allowed).toBe(true);
    expect(received.slice(sent)).toHaveLength(1);
    expect(received.at(-1)?.headers).toMatchObject({ authorization: USER, 'x-request-note': 'rent', 'content-type': 'application/json' });
  });

  it('shows the approver every header with credentials redacted, and the audit log never a secret', async () => {
    const key = await workspace([{ match: { path: ['/transfer'] }, effect: 'require_approval' }]);
    const headers = {
      Authorization: USER,
      'X-Api-Key': 'key-0a7d',
      Cookie: 'sid=cookie-5b2e',
      'X-Auth-Token': 'tok-77c1',
      'X-Request-Note': 'rent',
      Referer: `${origin}/from?access_token=ref-91d0&page=2`,
    };
    const asked = await execute(key, transfer(headers));
    const id = asked.body.data.decision.approval_id as string;
    const shown = await server.api('GET', `/approvals/${id}`, { key });
    expect(shown.body.data.execution?.headers).toEqual({
      authorization: 'Bearer [redacted]',
      'x-api-key': '[redacted]',
      cookie: '[redacted]',
      'x-auth-token': '[redacted]',
      'x-request-note': 'rent',
      referer: `${origin}/from?access_token=%5Bredacted%5D&page=2`,
      'content-type': 'application/json',
    });
    const listed = await server.api('GET', '/approvals?limit=100', { key });
    const events = await auditEvents(key);
    // the decision's event (beside it now: approval.requested, which names the act by digest)
    const decided = events.find((event) => event.context?.execution);
    expect(decided.context.execution.headers).toEqual(shown.body.data.execution?.headers);
    for (const secret of ['USER-token-6f1c', 'key-0a7d', 'cookie-5b2e', 'tok-77c1', 'ref-91d0'])
      expect(JSON.stringify([shown.body, listed.body, events]), secret).not.toContain(secret);
  });

  it('lets policy conditions read the headers as sent (lower-case names), and drops what never travels before deciding', async () => {
    const key = await workspace([
      {
        condition:
          'execution != null && "authorization" in execution.headers && execution.headers.authorization.startsWith("Bearer ADMIN")',
        effect: 'block',
        message: 'no admin tokens',
      },
      { condition: 'execution != null && "x-dropped" in execution.headers', effect: 'block', message: 'saw a dropped header' },
    ]);
    const get = (headers: Record<string, string>) => execute(key, http({ method: 'GET', url: `${origin}/me`, headers }));
    for (const name of ['Authorization', 'AUTHORIZATION', 'authorization'])
      expect((await get({ [name]: '  Bearer ADMIN-1' })).body.data, name).toMatchObject({
        allowed: false,
        decision: { message: 'no admin tokens' },
      });
    const sent = received.length;
    const ok = await get({ Authorization: USER, Connection: 'x-dropped', 'X-Dropped': '1', 'X-Warden-Agent': 'x' });
    expect(ok.body.data.allowed).toBe(true);
    const headers = received[sent]?.headers ?? {};
    expect(headers['x-dropped']).toBeUndefined();
    expect(headers['x-warden-agent']).toBeUndefined();
    expect(headers.authorization).toBe(USER);
  });

  it('refuses a header name given twice in different cases (400 invalid_execution)', async () => {
    const key = await workspace([]);
    const res = await execute(
      key,
      http({ method: 'GET', url: `${origin}/me`, headers: { Authorization: USER, authorization: 'Bearer ADMIN' } }),
    );
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('invalid_execution');
  });
});

describe('method and URL overrides are refused before anything is decided or sent', () => {
  const OVERRIDES = [
    'X-HTTP-Method-Override',
    'x-http-method',
    'X-Method-Override',
    'X-HTTP-METHOD-OVERRIDE',
    'X-Original-URL',
    'X-Rewrite-URL',
  ];

  it('refuses each override header with 400 invalid_execution naming it, with no rule at all, and records no decision', async () => {
    const key = await workspace([]);
    const sent = received.length;
    for (const name of OVERRIDES) {
      const res = await execute(key, http({ method: 'POST', url: `${origin}/items`, headers: { [name]: 'DELETE' } }));
      expect(res.status, name).toBe(400);
      expect(res.body.error.code).toBe('invalid_execution');
      expect(res.body.error.message).toContain(name);
    }
    expect(received.length).toBe(sent);
    expect(await auditEvents(key)).toEqual([]);
  });

  it('leaves no way around a rule blocking DELETE: override headers, _method in the query or the body', async () => {
    const key = await workspace([{ match: { method: ['DELETE'] }, effect: 'block', message: 'no deletes' }]);
    const sent = received.length;
    const attempts: Array<Omit<HttpExecution, 'mode'>> = [
      ...OVERRIDES.map((name) => ({ method: 'POST' as const, url: `${origin}/items/1`, headers: { [name]: 'DELETE' } })),
      { method: 'POST', url: `${origin}/items/1?_method=DELETE` },
      { method: 'GET', url: `${origin}/items/1?a=1&_METHOD=delete` },
      { method: 'POST', url: `${origin}/items/1?%5Fmethod=DELETE` },
      { method: 'POST', url: `${origin}/items/1?_%6Dethod=DELETE` },
      { method: 'POST', url: `${origin}/items/1`, body: { _method: 'DELETE', id: 1 } },
    ];
    for (const attempt of attempts) {
      const res = await execute(key, http(attempt));
      expect(res.status, JSON.stringify(attempt)).toBe(400);
      expect(res.body.error.code).toBe('invalid_execution');
    }
    const plain = await execute(key, http({ method: 'DELETE', url: `${origin}/items/1` }));
    expect(plain.body.data).toMatchObject({ allowed: false, decision: { message: 'no deletes' } });
    expect(received.length).toBe(sent);
    // a `_method` elsewhere is an ordinary value
    const ok = await execute(key, http({ method: 'POST', url: `${origin}/items?q=_method`, body: { note: { _method: 'x' } } }));
    expect(ok.body.data.allowed).toBe(true);
  });
});

describe('the path decided on is the path sent, and no upstream reads another', () => {
  const BLOCK_ADMIN: PolicyRule[] = [{ match: { path: ['/admin', '/admin/*'] }, effect: 'block', message: 'no admin' }];
  const ATTACKS = [
    '/x/..%2Fadmin/users',
    '/x/..%2fadmin/users',
    '/x/..%5cadmin/users',
    '/x/..%5Cadmin/users',
    '/x/..%2%46admin/users',
    '/x/..%%32%46admin/users',
    '/x/%2E%2E%2Fadmin/users',
    '/x/%2e%2e%2fadmin/users',
    '/x/%2e%2e/admin',
    '/x/.%2E/admin/users',
    '/x/..\\admin/users',
    '/x/..;/admin/users',
    '/x/..%3B/admin/users',
    '/admin;v=1/users',
    '//admin/users',
    '/x/%C0%AE%C0%AE/admin/users',
    '/x/..%C0%AFadmin/users',
    '/%61dmin/users',
    '/adm%00in/users',
    '/adm%0ain/users',
    '/adm%7Fin/users',
    '/adm\tin/users',
    '/adm\nin/users',
    '/adm\u0000in/users',
  ];

  it('refuses or blocks every encoding of /admin, and nothing that reaches the upstream resolves to /admin', async () => {
    const key = await workspace(BLOCK_ADMIN);
    const sent = received.length;
    for (const path of ATTACKS) {
      const res = await execute(key, http({ method: 'POST', url: `${origin}${path}` }));
      const outcome = res.status === 400 ? res.body.error.code : res.body.data?.decision?.result;
      // (a NUL in any JSON string is the input guard's 400 invalid_request)
      expect(['invalid_execution_url', 'blocked', 'invalid_request'], JSON.stringify(path)).toContain(outcome);
    }
    expect(received.slice(sent).map((r) => r.resolved)).toEqual([]);
  });

  it('names why: encoded separators, control characters, path parameters, empty segments, bytes that are not UTF-8', async () => {
    const key = await workspace([]);
    const why = async (path: string) => {
      const res = await execute(key, http({ method: 'GET', url: `${origin}${path}` }));
      expect(res.status, JSON.stringify(path)).toBe(400);
      expect(res.body.error.code).toBe('invalid_execution_url');
      return res.body.error.message as string;
    };
    expect(await why('/x/..%2Fadmin')).toMatch(/encoded \/ or \\/);
    expect(await why('/x/..%5cadmin')).toMatch(/encoded \/ or \\/);
    expect(await why('/a%1Fb')).toMatch(/control character/);
    await why('/a\rb'); // the contract's `format: uri` refuses it first
    expect(await why('/x/..;/admin')).toMatch(/;/);
    expect(await why('/x//admin')).toMatch(/empty path segment/);
    expect(await why('/x/%C0%AF')).toMatch(/UTF-8/);
    expect(await why('/x/..%2%46admin')).toMatch(/does not start an escape/);
  });

  it('sends double encodings and other escapes byte for byte as decided (the upstream decodes once: literal, not separators)', async () => {
    const key = await workspace(BLOCK_ADMIN);
    const cases: Array<[string, string]> = [
      ['/x/%252F..%252Fadmin/users', '/x/%252F..%252Fadmin/users'],
      ['/x/%25%32%46admin', '/x/%252Fadmin'],
      ['/files/%2561', '/files/%2561'],
      ['/%7Euser/%20keep?q=%2F', '/~user/%20keep?q=%2F'],
      ['/caf%c3%a9/a%2db', '/caf%C3%A9/a-b'],
      ['/public/../items', '/items'],
    ];
    for (const [path, raw] of cases) {
      const sent = received.length;
      const res = await execute(key, http({ method: 'GET', url: `${origin}${path}` }));
      expect(res.body.data?.allowed, path).toBe(true);
      expect(received.slice(sent).map((r) => r.raw)).toEqual([raw]);
      expect(received.at(-1)?.resolved.startsWith('/admin')).toBe(false);
    }
    const events = await auditEvents(key);
    const decided = events.filter((e) => e.context.outcome === undefined).map((e) => e.context.execution.path);
    expect(decided.sort()).toEqual(cases.map(([, raw]) => raw.split('?')[0]).sort());
  });
});
