/**
 * The large unchanging answers — the API reference's Redoc bundle (/docs), the bundled spec
 * (/api/v1/openapi.json) and the dashboard's files — are sent compressed (brotli or gzip, as the
 * client accepts), with an ETag that makes a revalidation a 304. Raw requests through node:http,
 * so that nothing decompresses on the test's behalf.
 */
import { request } from 'node:http';
import { brotliDecompressSync, gunzipSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { useTestServer } from '../support/server.ts';

const server = useTestServer();

interface Raw {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Buffer;
}

function get(path: string, headers: Record<string, string> = {}): Promise<Raw> {
  return new Promise((resolve, reject) => {
    const req = request(new URL(path, server.origin), { headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
}

const ASSETS = [
  ['the Redoc bundle', '/docs/redoc.standalone.js', /^text\/javascript/],
  ['the bundled spec', '/api/v1/openapi.json', /^application\/json/],
  ['the dashboard script', '/dashboard/app.js', /^text\/javascript/],
] as const;

describe('static assets', () => {
  it.each(ASSETS)('sends %s with brotli, gzip or as is, whichever the client accepts, each the same bytes', async (_name, path, type) => {
    const plain = await get(path);
    expect(plain.status).toBe(200);
    expect(plain.headers['content-encoding']).toBeUndefined();
    expect(String(plain.headers['content-type'])).toMatch(type);
    expect(plain.headers.vary).toMatch(/Accept-Encoding/i);

    const br = await get(path, { 'accept-encoding': 'gzip, deflate, br' });
    expect(br.headers['content-encoding']).toBe('br');
    expect(brotliDecompressSync(br.body).equals(plain.body)).toBe(true);
    expect(br.body.length).toBeLessThan(plain.body.length / 3);

    const gz = await get(path, { 'accept-encoding': 'gzip' });
    expect(gz.headers['content-encoding']).toBe('gzip');
    expect(gunzipSync(gz.body).equals(plain.body)).toBe(true);
    expect(gz.body.length).toBeLessThan(plain.body.length / 2);
  });

  it('sends the Redoc bundle (1 MB and more) in under a third of its size with brotli', async () => {
    const plain = await get('/docs/redoc.standalone.js');
    const br = await get('/docs/redoc.standalone.js', { 'accept-encoding': 'br' });
    expect(plain.body.length).toBeGreaterThan(1_000_000);
    expect(br.body.length).toBeLessThan(plain.body.length / 3);
  });

  it.each(ASSETS)('answers a revalidation of %s with its ETag by 304 and no body', async (_name, path) => {
    const first = await get(path, { 'accept-encoding': 'br' });
    const etag = String(first.headers.etag);
    expect(etag).toMatch(/^"[A-Za-z0-9_-]{27}"$/);
    const again = await get(path, { 'accept-encoding': 'br', 'if-none-match': etag });
    expect(again.status).toBe(304);
    expect(again.body.length).toBe(0);
    const changed = await get(path, { 'if-none-match': '"something-else"' });
    expect(changed.status).toBe(200);
  });

  it('sends the spec as JSON that parses to the served contract', async () => {
    const gz = await get('/api/v1/openapi.json', { 'accept-encoding': 'gzip' });
    const spec = JSON.parse(gunzipSync(gz.body).toString('utf8'));
    expect(spec.openapi).toMatch(/^3\.1/);
    expect(Object.keys(spec.paths)).toContain('/agents');
  });
});
