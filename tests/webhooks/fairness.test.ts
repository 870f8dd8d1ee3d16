/**
 * Webhook delivery is fair between workspaces: one workspace's slow receiver, with a backlog
 * of deliveries, holds at most a bounded number of deliveries at a time and never delays
 * another workspace's deliveries. Receivers are node:http servers on 127.0.0.1.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_IN_FLIGHT_PER_WORKSPACE } from '../../apps/server/src/features/webhooks/delivery-worker.ts';
import { keyFor, startTestServer, type TestServer } from '../support/server.ts';

/** How long the slow receiver holds each request before answering 200. */
const SLOW_MS = 5_000;

let server: TestServer;
const servers: Server[] = [];
beforeAll(async () => {
  server = await startTestServer({ egressAllowlist: ['127.0.0.1/32'], webhookTimeoutMs: 10_000 });
});
afterAll(async () => {
  // Receivers first: the server's close waits for the deliveries under way.
  for (const s of servers) s.closeAllConnections();
  await Promise.all(servers.map((s) => new Promise((resolve) => s.close(resolve))));
  await server?.close();
});

/** A receiver that answers 200 after `delayMs`; counts requests and the most it held at once. */
async function receiver(delayMs: number) {
  const stats = { received: [] as number[], open: 0, maxOpen: 0 };
  const http = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      stats.received.push(Date.now());
      stats.open++;
      stats.maxOpen = Math.max(stats.maxOpen, stats.open);
      const timer = setTimeout(() => res.writeHead(200).end('ok'), delayMs);
      res.on('close', () => {
        clearTimeout(timer);
        stats.open--;
      });
    });
  });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  servers.push(http);
  return { url: `http://127.0.0.1:${(http.address() as AddressInfo).port}/hook`, stats };
}

describe('webhook delivery between workspaces', () => {
  it('delivers workspace B’s event within a second while workspace A has 100 deliveries pending to a receiver that takes 5 s', async () => {
    const slow = await receiver(SLOW_MS);
    const fast = await receiver(0);
    const keyA = await keyFor(server, 'agents:write', 'fair-a');
    const keyB = await keyFor(server, 'agents:write', 'fair-b');
    await server.admin('webhooks.create', { workspace: 'fair-a', url: slow.url, events: 'agent.created' });
    await server.admin('webhooks.create', { workspace: 'fair-b', url: fast.url, events: 'agent.created' });

    const created = await Promise.all(
      Array.from({ length: 100 }, (_, i) => server.api('POST', '/agents', { key: keyA, body: { name: `A ${i}`, provider: 'local' } })),
    );
    expect(created.every((res) => res.status === 201)).toBe(true);
    // A's receiver is busy with its backlog before B's event exists.
    for (let i = 0; i < 100 && slow.stats.open === 0; i++) await new Promise((resolve) => setTimeout(resolve, 50));
    expect(slow.stats.open).toBeGreaterThan(0);

    const sent = Date.now();
    expect((await server.api('POST', '/agents', { key: keyB, body: { name: 'B', provider: 'local' } })).status).toBe(201);
    for (let i = 0; i < 60 && fast.stats.received.length === 0; i++) await new Promise((resolve) => setTimeout(resolve, 50));
    const latency = (fast.stats.received[0] ?? Number.NaN) - sent;
    console.log(`B delivered after ${latency} ms; A held at most ${slow.stats.maxOpen} at once`);
    expect(fast.stats.received).toHaveLength(1);
    expect(latency).toBeLessThan(1_000);
    expect(slow.stats.maxOpen).toBeLessThanOrEqual(MAX_IN_FLIGHT_PER_WORKSPACE);
  }, 30_000);
});
