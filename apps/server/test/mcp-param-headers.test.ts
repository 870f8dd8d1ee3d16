/**
 * `Mcp-Param-*` headers against a tool's `x-mcp-header` declarations (SEP-2243), as the
 * gateway checks them before anything is decided: each declared argument the body carries
 * needs its header from a 2026-07-28 client, with the same value, plain or as a canonical
 * base64 sentinel; a tool never listed is not checked. The declarations one process learned
 * hold in every process of the deployment (the table they share), and a process that kept a
 * server's older declarations sees a newer listing within its refresh.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migratedDatabase } from '../../../tests/support/database.ts';
import type { Database } from '../src/db/database.ts';
import type { McpTarget } from '../src/features/execution/mcp-dialer.ts';
import { paramHeaderStore } from '../src/features/execution/mcp-param-headers.repository.ts';
import { ParamHeaders } from '../src/features/mcp-gateway/param-headers.ts';

let database: Database;
let close: () => Promise<void>;
const target = { id: randomUUID(), workspace_id: randomUUID(), transport_url: 'https://mcp.example/mcp' } as McpTarget;
const moved = { ...target, transport_url: 'https://elsewhere.example/mcp' } as McpTarget;
const tool = {
  name: 'deploy',
  inputSchema: {
    type: 'object' as const,
    properties: {
      region: { type: 'string', 'x-mcp-header': 'Region' },
      count: { type: 'integer', 'x-mcp-header': 'Count' },
      note: { type: 'string' },
    },
  },
};
let headers: ParamHeaders;
beforeAll(async () => {
  ({ database, close } = await migratedDatabase());
  await database.db
    .insertInto('workspaces')
    .values({ id: target.workspace_id, slug: `ws-${target.workspace_id.slice(0, 8)}`, name: 'Param headers' })
    .execute();
  await database.db
    .insertInto('mcp_servers')
    .values({
      workspace_id: target.workspace_id,
      id: target.id,
      slug: 'deployer',
      name: 'Deployer',
      transport_url: target.transport_url,
      transport: 'streamable_http',
    })
    .execute();
  headers = new ParamHeaders(paramHeaderStore(database.db));
  await headers.learn(target, [tool]);
}, 60_000);
afterAll(async () => {
  await close?.();
});
const base64 = (text: string) => `=?base64?${Buffer.from(text).toString('base64')}?=`;
const check = async (args: Record<string, unknown>, sent: Record<string, string | string[]>, required = true, by = headers) =>
  (await by.check(target, 'deploy', args, sent, required))?.message ?? null;

describe('Mcp-Param-* headers', () => {
  it('agree when each declared argument is repeated, plain or base64, numbers as text', async () => {
    expect(await check({ region: 'eu-west', count: 3, note: 'x' }, { 'mcp-param-region': 'eu-west', 'mcp-param-count': '3' })).toBeNull();
    expect(await check({ region: 'zürich' }, { 'mcp-param-region': base64('zürich') })).toBeNull();
    // without the whole sentinel the value is literal
    expect(await check({ region: '=?base64?SGVsbG8=' }, { 'mcp-param-region': '=?base64?SGVsbG8=' })).toBeNull();
  });

  it('disagree on another value, a missing header, a header without its argument, a repeat, a malformed sentinel', async () => {
    expect(await check({ region: 'eu-west' }, { 'mcp-param-region': 'us-east' })).toMatch(/differs/);
    expect(await check({ region: 'eu-west' }, {})).toMatch(/needs the Mcp-Param-Region header/);
    expect(await check({}, { 'mcp-param-region': 'eu-west' })).toMatch(/no argument region/);
    expect(await check({ region: 'a' }, { 'mcp-param-region': ['a', 'a'] })).toMatch(/more than once/);
    // padding left out, and a character outside the alphabet
    expect(await check({ region: 'Hello' }, { 'mcp-param-region': '=?base64?SGVsbG8?=' })).toMatch(/malformed/);
    expect(await check({ region: 'Hello' }, { 'mcp-param-region': '=?base64?SGVs!!!bG8=?=' })).toMatch(/differs/);
  });

  it('asks a legacy client for none, but holds it to those it sends', async () => {
    expect(await check({ region: 'eu-west' }, {}, false)).toBeNull();
    expect(await check({ region: 'eu-west' }, { 'mcp-param-region': 'us-east' }, false)).toMatch(/differs/);
  });

  it('checks nothing of a tool or a server address it has not seen listed', async () => {
    expect(await headers.check(target, 'other', { region: 'x' }, {}, true)).toBeNull();
    expect(await headers.check(moved, 'deploy', { region: 'x' }, {}, true)).toBeNull();
  });

  it('holds in another process, which never saw the listing; a newer listing is seen there after its refresh', async () => {
    const other = new ParamHeaders(paramHeaderStore(database.db));
    expect(await check({ region: 'eu-west' }, { 'mcp-param-region': 'us-east' }, true, other)).toMatch(/differs/);
    // the server drops the header from its tool: listed again here, the other process has its copy
    await headers.learn(target, [{ ...tool, inputSchema: { type: 'object', properties: { region: { type: 'string' } } } }]);
    expect(await check({ region: 'eu-west' }, {}, true, headers)).toBeNull();
    const fresh = new ParamHeaders(paramHeaderStore(database.db));
    expect(await check({ region: 'eu-west' }, {}, true, fresh)).toBeNull();
  });
});
