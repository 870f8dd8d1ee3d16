import { readFileSync } from 'node:fs';
import { Agent as HttpAgent, request as httpRequest } from 'node:http';
import { gzipSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { keyFor, useTestServer } from '../support/server.ts';

const server = useTestServer();

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const MiB = 1024 * 1024;

/** Raw fetch, for when the exact bytes of the answer matter. */
async function raw(path: string, init: RequestInit = {}) {
  const res = await fetch(`${server.url}${path}`, init);
  return { status: res.status, headers: res.headers, text: await res.text() };
}

function expectStandardHeaders(headers: Headers) {
  const header = (name: string) => headers.get(name) ?? `(no ${name} header)`;
  expect(header('x-request-id')).toMatch(UUID);
  expect(header('x-response-time')).toMatch(/^\d+ms$/);
  expect(header('x-ratelimit-limit')).toMatch(/^\d+$/);
  expect(header('x-ratelimit-remaining')).toMatch(/^\d+$/);
  expect(header('x-ratelimit-reset')).toMatch(/^\d+$/);
  expect(header('ratelimit')).toMatch(/^"default";r=\d+;t=\d+$/);
  expect(header('ratelimit-policy')).toMatch(/^"default";q=\d+;w=60$/);
  expect(header('access-control-allow-origin')).toBe('*');
}

describe('GET /health (getHealth)', () => {
  it('answers 200 without a key, with status, database, version and time', async () => {
    const res = await server.api('GET', '/health', { key: null });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      data: { status: 'ok', database: 'ok', version: expect.any(String), time: expect.any(String) },
    });
    expect(res.body.data.version.length).toBeGreaterThan(0);
    expect(new Date(res.body.data.time).toISOString()).toBe(res.body.data.time);
    expect(Math.abs(Date.parse(res.body.data.time) - Date.now())).toBeLessThan(60_000);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
  });

  it('answers 200 with a key too', async () => {
    const res = await server.api('GET', '/health');
    expect(res.status).toBe(200);
    expect(res.body.data.status).toBe('ok');
  });
});

describe('standard response headers', () => {
  const huge = JSON.stringify({ name: 'big', provider: 'local', description: 'a'.repeat(MiB + 1024) });
  it.each([
    ['200 health without a key', () => server.api('GET', '/health', { key: null }), 200],
    ['200 list', () => server.api('GET', '/agents'), 200],
    ['201 create', () => server.api('POST', '/agents', { body: { name: 'Header bot', provider: 'local' } }), 201],
    ['400 invalid query', () => server.api('GET', '/agents?limit=1000'), 400],
    ['400 malformed JSON', () => server.api('POST', '/agents', { raw: '{"name":', headers: { 'content-type': 'application/json' } }), 400],
    ['401 no key', () => server.api('GET', '/agents', { key: null }), 401],
    ['401 unknown key', () => server.api('GET', '/agents', { key: 'wk_unknown_key_0123456789' }), 401],
    [
      '403 insufficient permission',
      async () => server.api('POST', '/policies', { body: { name: 'p' }, key: await keyFor(server, 'agents:read') }),
      403,
    ],
    ['404 not found', () => server.api('GET', '/agents/00000000-0000-4000-8000-000000000000'), 404],
    ['404 route not found', () => server.api('GET', '/no-such-route', { unchecked: true }), 404],
    ['405 method not allowed', () => server.api('PUT', '/agents', { body: { name: 'x', provider: 'local' }, unchecked: true }), 405],
    ['413 payload too large', () => server.api('POST', '/agents', { raw: huge, headers: { 'content-type': 'application/json' } }), 413],
    ['415 unsupported media type', () => server.api('POST', '/agents', { raw: 'name=x', headers: { 'content-type': 'text/plain' } }), 415],
  ] as const)('are on a %s response', async (_label, call, status) => {
    const res = await call();
    expect(res.status).toBe(status);
    expectStandardHeaders(res.headers);
  });

  it('gives every request its own X-Request-Id', async () => {
    const ids = new Set<string>();
    for (let i = 0; i < 3; i++) ids.add((await server.api('GET', '/health', { key: null })).headers.get('x-request-id') ?? '');
    expect(ids.size).toBe(3);
  });

  it('echoes a valid UUID sent as X-Request-Id', async () => {
    const id = '7f3c2a10-5b6d-4e8f-9a0b-1c2d3e4f5a6b';
    const res = await server.api('GET', '/agents', { headers: { 'x-request-id': id } });
    expect(res.headers.get('x-request-id')).toBe(id);
    const err = await server.api('GET', '/agents', { key: null, headers: { 'x-request-id': id } });
    expect(err.status).toBe(401);
    expect(err.headers.get('x-request-id')).toBe(id);
  });

  it.each([
    ['not a UUID', 'hello'],
    ['a header-injection attempt', 'abc\tdef'],
    ['a UUID with trailing text', '7f3c2a10-5b6d-4e8f-9a0b-1c2d3e4f5a6b-extra'],
    ['too long', 'x'.repeat(500)],
  ])('replaces an X-Request-Id that is %s with a fresh UUID', async (_label, id) => {
    const res = await server.api('GET', '/agents', { headers: { 'x-request-id': id } });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-request-id')).not.toBe(id);
    expect(res.headers.get('x-request-id')).toMatch(UUID);
  });
});

