/**
 * Traces redact as the audit log does (issue 35: a proxied request's CLIENT span carried
 * `url.full` and `url.query` with `access_token=…`): the SDK as startTracing configures it,
 * its spans kept in memory, around undici requests to a loopback server.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { NodeSDKConfiguration } from '@opentelemetry/sdk-node';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { redactedUrlAttributes, startTracing, type Tracing } from '../src/observability/tracing.ts';
import { redactUrl } from '../src/shared/redact.ts';

type Exported = Parameters<NodeSDKConfiguration['traceExporter']['export']>[0];
const spans: Exported = [];
/** An exporter that keeps every span (the SDK's InMemorySpanExporter, without depending on its package). */
const inMemory: NodeSDKConfiguration['traceExporter'] = {
  export: (batch, done) => {
    spans.push(...batch);
    done({ code: 0 });
  },
  shutdown: async () => {},
};

let tracing: Tracing;
let upstream: Server;
let origin: string;
const sampler = process.env.OTEL_TRACES_SAMPLER;

beforeAll(async () => {
  process.env.OTEL_TRACES_SAMPLER = 'always_on';
  tracing = startTracing(process.env, inMemory);
  upstream = createServer((_req, res) => res.writeHead(200, { 'content-type': 'application/json' }).end('{}'));
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
  origin = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`;
});

afterAll(async () => {
  await new Promise((resolve) => upstream?.close(resolve));
  if (sampler === undefined) delete process.env.OTEL_TRACES_SAMPLER;
  else process.env.OTEL_TRACES_SAMPLER = sampler;
});

describe('client spans of undici requests', () => {
  it('carry url.full and url.query redacted exactly as the audit log redacts the URL', async () => {
    const secrets = ['tok-51a9', 'key-0c3e', 'pw-77d2'];
    const url = `${origin}/items/7?access_token=${secrets[0]}&page=2&API_KEY=${secrets[1]}&password=${secrets[2]}&q=free`;
    const res = await request(url, { headers: { authorization: 'Bearer hdr-8f1b' } });
    await res.body.text();
    await tracing.shutdown(); // flushes the batch
    const client = spans.find((span) => span.kind === 2 && String(span.attributes['url.path']) === '/items/7');
    expect(client).toBeDefined();
    expect(client?.attributes['url.full']).toBe(redactUrl(url));
    expect(client?.attributes['url.full']).toBe(
      `${origin}/items/7?access_token=%5Bredacted%5D&page=2&API_KEY=%5Bredacted%5D&password=%5Bredacted%5D&q=free`,
    );
    expect(client?.attributes['url.query']).toBe(
      '?access_token=%5Bredacted%5D&page=2&API_KEY=%5Bredacted%5D&password=%5Bredacted%5D&q=free',
    );
    const exported = JSON.stringify(spans.map((span) => ({ name: span.name, attributes: span.attributes, events: span.events })));
    for (const secret of [...secrets, 'hdr-8f1b']) expect(exported).not.toContain(secret);
  });

  it('leave a URL without a query as it is, and give up on what is not a URL', () => {
    expect(redactedUrlAttributes({ origin: 'http://a.example', path: '/x' })).toEqual({
      'url.full': 'http://a.example/x',
      'url.query': '',
    });
    expect(redactedUrlAttributes({ origin: 'not a url', path: 'nor this' })).toBeNull();
  });
});
