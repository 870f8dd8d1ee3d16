/**
 * A Redis that stops answering mid-session (a half-open connection: the socket stays open, no
 * reply comes) must not hold requests: the rate limiter's command times out (1 s) and its
 * in-memory insurance decides, so requests are answered — and still limited. Redis is reached
 * through a loopback proxy that the test freezes.
 */
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useTestServer } from '../support/server.ts';

const QUOTA = 5;
let proxy: Server;
let frozen = false;
const sockets: Socket[] = [];
let port = 0;

beforeAll(async () => {
  proxy = createServer((client) => {
    const upstream = createConnection({ host: '127.0.0.1', port: 6379 });
    sockets.push(client, upstream);
    // While frozen, bytes are swallowed both ways: the connection stays open and silent.
    client.on('data', (chunk) => {
      if (!frozen) upstream.write(chunk);
    });
    upstream.on('data', (chunk) => {
      if (!frozen) client.write(chunk);
    });
    client.on('error', () => upstream.destroy());
    upstream.on('error', () => client.destroy());
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
  });
  await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
  port = (proxy.address() as { port: number }).port;
});
afterAll(async () => {
  // after the server's close (hooks after the tests run last-registered first)
  for (const socket of sockets) socket.destroy();
  await new Promise<void>((resolve) => proxy?.close(() => resolve()));
});

const server = useTestServer(() => ({ redisUrl: `redis://127.0.0.1:${port}`, rateLimitPerMinute: QUOTA }));

afterAll(() => {
  frozen = false; // before the server's close, so that closing its Redis connection is answered
});

describe('rate limiting when Redis stops answering', () => {
  it('answers within the command timeout from the in-memory insurance, and still refuses beyond the quota', async () => {
    const first = await server.api('GET', '/agents?limit=1');
    expect(first.status).toBe(200);
    expect(first.headers.get('x-ratelimit-remaining')).toBe(String(QUOTA - 1));

    frozen = true;
    const started = Date.now();
    const during = await server.api('GET', '/agents?limit=1');
    const waited = Date.now() - started;
    expect(during.status).toBe(200);
    expect(waited).toBeLessThan(3_000);

    // The insurance counts in this process from its own zero: the quota holds within it.
    const statuses: number[] = [];
    for (let i = 0; i < QUOTA + 2; i++) statuses.push((await server.api('GET', '/agents?limit=1')).status);
    expect(statuses).toContain(429);
    expect(statuses.filter((s) => s !== 200 && s !== 429)).toEqual([]);
    console.log(`[redis stall] answered after ${waited} ms with Redis silent; then ${JSON.stringify(statuses)}`);
  });
});