describe('authentication', () => {
  it('answers byte-identical 401 bodies for missing, malformed, unknown and revoked keys', async () => {
    const created = await server.admin('keys.create', { workspace: 'default', permissions: 'agents:read' });
    expect((await server.api('GET', '/agents', { key: created.key })).status).toBe(200);
    await server.admin('keys.revoke', { id: created.id });
    // revoked from outside the server's request path (as the CLI does): the server sees it when
    // the database's notification arrives, milliseconds later on PostgreSQL (key-cache.ts)
    for (let i = 0; i < 100 && (await server.api('GET', '/agents', { key: created.key })).status !== 401; i++) {
      await new Promise((resolve) => setTimeout(resolve, 20));
    }

    const variants: Array<[string, Record<string, string>]> = [
      ['missing', {}],
      ['empty', { authorization: '' }],
      ['scheme only', { authorization: 'Bearer' }],
      ['basic scheme', { authorization: 'Basic dXNlcjpwYXNz' }],
      ['key without scheme', { authorization: server.key }],
      ['two tokens', { authorization: `Bearer ${server.key} extra` }],
      ['unknown', { authorization: 'Bearer wk_this_key_was_never_issued_0123456789' }],
      ['revoked', { authorization: `Bearer ${created.key}` }],
    ];
    const answers = [];
    for (const [label, headers] of variants) {
      const res = await raw('/agents', { headers });
      expect(res.status, label).toBe(401);
      expectStandardHeaders(res.headers);
      answers.push({ label, text: res.text, type: res.headers.get('content-type'), length: res.headers.get('content-length') });
    }
    expect(JSON.parse(answers[0]?.text ?? '')).toEqual({ error: { code: 'unauthorized', message: 'A valid API key is required' } });
    for (const answer of answers) {
      expect(answer.text, answer.label).toBe(answers[0]?.text);
      expect(answer.type, answer.label).toBe(answers[0]?.type);
      expect(answer.length, answer.label).toBe(answers[0]?.length);
    }
  });

  it('answers 403 insufficient_permission for a key with only agents:read calling POST /policies', async () => {
    const key = await keyFor(server, 'agents:read');
    const res = await server.api('POST', '/policies', { body: { name: 'Not mine to write', enabled: true }, key });
    expect(res.status).toBe(403);
    expect(res.body.error.code).toBe('insufficient_permission');
    expect(typeof res.body.error.message).toBe('string');
  });
});

