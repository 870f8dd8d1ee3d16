/**
 * POST /runtime/execute (executeRuntime) over http_proxy: what reaches the upstream (method, body,
 * headers: forwarded, dropped, never Warden's keys) and what comes back (JSON, text, base64, none,
 * truncated, a redirect as is), and 502 execution_failed when the upstream fails. Shared set-up:
 * ./support/runtime-execute.ts.
 */
import { describe, expect, it } from 'vitest';
import {
  AGENT_KEY,
  BINARY,
  closedPort,
  FIVE_MIB,
  HTTP_RESULT_FIELDS,
  httpResult,
  RESULT_FIELDS,
  useRuntimeExecute,
} from './support/runtime-execute.ts';

const { server, upstream, upstream6, execute, http, seen } = useRuntimeExecute();

describe('POST /runtime/execute (executeRuntime)', () => {
  describe('http_proxy', () => {
    it('executes an allowed request and answers the decision and the upstream JSON', async () => {
      const { result: res, requests } = await seen(() => execute(http('/json')));
      expect(res.status).toBe(200);
      const data = res.body.data;
      const execution = httpResult(res);
      expect(Object.keys(data).sort()).toEqual(['allowed', 'decision', 'execution']);
      expect(data.allowed).toBe(true);
      for (const field of RESULT_FIELDS) expect(data.decision).toHaveProperty(field);
      expect(data.decision).toMatchObject({
        allowed: true,
        action: 'allow',
        matched: false,
        policy: null,
        result: 'allowed',
        approval_id: null,
        execution_proxy_required: false,
      });
      expect(Object.keys(execution).sort()).toEqual([...HTTP_RESULT_FIELDS].sort());
      expect(data.execution).toMatchObject({
        mode: 'http_proxy',
        status: 200,
        body: { hello: 'world', n: [1, 2, 3] },
        body_encoding: 'json',
        truncated: false,
      });
      expect(execution.headers['content-type']).toBe('application/json; charset=utf-8');
      expect(execution.headers['x-upstream']).toBe('yes');
      expect(Number.isInteger(execution.duration_ms)).toBe(true);
      expect(execution.duration_ms).toBeGreaterThanOrEqual(0);
      expect(requests).toHaveLength(1);
      expect(requests[0]).toMatchObject({ method: 'GET', path: '/json', body: '' });
    });

    it('passes on the upstream status as data, not as the response status', async () => {
      const notFound = await execute(http('/missing'));
      expect(notFound.status).toBe(200);
      expect(notFound.body.data.execution).toMatchObject({ status: 404, body: { error: 'nope' }, body_encoding: 'json' });
      const created = await execute(http('/created', { method: 'PUT', body: { x: 1 } }));
      expect(created.body.data.execution).toMatchObject({ status: 201, body: { created: true } });
    });

    it('returns a text body as text, a binary body as base64 and an empty body as none', async () => {
      const text = await execute(http('/text'));
      expect(text.status).toBe(200);
      expect(text.body.data.execution).toMatchObject({ status: 200, body: 'plain words', body_encoding: 'text', truncated: false });

      const binary = await execute(http('/binary'));
      expect(binary.status).toBe(200);
      expect(httpResult(binary).body_encoding).toBe('base64');
      expect(Buffer.from(String(httpResult(binary).body), 'base64').equals(BINARY)).toBe(true);

      const empty = await execute(http('/empty'));
      expect(empty.status).toBe(200);
      expect(empty.body.data.execution).toMatchObject({ status: 204, body_encoding: 'none', truncated: false });
      expect(httpResult(empty).body ?? null).toBeNull();
    });

    it('sends a JSON body as application/json and no body for null', async () => {
      const body = { order: 42, items: [{ sku: 'a', qty: 2 }], note: 'héllo' };
      const { requests } = await seen(() => execute(http('/echo', { method: 'POST', body }, { action: 'http.post' })));
      expect(requests).toHaveLength(1);
      expect(requests[0]?.method).toBe('POST');
      expect(requests[0]?.headers['content-type']).toMatch(/^application\/json/);
      expect(JSON.parse(requests[0]?.body ?? '')).toEqual(body);
      expect(Number(requests[0]?.headers['content-length'])).toBe(Buffer.byteLength(requests[0]?.body ?? ''));

      const { requests: none } = await seen(() => execute(http('/echo', { method: 'POST', body: null }, { action: 'http.post' })));
      expect(none).toHaveLength(1);
      expect(none[0]?.body).toBe('');
    });

    it('forwards request headers except hop-by-hop, Host, Content-Length and X-Warden-*', async () => {
      const headers = {
        'X-Custom': 'custom-value',
        Accept: 'application/json',
        'X-Api-Token': 'upstream-credential',
        'Keep-Alive': 'timeout=99',
        'Proxy-Authorization': 'Basic cHJveHk6c2VjcmV0',
        'Proxy-Connection': 'keep-alive',
        TE: 'trailers',
        Trailer: 'X-Checksum',
        Upgrade: 'websocket',
        'Transfer-Encoding': 'chunked',
        Host: 'evil.example.com',
        'Content-Length': '999',
        'X-Warden-Agent-Key': 'forged-agent-key',
        'x-warden-debug': 'on',
      };
      const { result: res, requests } = await seen(() =>
        execute(http('/json', { method: 'POST', body: { a: 1 }, headers }, { action: 'http.post' })),
      );
      expect(res.status).toBe(200);
      expect(requests).toHaveLength(1);
      const got = requests[0]?.headers ?? {};
      expect(got['x-custom']).toBe('custom-value');
      expect(got.accept).toBe('application/json');
      expect(got['x-api-token']).toBe('upstream-credential');
      for (const name of [
        'keep-alive',
        'proxy-authorization',
        'proxy-connection',
        'te',
        'trailer',
        'upgrade',
        'transfer-encoding',
        'x-warden-agent-key',
        'x-warden-debug',
      ]) {
        expect(got, name).not.toHaveProperty(name);
      }
      expect(got.host).toBe(`127.0.0.1:${upstream.port}`);
      expect(got['content-length']).toBe(String(Buffer.byteLength(requests[0]?.body ?? '')));
      expect(JSON.stringify(requests[0])).not.toContain('evil.example.com');
      expect(JSON.stringify(requests[0])).not.toContain('timeout=99');
    });

    it('does not forward the headers the caller names in Connection (hop-by-hop by declaration)', async () => {
      const { result: res, requests } = await seen(() =>
        execute(http('/json', { headers: { Connection: 'X-Hop-Secret', 'X-Hop-Secret': 'do-not-forward', 'X-Kept': 'kept' } })),
      );
      expect(res.status).toBe(200);
      expect(requests).toHaveLength(1);
      expect(requests[0]?.headers['x-kept']).toBe('kept');
      expect(requests[0]?.headers).not.toHaveProperty('x-hop-secret');
    });

    it('never lets a header value carrying CR/LF inject a header or a request upstream', async () => {
      const { result: res, requests } = await seen(() => execute(http('/json', { headers: { 'X-Note': 'a\r\nX-Injected: yes' } })));
      expect(res.status).not.toBe(200);
      expect(requests).toEqual([]);
      expect(JSON.stringify(upstream.requests)).not.toContain('X-Injected');
      expect(upstream.requests.some((r) => 'x-injected' in r.headers)).toBe(false);
    });

    it('refuses a header value carrying CR/LF with 400 invalid_execution (the caller erred, not the upstream)', async () => {
      const res = await execute(http('/json', { headers: { 'X-Note': 'a\r\nX-Injected: yes' } }));
      expect(res.status).toBe(400);
      expect(res.body.error.code).toBe('invalid_execution');
    });

    it("never lets Warden's own Authorization or the agent key reach the upstream", async () => {
      const { requests } = await seen(async () => {
        expect((await execute(http('/json'))).status).toBe(200);
        const keyed = await execute(http('/json', {}, { agent: 'keyed-bot' }), { headers: { 'x-warden-agent-key': AGENT_KEY } });
        expect(keyed.status).toBe(200);
        expect(keyed.body.data.allowed).toBe(true);
      });
      expect(requests).toHaveLength(2);
      for (const request of requests) {
        expect(request.headers).not.toHaveProperty('authorization');
        expect(request.headers).not.toHaveProperty('x-warden-agent-key');
      }
      const everything = JSON.stringify(upstream.requests);
      expect(everything).not.toContain(server.key);
      expect(everything).not.toContain(AGENT_KEY);
    });

    it('forwards an Authorization header the caller puts in execution.headers, never the workspace key', async () => {
      const { requests } = await seen(() => execute(http('/json', { headers: { Authorization: 'Bearer upstream-token' } })));
      expect(requests).toHaveLength(1);
      expect(requests[0]?.headers.authorization).toBe('Bearer upstream-token');
      expect(JSON.stringify(requests[0])).not.toContain(server.key);
    });

    it('does not follow a redirect: the 302 comes back with its location and the upstream saw one request', async () => {
      const { result: res, requests } = await seen(() => execute(http('/redirect')));
      expect(res.status).toBe(200);
      expect(httpResult(res).status).toBe(302);
      expect(httpResult(res).headers.location).toBe(`${upstream.origin}/json`);
      expect(requests.map((r) => r.path)).toEqual(['/redirect']);
    });

    it('cuts a body over 5 MiB at 5 MiB and marks it truncated', async () => {
      const res = await execute(http('/large'));
      expect(res.status).toBe(200);
      const execution = httpResult(res);
      expect(execution).toMatchObject({ status: 200, truncated: true, body_encoding: 'text' });
      expect(execution.body).toHaveLength(FIVE_MIB);
      // compared whole: a backtracking /^a+$/ over 5 MiB overflowed the stack in a busy CI worker
      expect(execution.body === 'a'.repeat(FIVE_MIB)).toBe(true);
    });

    it('answers 502 execution_failed when the upstream does not answer within timeout_ms', async () => {
      const started = Date.now();
      const { result: res, requests } = await seen(() => execute(http('/slow', { timeout_ms: 300 })));
      expect(res.status).toBe(502);
      expect(res.body.error.code).toBe('execution_failed');
      expect(typeof res.body.error.message).toBe('string');
      expect(res.body).not.toHaveProperty('data');
      expect(Date.now() - started).toBeLessThan(5_000);
      expect(requests.map((r) => r.path)).toEqual(['/slow']);
    });

    it('answers 502 execution_failed when the upstream resets the connection', async () => {
      const res = await execute(http('/reset'));
      expect(res.status).toBe(502);
      expect(res.body.error.code).toBe('execution_failed');
    });

    it('answers 502 execution_failed when the connection is refused', async () => {
      const port = await closedPort();
      const res = await execute({ ...http('/'), execution: { mode: 'http_proxy', method: 'GET', url: `http://127.0.0.1:${port}/` } });
      expect(res.status).toBe(502);
      expect(res.body.error.code).toBe('execution_failed');
    });

    it('never sent the workspace key or the agent key to any upstream during this file', () => {
      // this file's server and agent key (the `strict` server of the errors file reaches no upstream)
      const everything = JSON.stringify(upstream.requests) + JSON.stringify(upstream6()?.requests ?? []);
      expect(upstream.requests.length).toBeGreaterThan(10);
      expect(everything).not.toContain(server.key);
      expect(everything).not.toContain(AGENT_KEY);
    });
  });
});
