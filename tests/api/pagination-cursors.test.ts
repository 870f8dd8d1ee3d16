/**
 * Pagination cursors are opaque: anything but a `next_cursor` this API returned answers 400
 * `invalid_request` naming `cursor`, on every paginated endpoint of v1 and of the dashboard
 * API, never a 500 (a crafted timestamp used to reach the database's date parser).
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { type ApiResponse, type DashboardSession, dashboardLogin, useTestServer } from '../support/server.ts';

const server = useTestServer();
let dash: DashboardSession;
let endpointId: string;
beforeAll(async () => {
  dash = await dashboardLogin(server.origin, server.key);
  endpointId = (await server.admin('webhooks.create', { workspace: 'default', url: 'https://hooks.example.com/x', events: '*' })).id;
  for (const name of ['Cursor one', 'Cursor two', 'Cursor three']) {
    expect((await server.api('POST', '/agents', { body: { name, provider: 'local' } })).status).toBe(201);
  }
});

const UUID = '0b6c8f0e-3f0e-4c1a-9a57-2f0b8d1e6c11';
const encode = (value: unknown) => Buffer.from(typeof value === 'string' ? value : JSON.stringify(value)).toString('base64url');

const CRAFTED: [string, string][] = [
  ['base64 of garbage', encode('{{{not json')],
  ['base64 of a JSON object', encode({ at: '2024-01-01T00:00:00.000Z', id: UUID })],
  ['base64 of a JSON string', encode('"cursor"')],
  ['base64 of null', encode('null')],
  ['numbers instead of strings', encode([1, 2])],
  ['a huge number as the timestamp', encode([1e308, UUID])],
  ['a 400-digit timestamp', encode(['9'.repeat(400), UUID])],
  ['a year beyond 9999', encode(['+275760-09-13T00:00:00.000Z', UUID])],
  ['a negative year', encode(['-271821-04-20T00:00:00.000Z', UUID])],
  ['year 0', encode(['0000-01-01T00:00:00.000Z', UUID])],
  ['a timestamp JavaScript reads but PostgreSQL does not ("1")', encode(['1', UUID])],
  ['February 30', encode(['2024-02-30T00:00:00.000Z', UUID])],
  ['month 13', encode(['2024-13-01T00:00:00.000Z', UUID])],
  ['hour 25', encode(['2024-01-01T25:00:00.000Z', UUID])],
  ['a date in words', encode(['Tue Mar 01 2022', UUID])],
  ['a NUL byte in the timestamp', encode(['2024-01-01T00:00:00.000Z\u0000', UUID])],
  ['an id that is not a UUID', encode(['2024-01-01T00:00:00.000Z', 'x'])],
  ['a third element', encode(['2024-01-01T00:00:00.000Z', UUID, 'extra'])],
  ['not base64 at all', '!!!@@@***'],
];

type List = [string, (cursor: string) => Promise<ApiResponse>];
const LISTS: List[] = [
  ...(['/agents', '/policies', '/approvals', '/events', '/audit-logs', '/mcp-servers'] as const).map(
    (path): List => [`GET ${path}`, (cursor) => server.api('GET', path, { query: { cursor } })],
  ),
  ...(['/agents', '/approvals', '/audit-logs', '/webhooks'] as const).map(
    (path): List => [`GET /dashboard/api${path}`, (cursor) => dash.api('GET', path, { query: { cursor } })],
  ),
  ['GET /dashboard/api/webhooks/{id}/deliveries', (cursor) => dash.api('GET', `/webhooks/${endpointId}/deliveries`, { query: { cursor } })],
];

describe('paginated lists with a crafted cursor', () => {
  for (const [list, call] of LISTS) {
    it(`${list} answers 400 invalid_request for every crafted cursor`, async () => {
      const answers = await Promise.all(CRAFTED.map(async ([shape, cursor]) => ({ shape, ...(await call(cursor)) })));
      const wrong = answers
        .filter((a) => a.status !== 400 || a.body?.error?.code !== 'invalid_request' || !/cursor/.test(a.body.error.message))
        .map((a) => `${a.shape}: ${a.status} ${a.body?.error?.code}`);
      expect(wrong).toEqual([]);
    });
  }

  it('GET /agents still follows its own next_cursor to the next page', async () => {
    const first = await server.api('GET', '/agents?limit=2');
    expect(first.status).toBe(200);
    expect(first.body.has_more).toBe(true);
    const second = await server.api('GET', '/agents', { query: { limit: 2, cursor: first.body.next_cursor ?? undefined } });
    expect(second.status).toBe(200);
    expect(second.body.data.map((a: { name: string }) => a.name)).toEqual(['Cursor one']);
  });
});
