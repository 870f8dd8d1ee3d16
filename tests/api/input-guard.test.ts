import { describe, expect, it } from 'vitest';
import { useTestServer } from '../support/server.ts';

const server = useTestServer();

function nested(depth: number): Record<string, unknown> {
  let value: Record<string, unknown> = {};
  for (let i = 0; i < depth; i++) value = { a: value };
  return value;
}

describe('input the database cannot store is refused with 400 invalid_request, never a 5xx', () => {
  it.each([
    ['a NUL in a path id', 'GET', '/agents/a%00b', undefined],
    ['a malformed percent-encoding in a path id', 'GET', '/agents/%E0%A4%A', undefined],
    ['a lone %FF in a path id', 'DELETE', '/mcp-servers/%FF', undefined],
    ['a NUL in a JSON string', 'POST', '/agents', { name: 'a\u0000b', provider: 'local' }],
    ['a NUL in an audit event (nothing is recorded, no 503)', 'POST', '/audit', { action: 'x\u0000', result: 'blocked' }],
    ['a NUL in a JSON key of free-form context', 'POST', '/approvals', { title: 't', context: { 'k\u0000': 1 } }],
    ['JSON nested deeper than 32 levels', 'POST', '/approvals', { title: 't', context: nested(40) }],
    ['a lone high surrogate in a JSON string', 'POST', '/agents', { name: 'a\ud800b', provider: 'local' }],
    ['a lone low surrogate in an audit event (nothing is recorded, no 503)', 'POST', '/audit', { action: '\udfff', result: 'blocked' }],
    ['a surrogate pair in the wrong order', 'POST', '/mcp-servers', { name: '\udc00\ud800', transport_url: 'http://127.0.0.1:9/mcp' }],
    ['a lone surrogate in a JSON key of free-form context', 'POST', '/approvals', { title: 't', context: { 'k\ud83d': 1 } }],
    [
      'a lone surrogate deep in free-form context',
      'POST',
      '/policy/evaluate',
      { input: { action: 'a', context: { a: [{ b: 'x\ud83d' }] } } },
    ],
    ['the UTF-8 bytes of a surrogate in a path id', 'GET', '/policies/%ED%A0%80', undefined],
    // The embedded database drops a leading U+FEFF when it reads text back: the fuzz found a
    // manual audit event whose policy '\ufeffbom' read back as 'bom' and no longer verified.
    [
      'a byte order mark beginning an audit event field (nothing is recorded)',
      'POST',
      '/audit',
      { action: 'a', policy: '\ufeffbom', result: 'blocked' },
    ],
    ['a byte order mark beginning a JSON string', 'POST', '/agents', { name: '\ufeffBot', provider: 'local' }],
  ])('refuses %s', async (_label, method, path, body) => {
    const res = await server.api(method, path, { body, unchecked: true });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('invalid_request');
  });

  it('names the byte order mark in its refusal, and keeps one that does not begin the string', async () => {
    const refused = await server.api('POST', '/audit', { body: { action: '\ufeffa', result: 'blocked' }, unchecked: true });
    expect(refused.body.error.message).toMatch(/may not begin with a byte order mark \(U\+FEFF\)/);
    const kept = await server.api('POST', '/agents', { body: { name: 'Bot\ufeffX', provider: 'local', slug: 'bom-inside' } });
    expect(kept.status).toBe(201);
    expect((await server.api('GET', '/agents/bom-inside')).body.data.name).toBe('Bot\ufeffX');
  });

  it('accepts the same requests without the offending input', async () => {
    expect((await server.api('POST', '/agents', { body: { name: 'ab', provider: 'local' } })).status).toBe(201);
    expect((await server.api('POST', '/approvals', { body: { title: 't', context: nested(10) } })).status).toBe(201);
  });

  it('accepts and keeps well-formed surrogate pairs (characters outside the BMP)', async () => {
    const created = await server.api('POST', '/agents', { body: { name: 'bot \u{1F916}', provider: 'local', slug: 'emoji-bot' } });
    expect(created.status).toBe(201);
    expect((await server.api('GET', '/agents/emoji-bot')).body.data.name).toBe('bot \u{1F916}');
    const event = await server.api('POST', '/audit', {
      body: { action: 'emoji.\u{1F600}', result: 'blocked', context: { '\u{1F600}': '\u{1D11E}' } },
    });
    expect(event.status).toBe(201);
  });

  it('answers a query holding the UTF-8 bytes of a surrogate without a 5xx (they decode to U+FFFD)', async () => {
    const res = await server.api('GET', '/audit-logs?agent=%ED%A0%80&action=%ED%B0%80');
    expect(res.status).toBe(200);
    expect(res.body.data).toEqual([]);
  });
});
