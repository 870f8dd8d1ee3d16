// The benchmark's open-loop sender (tools/bench/http-sender.ts) against real loopback servers:
// what it sends, how it frames answers, and how it fails.
import { createServer as createHttpServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { type AddressInfo, createServer as createNetServer, type Server as NetServer, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { HttpSender, type SendOutcome, serialiseRequest } from '../../tools/bench/http-sender.ts';

const servers: Array<Server | NetServer> = [];
afterEach(async () => {
  for (const server of servers.splice(0)) {
    if ('closeAllConnections' in server) server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
});

async function httpServer(handler: (req: IncomingMessage, body: string, res: ServerResponse) => void): Promise<string> {
  const server = createHttpServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => {
      body += chunk;
    });
    req.on('end', () => handler(req, body, res));
  });
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

/** A server that writes the given raw bytes, in pieces, for every request it reads. */
async function rawServer(pieces: string[], pauseMs = 5): Promise<string> {
  const server = createNetServer((socket: Socket) => {
    socket.on('data', async () => {
      for (const piece of pieces) {
        socket.write(piece);
        await new Promise((resolve) => setTimeout(resolve, pauseMs));
      }
    });
    socket.on('error', () => {});
  });
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

const sendAll = (sender: HttpSender, request: Buffer, count: number) =>
  Promise.all(Array.from({ length: count }, () => new Promise<SendOutcome>((resolve) => sender.send(request, resolve))));

const statusOf = (outcome: SendOutcome) => ('status' in outcome ? outcome.status : outcome.error.message);

describe('bench http sender', () => {
  it('sends the serialised request and reads each answer on kept-alive connections', async () => {
    const seen: Array<{ method?: string; url?: string; headers: IncomingMessage['headers']; body: string }> = [];
    const origin = await httpServer((req, body, res) => {
      seen.push({ method: req.method, url: req.url, headers: req.headers, body });
      res.writeHead(req.url === '/missing' ? 404 : 200, { 'content-type': 'application/json' }).end('{"ok":true}');
    });
    const sender = new HttpSender({ origin, maxConnections: 4, timeoutMs: 5_000 });
    const request = serialiseRequest({
      origin,
      method: 'POST',
      path: '/api/v1/policy/evaluate?x=1',
      headers: { 'content-type': 'application/json', authorization: 'Bearer k', 'x-request-id': 'r-1' },
      body: Buffer.from('{"agent":"a","action":"read"}'),
    });

    const outcomes = await sendAll(sender, request, 200);
    const missing = await sendAll(sender, serialiseRequest({ origin, method: 'GET', path: '/missing', headers: {} }), 3);

    expect(outcomes.map(statusOf)).toEqual(Array(200).fill(200));
    expect(missing.map(statusOf)).toEqual([404, 404, 404]);
    expect(sender.connections).toBeLessThanOrEqual(4);
    expect(seen[0]).toMatchObject({
      method: 'POST',
      url: '/api/v1/policy/evaluate?x=1',
      body: '{"agent":"a","action":"read"}',
      headers: { authorization: 'Bearer k', 'x-request-id': 'r-1', 'content-length': '29', host: new URL(origin).host },
    });
    await sender.close();
  });

  it('reads chunked answers and answers split across packets', async () => {
    const origin = await rawServer([
      'HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\nContent-Type: text/plain\r\n\r\n4\r\nab',
      'cd\r\n3\r\nefg\r\n0\r\n',
      '\r\n',
    ]);
    const sender = new HttpSender({ origin, maxConnections: 1, timeoutMs: 5_000 });
    const request = serialiseRequest({ origin, method: 'GET', path: '/', headers: {} });
    // One connection: each answer must end exactly where the chunked framing says, or the
    // next one on the same connection would be misread.
    const outcomes = await sendAll(sender, request, 5);
    expect(outcomes.map(statusOf)).toEqual([201, 201, 201, 201, 201]);
    await sender.close();
  });

  it('reconnects after the server closes a connection', async () => {
    const origin = await httpServer((_req, _body, res) => {
      res.writeHead(200, { connection: 'close', 'content-length': '2' }).end('ok');
    });
    const sender = new HttpSender({ origin, maxConnections: 2, timeoutMs: 5_000 });
    const outcomes = await sendAll(sender, serialiseRequest({ origin, method: 'GET', path: '/', headers: {} }), 20);
    expect(outcomes.map(statusOf)).toEqual(Array(20).fill(200));
    await sender.close();
  });

  it('fails a request that is not answered in time, and one without a server', async () => {
    const origin = await httpServer(() => {
      // never answers
    });
    const sender = new HttpSender({ origin, maxConnections: 2, timeoutMs: 200 });
    const started = performance.now();
    const [outcome] = await sendAll(sender, serialiseRequest({ origin, method: 'GET', path: '/', headers: {} }), 1);
    expect(statusOf(outcome as SendOutcome)).toBe('request timed out');
    expect(performance.now() - started).toBeGreaterThanOrEqual(190);
    await sender.close();

    const closed = await httpServer(() => {});
    const gone = servers.pop() as Server;
    await new Promise((resolve) => gone.close(resolve));
    const nowhere = new HttpSender({ origin: closed, maxConnections: 2, timeoutMs: 1_000 });
    const failed = await sendAll(nowhere, serialiseRequest({ origin: closed, method: 'GET', path: '/', headers: {} }), 3);
    expect(failed.map(statusOf)).toEqual(['could not connect', 'could not connect', 'could not connect']);
    await nowhere.close();
  });

  it('reads a body that ends with the connection, then serves the next request on a new one', async () => {
    const origin = await rawServer(['HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\nall of it']);
    // the raw server never closes: close each connection once its answer is written
    const server = servers.at(-1) as NetServer;
    server.on('connection', (socket: Socket) => socket.on('data', () => setTimeout(() => socket.end(), 20)));
    const sender = new HttpSender({ origin, maxConnections: 1, timeoutMs: 5_000 });
    const outcomes = await sendAll(sender, serialiseRequest({ origin, method: 'GET', path: '/', headers: {} }), 3);
    expect(outcomes.map(statusOf)).toEqual([200, 200, 200]);
    await sender.close();
  });

  it('expects no body after 204 or 304, whatever Content-Length says', async () => {
    const origin = await rawServer(['HTTP/1.1 204 No Content\r\ncontent-length: 5\r\n\r\n']);
    const sender = new HttpSender({ origin, maxConnections: 1, timeoutMs: 1_000 });
    const outcomes = await sendAll(sender, serialiseRequest({ origin, method: 'GET', path: '/', headers: {} }), 2);
    expect(outcomes.map(statusOf)).toEqual([204, 204]);
    await sender.close();
  });

  it('does not reuse a connection that brought an answer nobody asked for', async () => {
    // The first request gets its answer and then a second one nobody asked for.
    let requests = 0;
    const server = createNetServer((socket: Socket) => {
      socket.on('data', () => {
        socket.write('HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n');
        if (++requests === 1) setTimeout(() => socket.write('HTTP/1.1 500 Oops\r\ncontent-length: 0\r\n\r\n'), 5);
      });
      socket.on('error', () => {});
    });
    servers.push(server);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const sender = new HttpSender({ origin, maxConnections: 1, timeoutMs: 2_000 });
    const request = serialiseRequest({ origin, method: 'GET', path: '/', headers: {} });
    const first = await sendAll(sender, request, 1);
    await new Promise((resolve) => setTimeout(resolve, 50));
    // Reused, that connection would be handed to both of these at once.
    const next = await sendAll(sender, request, 2);
    expect([...first, ...next].map(statusOf)).toEqual([200, 200, 200]);
    await sender.close();
  });

  it('opens a new connection instead of reusing one idle past idleTimeoutMs', async () => {
    const server = createHttpServer((_req, res) => res.end('ok'));
    let connections = 0;
    server.on('connection', () => {
      connections += 1;
    });
    servers.push(server);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const sender = new HttpSender({ origin, maxConnections: 1, timeoutMs: 2_000, idleTimeoutMs: 50 });
    const request = serialiseRequest({ origin, method: 'GET', path: '/', headers: {} });
    expect((await sendAll(sender, request, 2)).map(statusOf)).toEqual([200, 200]);
    expect(connections).toBe(1); // kept alive while fresh
    await new Promise((resolve) => setTimeout(resolve, 120));
    expect((await sendAll(sender, request, 1)).map(statusOf)).toEqual([200]);
    expect(connections).toBe(2); // a server may be closing a connection idle that long
    await sender.close();
  });

  it('refuses header values that would split the request', () => {
    expect(() => serialiseRequest({ origin: 'http://127.0.0.1:1', method: 'GET', path: '/', headers: { 'x-a': 'b\r\nx-b: c' } })).toThrow(
      /line breaks/,
    );
  });
});
