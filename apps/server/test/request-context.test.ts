/**
 * Tripwire for src/http/request-context.ts's patch: X-Response-Time is stamped by a `writeHead`
 * installed on the app's response prototype, so it relies on Node and Express writing every
 * response's headers through `this.writeHead`, also when the handler never calls it (Node's
 * implicit headers on the first write or end). It fails when the patch is removed, and when an
 * upgrade writes headers some other way for any of the ways the server answers.
 */
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import express from 'express';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createHttpServer } from '../src/http/http-server.ts';
import { sendJson } from '../src/http/json-response.ts';
import { requestContext } from '../src/http/request-context.ts';

// Built the way app.ts and server.ts build the server.
const app = express();
app.response.json = sendJson;
app.use(requestContext(app));
app.get('/json', (_req, res) => void res.json({ ok: true }));
app.get('/slow', async (_req, res) => {
  await sleep(50);
  res.json({ ok: true });
});
app.get('/empty', (_req, res) => void res.status(204).end());
app.get('/send', (_req, res) => void res.send('text'));
app.get('/stream', (_req, res) => {
  res.write('a');
  res.end('b');
});
app.get('/explicit', (_req, res) => {
  res.writeHead(202, { 'content-type': 'text/plain' });
  res.end('accepted');
});
const server = createHttpServer(app);
let origin = '';

beforeAll(async () => {
  await new Promise<void>((listening) => server.listen(0, '127.0.0.1', listening));
  origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(() => new Promise((closed) => server.close(closed)));

it('stamps X-Response-Time on every kind of answer: JSON, no body, res.send, streamed, explicit writeHead', async () => {
  for (const path of ['/json', '/empty', '/send', '/stream', '/explicit']) {
    const response = await fetch(`${origin}${path}`);
    await response.arrayBuffer();
    expect(response.headers.get('x-response-time') ?? '(no X-Response-Time header)', path).toMatch(/^\d+ms$/);
    expect(response.headers.get('x-request-id'), path).toMatch(/^[0-9a-f-]{36}$/);
  }
});

it('stamps it when the headers are written, so it covers the handler', async () => {
  const response = await fetch(`${origin}/slow`);
  await response.arrayBuffer();
  expect(response.headers.get('x-response-time') ?? '(no X-Response-Time header)').toMatch(/^\d+ms$/);
  expect(Number.parseInt(response.headers.get('x-response-time') ?? '', 10)).toBeGreaterThanOrEqual(50);
});
