import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createEgressGuard } from '../src/egress/guard.ts';
import { guardedFetch } from '../src/features/execution/mcp-fetch.ts';

/** An upstream that answers each path with SSE bytes written in the chunks the test names, a pause between each. */
const ANSWERS: Record<string, { chunks: (string | Buffer)[]; end?: 'close' | 'destroy' }> = {};
let server: Server;
let base: string;
const fetchUpstream = guardedFetch(createEgressGuard(['127.0.0.1/32']));

beforeAll(async () => {
  server = createServer((req, res) => {
    req.resume();
    const answer = ANSWERS[req.url ?? ''];
    if (!answer) return res.writeHead(404, { 'content-type': 'text/plain' }).end('no such answer');
    res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'mcp-session-id': 's-1' });
    let i = 0;
    const next = () => {
      if (i < answer.chunks.length) {
        res.write(answer.chunks[i++]);
        setTimeout(next, 5);
      } else if (answer.end === 'destroy') res.destroy();
      else res.end();
    };
    next();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

const post = (path: string) =>
  fetchUpstream(`${base}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
const response = { jsonrpc: '2.0', id: 7, result: { content: [{ type: 'text', text: 'héllo ✓' }] } };

describe('guardedFetch: an upstream POST answered with SSE', () => {
  it('hands over a response sent first as one JSON message, priming events and comments skipped, its session id kept', async () => {
    ANSWERS['/plain'] = {
      chunks: [': comment\n\nid: prime-1\ndata: \n\n', `event: message\nid: 2\ndata: ${JSON.stringify(response)}\n\n`],
    };
    const answer = await post('/plain');
    expect(answer.status).toBe(200);
    expect(answer.headers.get('content-type')).toBe('application/json');
    expect(answer.headers.get('mcp-session-id')).toBe('s-1');
    expect(await answer.json()).toEqual(response);
  });

  it('joins a response split across chunks, mid-character and on CR LF line ends, and multi-line data', async () => {
    const bytes = Buffer.from(`data: {"jsonrpc":"2.0","id":7,\r\ndata: "result":{"content":[{"type":"text","text":"héllo ✓"}]}}\r\n\r\n`);
    const cut = bytes.indexOf(Buffer.from('é')) + 1; // inside the two bytes of é
    ANSWERS['/split'] = { chunks: [bytes.subarray(0, 20), bytes.subarray(20, cut), bytes.subarray(cut)] };
    expect(await (await post('/split')).json()).toEqual(response);
  });

  it('hands over the stream itself, from its first byte, when a notification comes before the response', async () => {
    const progress = `data: ${JSON.stringify({ jsonrpc: '2.0', method: 'notifications/progress', params: { progressToken: 1, progress: 1 } })}\n\n`;
    const sent = `id: p\ndata: \n\n${progress}data: ${JSON.stringify(response)}\n\n`;
    ANSWERS['/progress'] = { chunks: [sent.slice(0, 30), sent.slice(30)] };
    const answer = await post('/progress');
    expect(answer.headers.get('content-type')).toBe('text/event-stream; charset=utf-8');
    expect(await answer.text()).toBe(sent);
  });

  it('hands over a stream that ended with no response whole, and one that failed with its bytes and then its error', async () => {
    ANSWERS['/ended'] = { chunks: ['id: p\ndata: \n\n', 'retry: 100\n\n'] };
    expect(await (await post('/ended')).text()).toBe('id: p\ndata: \n\nretry: 100\n\n');
    ANSWERS['/failed'] = { chunks: ['id: p\ndata: \n\n'], end: 'destroy' };
    const reader = (await post('/failed')).body?.getReader();
    expect(new TextDecoder().decode((await reader?.read())?.value)).toBe('id: p\ndata: \n\n');
    await expect(reader?.read()).rejects.toThrow();
  });

  it('reads any other answer whole, with its status and text', async () => {
    const answer = await post('/missing');
    expect(answer.status).toBe(404);
    expect(answer.ok).toBe(false);
    expect(await answer.text()).toBe('no such answer');
  });
});
