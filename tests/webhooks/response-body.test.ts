/**
 * A receiver's answer is kept only up to the first 1,024 characters: the delivery worker must
 * read no more than that and then close the connection, so a receiver streaming a huge body
 * costs the server neither memory nor time. The receiver here streams 100 MB generated on the
 * fly, with backpressure, and records how much it wrote before its connection closed.
 */
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { dashboard } from '@warden/contract';
import { afterAll, describe, expect, it } from 'vitest';
import { dashboardLogin, useTestServer } from '../support/server.ts';

const BODY_BYTES = 100 * 1024 * 1024;
const CHUNK = Buffer.alloc(64 * 1024, 'x');

const server = useTestServer({ egressAllowlist: ['127.0.0.1/32'], webhookTimeoutMs: 10_000 });

interface Streamed {
  written: number;
  /** True once the whole body was written, false when the connection closed first. */
  finished: boolean;
}

const streams: Streamed[] = [];
const receiver = createServer((req, res: ServerResponse) => {
  req.resume();
  req.on('end', async () => {
    const stream: Streamed = { written: 0, finished: false };
    streams.push(stream);
    res.writeHead(200, { 'content-type': 'text/plain', 'content-length': String(BODY_BYTES) });
    let closed = false;
    res.on('close', () => {
      closed = true;
    });
    while (!closed && stream.written < BODY_BYTES) {
      const more = res.write(CHUNK);
      stream.written += CHUNK.length;
      if (!more && !closed) {
        await new Promise<void>((resolve) => {
          const done = () => {
            res.off('drain', done).off('close', done);
            resolve();
          };
          res.on('drain', done).on('close', done);
        });
      }
    }
    if (!closed) {
      stream.finished = true;
      res.end();
    }
  });
});

afterAll(async () => {
  receiver.closeAllConnections();
  await new Promise((resolve) => receiver.close(resolve));
});

describe('webhook delivery: the receiver’s answer', () => {
  it('reads at most the kept 1,024 characters of a 100 MB answer and closes the connection before the receiver has written it', async () => {
    await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
    const { id } = await server.admin('webhooks.create', { workspace: 'default', url, events: 'agent.created' });
    const dash = await dashboardLogin(server.origin, server.key);
    const rssBefore = process.memoryUsage().rss;
    expect((await server.api('POST', '/agents', { body: { name: 'Big answer', provider: 'local' } })).status).toBe(201);

    let delivery: dashboard.WebhookDelivery | undefined;
    const deadline = Date.now() + 15_000;
    while (Date.now() < deadline) {
      const res = await dash.api('GET', `/webhooks/${id}/deliveries`);
      delivery = res.body.data[0];
      if (delivery && delivery.status !== 'pending') break;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    const rssGrowth = process.memoryUsage().rss - rssBefore;
    console.log(`receiver wrote ${streams[0]?.written} of ${BODY_BYTES} bytes; RSS grew ${(rssGrowth / 1e6).toFixed(1)} MB`);
    expect(delivery).toMatchObject({ status: 'succeeded', response_status: 200 });
    expect(delivery?.response_body).toBe('x'.repeat(1024));
    // The receiver sees its connection closed long before it could write the whole body.
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(streams).toHaveLength(1);
    expect(streams[0]?.finished).toBe(false);
    // What the receiver managed to write bounds what the server could have buffered. The test
    // process's RSS is only logged: it also holds the server, the database driver and GC noise.
    expect(streams[0]?.written).toBeLessThan(16 * 1024 * 1024);
  }, 30_000);
});
