/**
 * WardenError: every non-2xx answer becomes one, carrying the API's code, the request id,
 * the headers and the body; answers that never arrive become `network_error` / `timeout`.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createWarden, isWardenError, type Warden, WardenError } from '../../packages/sdk/src/index.ts';
import { useTestServer } from '../support/server.ts';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

const server = useTestServer();
let warden: Warden;
beforeAll(() => {
  warden = createWarden({ apiKey: server.key, baseUrl: server.url });
});

/** The error a call rejects with (fails the test when it resolves). */
async function failure(promise: Promise<unknown>): Promise<WardenError> {
  try {
    await promise;
  } catch (error) {
    expect(error).toBeInstanceOf(WardenError);
    return error as WardenError;
  }
  throw new Error('expected the call to fail');
}

describe('WardenError from API answers', () => {
  it('404: not_found with status, message, request id, headers and body', async () => {
    const error = await failure(warden.agents.get('no-such-agent'));
    expect(error).toMatchObject({ name: 'WardenError', status: 404, code: 'not_found' });
    expect(error.message).toEqual(expect.any(String));
    expect(error.requestId).toMatch(UUID);
    expect(error.headers.get('x-request-id')).toBe(error.requestId);
    expect(error.body).toEqual({ error: { code: 'not_found', message: error.message } });
    expect(isWardenError(error)).toBe(true);
    expect(error).toBeInstanceOf(Error);
  });

  it('400: invalid_request for a body the spec refuses', async () => {
    // A body the types forbid: what an untyped (JavaScript) caller could send.
    const error = await failure(warden.agents.create({ name: 'x', provider: 'skynet' } as never));
    expect(error).toMatchObject({ status: 400, code: 'invalid_request' });
    expect(error.message).toContain('provider');
  });

  it('401: unauthorized for an unknown key', async () => {
    const stranger = createWarden({ apiKey: 'wk_not_a_real_key', baseUrl: server.url });
    const error = await failure(stranger.agents.list());
    expect(error).toMatchObject({ status: 401, code: 'unauthorized', message: 'A valid API key is required' });
  });

  it('409: conflict for a duplicate slug', async () => {
    await warden.agents.create({ name: 'Twin', slug: 'twin', provider: 'local' });
    const error = await failure(warden.agents.create({ name: 'Twin', slug: 'twin', provider: 'local' }));
    expect(error).toMatchObject({ status: 409, code: 'conflict' });
  });

  it('echoes a request id the caller sent as a header', async () => {
    const id = crypto.randomUUID();
    const error = await failure(warden.agents.get('nobody', { headers: { 'X-Request-Id': id } }));
    expect(error.requestId).toBe(id);
  });
});

describe('WardenError without an API answer', () => {
  let stub: Server;
  let stubUrl: string;
  beforeAll(async () => {
    stub = createServer((req, res) => {
      if (req.url?.includes('/html')) {
        res.writeHead(502, { 'content-type': 'text/html' }).end('<h1>Bad gateway</h1>');
        return;
      }
      // Never answers: for timeouts.
    });
    await new Promise<void>((resolve) => stub.listen(0, '127.0.0.1', resolve));
    stubUrl = `http://127.0.0.1:${(stub.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    stub.closeAllConnections();
    await new Promise((resolve) => stub.close(resolve));
  });

  it('network_error with status 0 when nothing listens', async () => {
    const closed = createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const port = (closed.address() as AddressInfo).port;
    await new Promise((resolve) => closed.close(resolve));
    const w = createWarden({ apiKey: 'wk_x', baseUrl: `http://127.0.0.1:${port}/api/v1`, maxRetries: 0 });
    const error = await failure(w.health());
    expect(error).toMatchObject({ status: 0, code: 'network_error', requestId: undefined, body: undefined });
    expect(error.message).toContain('ECONNREFUSED');
    expect(error.cause).toBeDefined();
  });

  it('timeout with status 0 after timeoutMs, per call too', async () => {
    const w = createWarden({ apiKey: 'wk_x', baseUrl: `${stubUrl}/api/v1`, timeoutMs: 200, maxRetries: 0 });
    const started = Date.now();
    const error = await failure(w.health());
    expect(error).toMatchObject({ status: 0, code: 'timeout' });
    expect(Date.now() - started).toBeLessThan(2_000);
    const perCall = await failure(createWarden({ apiKey: 'wk_x', baseUrl: `${stubUrl}/api/v1`, maxRetries: 0 }).health({ timeoutMs: 150 }));
    expect(perCall.code).toBe('timeout');
  });

  it('aborts a timed-out attempt with an Error, which tracing can record (a Symbol crashed OpenTelemetry)', async () => {
    const reasons: unknown[] = [];
    const fetch: typeof globalThis.fetch = (input, init) => {
      init?.signal?.addEventListener('abort', () => reasons.push(init.signal?.reason));
      return globalThis.fetch(input, init);
    };
    const error = await failure(
      createWarden({ apiKey: 'wk_x', baseUrl: `${stubUrl}/api/v1`, timeoutMs: 150, maxRetries: 0, fetch }).health(),
    );
    expect(error.code).toBe('timeout');
    expect(reasons).toHaveLength(1);
    expect(reasons[0]).toBeInstanceOf(Error);
    expect(String(reasons[0])).toContain('150 ms');
  });

  it('passes the caller’s abort through as an AbortError, not a WardenError', async () => {
    const w = createWarden({ apiKey: 'wk_x', baseUrl: `${stubUrl}/api/v1` });
    const controller = new AbortController();
    setTimeout(() => controller.abort(), 50);
    const outcome = await w.health({ signal: controller.signal }).catch((error: unknown) => error);
    expect(outcome).not.toBeInstanceOf(WardenError);
    expect((outcome as Error).name).toBe('AbortError');
  });

  it('a code derived from the status when the body is not an API error', async () => {
    const w = createWarden({ apiKey: 'wk_x', baseUrl: `${stubUrl}/html`, maxRetries: 0 });
    const error = await failure(w.health());
    expect(error).toMatchObject({ status: 502, code: 'internal_error', body: '<h1>Bad gateway</h1>' });
  });

  it('createWarden refuses a missing apiKey', () => {
    expect(() => createWarden({} as never)).toThrow(TypeError);
  });
});
