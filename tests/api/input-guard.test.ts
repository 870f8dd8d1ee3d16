import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../support/server.ts';

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer();
});
afterAll(async () => {
  await server?.close();
});

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
  ])('refuses %s', async (_label, method, path, body) => {
    const res = await server.api(method, path, { body });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('invalid_request');
  });

  it('accepts the same requests without the offending input', async () => {
    expect((await server.api('POST', '/agents', { body: { name: 'ab', provider: 'local' } })).status).toBe(201);
    expect((await server.api('POST', '/approvals', { body: { title: 't', context: nested(10) } })).status).toBe(201);
  });
});