describe('routing and body errors', () => {
  it('answers 404 route_not_found for an unknown route with a key', async () => {
    for (const path of ['/no-such-route', '/agents/x/y/z', '/webhooks']) {
      const res = await server.api('GET', path, { unchecked: true });
      expect(res.status, path).toBe(404);
      expect(res.body.error.code, path).toBe('route_not_found');
      expect(typeof res.body.error.message).toBe('string');
    }
  });

  it('answers 401 unauthorized for an unknown route without a key', async () => {
    const res = await server.api('GET', '/no-such-route', { key: null, unchecked: true });
    expect(res.status).toBe(401);
    expect(res.body).toEqual({ error: { code: 'unauthorized', message: 'A valid API key is required' } });
  });

  it('answers JSON for an unknown route outside /api/v1', async () => {
    const res = await fetch(new URL('/elsewhere', server.url));
    expect(res.status).toBe(404);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    expect((await res.json()).error.code).toBe('route_not_found');
  });

  it.each([
    ['PUT', '/agents'],
    ['DELETE', '/agents'],
    ['POST', '/agents/00000000-0000-4000-8000-000000000000'],
    ['DELETE', '/approvals/00000000-0000-4000-8000-000000000000'],
    ['PATCH', '/health'],
  ])('answers 405 method_not_allowed for %s %s', async (method, path) => {
    const res = await server.api(method, path, { body: method === 'DELETE' ? undefined : { name: 'x' }, unchecked: true });
    expect(res.status).toBe(405);
    expect(res.body.error.code).toBe('method_not_allowed');
  });

  // The validator's operation lookup is kept per fixed path (validator.ts): every later request
  // to the path must still be validated, and another method still refused.
  it('validates every request to a path whose operation was already found: 201, then 400, 405, 400 for a bad query', async () => {
    const first = await server.api('POST', '/agents', { body: { name: 'Lookup One', provider: 'local' } });
    expect(first.status).toBe(201);
    const invalid = await server.api('POST', '/agents', {
      body: { name: 'Lookup Two', provider: 'local', unknown_field: 1 },
      unchecked: true,
    });
    expect(invalid.status).toBe(400);
    expect(invalid.body.error.code).toBe('invalid_request');
    const wrongMethod = await server.api('PUT', '/agents', { body: { name: 'x', provider: 'local' }, unchecked: true });
    expect(wrongMethod.status).toBe(405);
    for (const path of ['/agents?limit=0', '/agents?limit=abc', '/agents/?limit=0', '/agents?nope=1'] as const) {
      const res = await server.api('GET', path);
      expect(res.status, path).toBe(400);
      expect(res.body.error.code, path).toBe('invalid_request');
    }
    expect((await server.api('GET', '/agents?limit=1')).status).toBe(200);
    expect((await server.api('GET', '/agents/?limit=1')).status).toBe(200);
  });

  it('answers 400 invalid_request for malformed JSON', async () => {
    const res = await server.api('POST', '/agents', { raw: '{"name": "x", "provider": ', headers: { 'content-type': 'application/json' } });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('invalid_request');
    expect(typeof res.body.error.message).toBe('string');
  });

  it('answers 415 unsupported_media_type for a text/plain body', async () => {
    const res = await server.api('POST', '/agents', {
      raw: JSON.stringify({ name: 'Plain', provider: 'local' }),
      headers: { 'content-type': 'text/plain' },
    });
    expect(res.status).toBe(415);
    expect(res.body.error.code).toBe('unsupported_media_type');
    expect((await server.api('GET', '/agents/plain')).status).toBe(404);
  });

  it('answers 413 payload_too_large for a body over 1 MiB', async () => {
    const body = JSON.stringify({ name: 'Huge', provider: 'local', description: 'a'.repeat(MiB) });
    expect(body.length).toBeGreaterThan(MiB);
    const res = await server.api('POST', '/agents', { raw: body, headers: { 'content-type': 'application/json' } });
    expect(res.status).toBe(413);
    expect(res.body.error.code).toBe('payload_too_large');
  });

  it('answers 400 with a message of at most 2,000 characters when the message would quote a longer input', async () => {
    const res = await server.api('GET', `/agents?${'q'.repeat(3000)}=1`);
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('invalid_request');
    expect(res.body.error.message.length).toBeLessThanOrEqual(2000);
    expect(res.body.error.message).toMatch(/^\/query\/q+…$/);
  });

  it('answers 400, not 413, for a body just under 1 MiB that breaks the schema', async () => {
    const body = JSON.stringify({ name: 'Big', provider: 'local', description: 'a'.repeat(MiB - 200) });
    expect(body.length).toBeLessThan(MiB);
    const res = await server.api('POST', '/agents', { raw: body, headers: { 'content-type': 'application/json' } });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('invalid_request');
  });
});

