import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createEgressGuard } from '../src/egress/guard.ts';
import { guardedFetch, tooLargeOf, UpstreamMessageTooLarge } from '../src/features/execution/mcp-fetch.ts';

/**
 * An upstream that answers each path with SSE bytes written in the chunks the test names, a
 * pause between each (none with `burst`); then it ends the answer, fails it, or leaves it open.
 */
const ANSWERS: Record<string, { chunks: (string | Buffer)[]; end?: 'close' | 'destroy' | 'open'; burst?: boolean }> = {};
let server: Server;
let base: string;
const fetchUpstream = guardedFetch(createEgressGuard(['127.0.0.1/32']));

beforeAll(async () => {
  server = createServer((req, res) => {
    req.resume();
    const answer = ANSWERS[req.url ?? ''];
    if (!answer) return res.writeHead(404, { 'content-type': 'text/plain' }).end('no such answer');
    const json = (req.url ?? '').startsWith('/json');
    res.writeHead(200, { 'content-type': json ? 'application/json' : 'text/event-stream; charset=utf-8', 'mcp-session-id': 's-1' });
    let i = 0;
    const next = () => {
      if (answer.burst) while (i < answer.chunks.length) res.write(answer.chunks[i++]);
      if (i < answer.chunks.length) {
        res.write(answer.chunks[i++]);
        setTimeout(next, 5);
      } else if (answer.end === 'destroy') res.destroy();
      else if (answer.end !== 'open') res.end();
    };
    next();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(() => {
  server.closeAllConnections();
  return new Promise<void>((resolve) => server.close(() => resolve()));
});

const CALL = JSON.stringify({ method: 'tools/call', params: { name: 'echo' }, jsonrpc: '2.0', id: 7 });
const post = (path: string, body = CALL) =>
  fetchUpstream(`${base}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
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
    // CR alone ends a line too; an event of another type is skipped, as the SDK skips it
    ANSWERS['/cr'] = {
      chunks: ['event: other\rdata: {"jsonrpc":"2.0","id":1,"result":{}}\r\r', `data: ${JSON.stringify(response)}\r`, '\r'],
    };
    expect(await (await post('/cr')).json()).toEqual(response);
    ANSWERS['/crlf-split'] = { chunks: [`data: ${JSON.stringify(response)}\r`, '\n\r', '\n'] };
    expect(await (await post('/crlf-split')).json()).toEqual(response);
  });

  it("hands over the stream when the first message is another id's response or no JSON-RPC response", async () => {
    for (const [path, message] of [
      ['/other-id', { ...response, id: 8 }],
      ['/no-version', { id: 7, result: {} }],
      ['/not-an-object', { jsonrpc: '2.0', id: 7, result: 'x' }],
    ] as const) {
      const sent = `data: ${JSON.stringify(message)}\n\n`;
      ANSWERS[path] = { chunks: [sent] };
      const answer = await post(path);
      expect(answer.headers.get('content-type')).toContain('text/event-stream');
      expect(await answer.text()).toBe(sent);
    }
  });

  it('hands over a large answer to the SDK past 256 KiB, whole, and does not hold a stream of keep-alives', async () => {
    const big = { ...response, result: { content: [{ type: 'text', text: 'x'.repeat(1024 * 1024) }] } };
    const sent = Buffer.from(`data: ${JSON.stringify(big)}\n\n`);
    const chunks: Buffer[] = [];
    for (let at = 0; at < sent.length; at += 1024) chunks.push(sent.subarray(at, at + 1024));
    ANSWERS['/big'] = { chunks, burst: true };
    const answer = await post('/big');
    expect(answer.headers.get('content-type')).toContain('text/event-stream');
    expect(await answer.text()).toBe(sent.toString());
    ANSWERS['/keep-alive'] = { chunks: [': keep-alive\n\n'.repeat(20_000)], burst: true, end: 'open' };
    const open = await post('/keep-alive');
    const reader = open.body?.getReader();
    expect(new TextDecoder().decode((await reader?.read())?.value)).toMatch(/^: keep-alive\n\n/);
    await reader?.cancel();
  });

  it('does not look into the answer to a POST without a request (a notification): its stream is handed over at once', async () => {
    ANSWERS['/notification'] = { chunks: [': open\n\n'], end: 'open' };
    const answer = await post('/notification', JSON.stringify({ method: 'notifications/initialized', jsonrpc: '2.0' }));
    expect(answer.headers.get('content-type')).toContain('text/event-stream');
    await answer.body?.cancel();
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

describe('guardedFetch: one upstream message at most maxMessageBytes', () => {
  const LIMIT = 1000;
  const bounded = guardedFetch(createEgressGuard(['127.0.0.1/32']), LIMIT);
  const postBounded = (path: string, body = CALL) =>
    bounded(`${base}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
  /** The JSON-RPC message of the last event with data of an SSE text. */
  const lastMessage = (text: string) =>
    JSON.parse(
      text
        .trim()
        .split(/\r?\n/)
        .filter((l) => l.startsWith('data: {'))
        .pop()
        ?.slice(6) ?? 'null',
    );

  it('passes events each within the limit, whatever their total and line ends', async () => {
    const event = `data: ${'y'.repeat(LIMIT - 20)}\r\n\r\n`;
    const sent = `data: {"jsonrpc":"2.0","method":"notifications/message","params":{}}\r\r${event.repeat(3)}data: ${JSON.stringify(response)}\n\n`;
    ANSWERS['/many'] = { chunks: [sent.slice(0, 7), sent.slice(7, 1500), sent.slice(1500)] };
    expect(await (await postBounded('/many')).text()).toBe(sent);
  });

  it('ends a stream at an event past the limit with an error answering the request, split across chunks on CR LF', async () => {
    const sent = `data: {"jsonrpc":"2.0","method":"notifications/message","params":{}}\r\n\r\ndata: ${'z'.repeat(600)}\r\ndata: ${'z'.repeat(600)}\r\n\r\n`;
    ANSWERS['/over'] = { chunks: [sent.slice(0, 90), sent.slice(90, 700), sent.slice(700)], end: 'open' };
    const text = await (await postBounded('/over')).text();
    expect(text.length).toBeLessThan(sent.length + 400);
    const error = lastMessage(text);
    expect(error).toMatchObject({ jsonrpc: '2.0', id: 7, error: { code: -32603 } });
    expect(tooLargeOf(error.error)).toBeInstanceOf(UpstreamMessageTooLarge);
    // an upstream's own error with the same key is not taken for Warden's
    expect(tooLargeOf({ data: { ...error.error.data, 'dev.agentwarden/message_too_large': 'guess' } })).toBeUndefined();
  });

  it('answers the request with that error for a first event or a JSON answer past the limit', async () => {
    ANSWERS['/first'] = { chunks: [`data: ${JSON.stringify({ ...response, result: { text: 'w'.repeat(2 * LIMIT) } })}\n\n`], end: 'open' };
    expect(tooLargeOf(lastMessage(await (await postBounded('/first')).text()).error)).toBeInstanceOf(UpstreamMessageTooLarge);
    ANSWERS['/json-over'] = { chunks: ['{"jsonrpc":"2.0","id":7,"result":{"text":"', 'v'.repeat(2 * LIMIT), '"}}'] };
    const json = await postBounded('/json-over');
    expect(json.headers.get('content-type')).toBe('application/json');
    expect(tooLargeOf(((await json.json()) as { error: unknown }).error)).toBeInstanceOf(UpstreamMessageTooLarge);
    ANSWERS['/json-fits'] = { chunks: ['{"jsonrpc":"2.0","id":7,"result":{"text":"', 'v'.repeat(LIMIT - 100), '"}}'] };
    expect(await (await postBounded('/json-fits')).json()).toMatchObject({ id: 7, result: {} });
  });

  it("fails a GET's stream at an event past the limit", async () => {
    ANSWERS['/get-over'] = { chunks: [': hello\n\n', `data: ${'u'.repeat(2 * LIMIT)}\n\n`], end: 'open' };
    const answer = await bounded(`${base}/get-over`, { method: 'GET' });
    await expect(answer.text()).rejects.toThrow(/exceeds 1000 bytes/);
  });
});