describe('request bodies (the JSON body reader)', () => {
  /** POST /agents with the given bytes and headers, through node:http so any framing can be sent. */
  function postAgents(body: Buffer | string | null, headers: Record<string, string>, chunks?: Array<Buffer | string>) {
    return new Promise<{ status: number; body: any }>((resolve, reject) => {
      const url = new URL(`${server.url}/agents`);
      const req = httpRequest(
        {
          host: url.hostname,
          port: url.port,
          path: url.pathname,
          method: 'POST',
          headers: { authorization: `Bearer ${server.key}`, ...headers },
        },
        (res) => {
          let text = '';
          res.setEncoding('utf8');
          res.on('data', (c) => {
            text += c;
          });
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text ? JSON.parse(text) : undefined }));
        },
      );
      req.on('error', reject);
      for (const chunk of chunks ?? []) req.write(chunk);
      req.end(body ?? undefined);
    });
  }
  const agent = (name: string) => JSON.stringify({ name, provider: 'local' });

  it('createAgent accepts a gzip-encoded body (Content-Encoding: gzip)', async () => {
    const res = await postAgents(gzipSync(agent('Zipped')), { 'content-type': 'application/json', 'content-encoding': 'gzip' });
    expect(res.status).toBe(201);
    expect(res.body.data.slug).toBe('zipped');
  });

  it('createAgent accepts a body sent chunked, with a byte order mark and charset=UTF-8', async () => {
    const res = await postAgents(null, { 'content-type': 'application/json; charset="UTF-8"', 'transfer-encoding': 'chunked' }, [
      '\ufeff{"name":"Chu',
      'nked","provider":"local"}',
    ]);
    expect(res.status).toBe(201);
    expect(res.body.data.slug).toBe('chunked');
  });

  it('createAgent answers 415 unsupported_media_type for a charset other than UTF-8 and stores nothing', async () => {
    const res = await postAgents(agent('Latin'), { 'content-type': 'application/json; charset=latin1' });
    expect(res.status).toBe(415);
    expect(res.body.error).toEqual({ code: 'unsupported_media_type', message: expect.stringContaining('UTF-8') });
    expect((await server.api('GET', '/agents/latin')).status).toBe(404);
  });

  it('createAgent answers 415 unsupported_media_type for an unknown Content-Encoding', async () => {
    const res = await postAgents(agent('Packed'), { 'content-type': 'application/json', 'content-encoding': 'compress' });
    expect(res.status).toBe(415);
    expect(res.body.error.code).toBe('unsupported_media_type');
  });

  it('createAgent answers 400 invalid_request for a body that claims gzip but is not', async () => {
    const res = await postAgents(agent('Fake'), { 'content-type': 'application/json', 'content-encoding': 'gzip' });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('invalid_request');
  });

  it('createAgent answers 400 invalid_request for a JSON value that is not an object or array', async () => {
    for (const body of ['"text"', '42', 'null', 'true']) {
      const res = await postAgents(body, { 'content-type': 'application/json' });
      expect(res.status, body).toBe(400);
      expect(res.body.error.code, body).toBe('invalid_request');
    }
  });

  it('createAgent answers 400 invalid_request naming a missing field for an empty JSON body', async () => {
    const res = await postAgents('', { 'content-type': 'application/json', 'content-length': '0' });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('invalid_request');
    expect(res.body.error.message).toMatch(/name|provider/);
  });

  it('createAgent answers 413 payload_too_large for a chunked body over 1 MiB, and for a gzip body that inflates past it', async () => {
    const big = agent('a'.repeat(MiB));
    const chunked = await postAgents(null, { 'content-type': 'application/json', 'transfer-encoding': 'chunked' }, [
      big.slice(0, MiB / 2),
      big.slice(MiB / 2),
    ]);
    expect(chunked.status).toBe(413);
    expect(chunked.body.error.code).toBe('payload_too_large');
    const bomb = gzipSync(big);
    expect(bomb.length).toBeLessThan(MiB / 100);
    const zipped = await postAgents(bomb, { 'content-type': 'application/json', 'content-encoding': 'gzip' });
    expect(zipped.status).toBe(413);
    expect(zipped.body.error.code).toBe('payload_too_large');
  });

  it('keeps the connection usable after refusing a body (the next request on it is answered)', async () => {
    const agentOptions = new HttpAgent({ keepAlive: true, maxSockets: 1 });
    try {
      const url = new URL(`${server.url}/agents`);
      const send = (headers: Record<string, string>, body: string) =>
        new Promise<number>((resolve, reject) => {
          const req = httpRequest(
            {
              host: url.hostname,
              port: url.port,
              path: url.pathname,
              method: 'POST',
              agent: agentOptions,
              headers: { authorization: `Bearer ${server.key}`, ...headers },
            },
            (res) => {
              res.resume();
              res.on('end', () => resolve(res.statusCode ?? 0));
            },
          );
          req.on('error', reject);
          req.end(body);
        });
      expect(await send({ 'content-type': 'application/json; charset=latin1' }, agent('Refused'))).toBe(415);
      expect(await send({ 'content-type': 'application/json' }, agent('Next on the same socket'))).toBe(201);
    } finally {
      agentOptions.destroy();
    }
  });
});

describe('GET /api/v1/openapi.json', () => {
  it('serves the bundled spec', async () => {
    const res = await fetch(`${server.url}/openapi.json`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    const served = await res.json();
    expect(served.openapi).toBe('3.1.0');
    expect(served).toEqual(JSON.parse(readFileSync(new URL('../../spec/dist/openapi.json', import.meta.url), 'utf8')));
  });
});

describe('rate limiting', () => {
  const limited = useTestServer({ rateLimitPerMinute: 5 });

  it('counts down X-RateLimit-Remaining and answers the 6th request 429 rate_limited with Retry-After', async () => {
    const remaining: number[] = [];
    for (let i = 0; i < 5; i++) {
      const res = await limited.api('GET', '/agents');
      expect(res.status).toBe(200);
      expect(res.headers.get('x-ratelimit-limit')).toBe('5');
      expect(res.headers.get('ratelimit-policy')).toBe('"default";q=5;w=60');
      remaining.push(Number(res.headers.get('x-ratelimit-remaining')));
      const reset = Number(res.headers.get('x-ratelimit-reset'));
      expect(Number.isInteger(reset) && reset >= 0 && reset <= 60).toBe(true);
    }
    expect(remaining).toEqual([4, 3, 2, 1, 0]);

    const refused = await limited.api('GET', '/agents');
    expect(refused.status).toBe(429);
    expect(refused.body.error.code).toBe('rate_limited');
    expect(typeof refused.body.error.message).toBe('string');
    const retryAfter = refused.headers.get('retry-after') ?? '';
    expect(retryAfter).toMatch(/^\d+$/);
    expect(Number(retryAfter)).toBeGreaterThanOrEqual(1);
    expect(Number(retryAfter)).toBeLessThanOrEqual(60);
    expectStandardHeaders(refused.headers);
    expect(refused.headers.get('x-ratelimit-remaining')).toBe('0');
  });

  it('limits each key on its own', async () => {
    const other = await keyFor(limited, 'agents:read');
    const res = await limited.api('GET', '/agents', { key: other });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-ratelimit-remaining')).toBe('4');
  });
});
