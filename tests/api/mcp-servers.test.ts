import type { McpServerCreateWritable as McpServerCreate } from '@warden/contract';
import { describe, expect, it } from 'vitest';
import { keyFor, useTestServer } from '../support/server.ts';

const server = useTestServer();

const create = async (body: McpServerCreate, key?: string) => {
  const res = await server.api('POST', '/mcp-servers', { body, key });
  expect(res.status).toBe(201);
  return res.body.data;
};

describe('POST /mcp-servers (createMcpServer)', () => {
  it('registers a server from name, slug and transport_url with documented defaults', async () => {
    const res = await server.api('POST', '/mcp-servers', {
      body: { name: 'GitHub', slug: 'github', transport_url: 'https://mcp.example.com/mcp' },
    });
    expect(res.status).toBe(201);
    expect(res.body.data).toMatchObject({
      name: 'GitHub',
      slug: 'github',
      transport_url: 'https://mcp.example.com/mcp',
      transport: 'auto',
      description: null,
      enabled: true,
    });
    expect(res.body.data.id).toMatch(/^[0-9a-f-]{36}$/);
    expect(new Date(res.body.data.created_at).toISOString()).toBe(res.body.data.created_at);
  });

  it('derives the slug from the name when none is sent', async () => {
    const res = await server.api('POST', '/mcp-servers', {
      body: { name: 'Linear Issues  Tracker!', transport_url: 'http://mcp.example.com/linear' },
    });
    expect(res.status).toBe(201);
    expect(res.body.data.slug).toBe('linear-issues-tracker');
  });

  it('accepts every documented field', async () => {
    const res = await server.api('POST', '/mcp-servers', {
      body: {
        name: 'Full',
        slug: 'full-mcp',
        transport_url: 'https://mcp.example.com:8443/sse?team=a',
        transport: 'sse',
        description: 'legacy SSE server',
        enabled: false,
      },
    });
    expect(res.status).toBe(201);
    expect(res.body.data).toMatchObject({
      slug: 'full-mcp',
      transport: 'sse',
      description: 'legacy SSE server',
      enabled: false,
      transport_url: 'https://mcp.example.com:8443/sse?team=a',
    });
  });

  it('answers 409 conflict for a slug already used in the workspace', async () => {
    await create({ name: 'First', slug: 'dup-mcp', transport_url: 'https://a.example.com/mcp' });
    const res = await server.api('POST', '/mcp-servers', {
      body: { name: 'Second', slug: 'dup-mcp', transport_url: 'https://b.example.com/mcp' },
    });
    expect(res.status).toBe(409);
    expect(res.body.error.code).toBe('conflict');
  });

  it('answers 409 conflict when the slug derived from the name is taken', async () => {
    await create({ name: 'Derived Twice', transport_url: 'https://a.example.com/mcp' });
    const res = await server.api('POST', '/mcp-servers', { body: { name: 'derived twice', transport_url: 'https://b.example.com/mcp' } });
    expect(res.status).toBe(409);
    expect(res.body.error.code).toBe('conflict');
  });

  it.each([
    ['an ftp: URL', 'ftp://files.example.com/mcp'],
    ['a javascript: URL', 'javascript:alert(1)'],
    ['a file: URL', 'file:///etc/passwd'],
    ['a relative URL', '/mcp'],
    ['a scheme-relative URL', '//mcp.example.com/mcp'],
    ['garbage', 'not a url at all'],
    ['an empty string', ''],
    ['an http prefix without a host', 'http://'],
  ])('answers 400 invalid_request for a transport_url that is %s', async (_label, transport_url) => {
    const res = await server.api('POST', '/mcp-servers', { body: { name: 'Bad URL', transport_url } });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('invalid_request');
    expect(typeof res.body.error.message).toBe('string');
  });

  it.each([
    ['missing name', { transport_url: 'https://mcp.example.com/mcp' }],
    ['missing transport_url', { name: 'x' }],
    ['bad slug', { name: 'x', slug: 'Not A Slug', transport_url: 'https://mcp.example.com/mcp' }],
    ['unknown transport', { name: 'x', transport: 'websocket', transport_url: 'https://mcp.example.com/mcp' }],
    ['unknown field', { name: 'x', transport_url: 'https://mcp.example.com/mcp', colour: 'red' }],
    ['transport_url too long', { name: 'x', transport_url: `https://mcp.example.com/${'a'.repeat(2048)}` }],
  ])('answers 400 invalid_request for %s', async (_label, body) => {
    const res = await server.api('POST', '/mcp-servers', { body, unchecked: true });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('invalid_request');
  });

  it('answers 403 insufficient_permission for a key with only mcp_servers:read', async () => {
    const readOnly = await keyFor(server, 'mcp_servers:read');
    const res = await server.api('POST', '/mcp-servers', {
      body: { name: 'Nope', transport_url: 'https://mcp.example.com/mcp' },
      key: readOnly,
    });
    expect(res.status).toBe(403);
    expect(res.body.error.code).toBe('insufficient_permission');
    expect((await server.api('GET', '/mcp-servers/nope')).status).toBe(404);
  });

  it('answers 401 unauthorized without a key', async () => {
    const res = await server.api('POST', '/mcp-servers', {
      body: { name: 'Anon', transport_url: 'https://mcp.example.com/mcp' },
      key: null,
    });
    expect(res.status).toBe(401);
    expect(res.body).toEqual({ error: { code: 'unauthorized', message: 'A valid API key is required' } });
  });
});

describe('GET /mcp-servers (listMcpServers)', () => {
  it('pages with limit and cursor, newest first, without repeats', async () => {
    const key = await keyFor(server, 'mcp_servers:read,mcp_servers:write', 'mcp-paging');
    for (let i = 0; i < 5; i++) await create({ name: `Pager ${i}`, transport_url: `https://mcp${i}.example.com/mcp` }, key);
    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const res = await server.api('GET', `/mcp-servers?limit=2${cursor ? `&cursor=${cursor}` : ''}`, { key });
      expect(res.status).toBe(200);
      expect(res.body.data.length).toBeLessThanOrEqual(2);
      seen.push(...res.body.data.map((s: { slug: string }) => s.slug));
      cursor = res.body.next_cursor as string | null;
      expect(res.body.has_more).toBe(cursor !== null);
      pages++;
    } while (cursor && pages < 10);
    expect(seen).toEqual(['pager-4', 'pager-3', 'pager-2', 'pager-1', 'pager-0']);
    expect(pages).toBe(3);
  });

  it.each([
    ['limit over 100', 'limit=101'],
    ['limit zero', 'limit=0'],
    ['unknown parameter', 'colour=red'],
    ['forged cursor', 'cursor=bm90LWEtY3Vyc29y'],
  ])('answers 400 invalid_request for %s', async (_label, query) => {
    const res = await server.api('GET', `/mcp-servers?${query}`);
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('invalid_request');
  });

  it('lists with mcp_servers:read alone and refuses a key without it', async () => {
    const reader = await keyFor(server, 'mcp_servers:read');
    expect((await server.api('GET', '/mcp-servers', { key: reader })).status).toBe(200);
    const writerOnly = await keyFor(server, 'mcp_servers:write');
    const res = await server.api('GET', '/mcp-servers', { key: writerOnly });
    expect(res.status).toBe(403);
    expect(res.body.error.code).toBe('insufficient_permission');
  });
});

describe('GET/PATCH/DELETE /mcp-servers/{id}', () => {
  it('gets a server by id and by slug', async () => {
    const created = await create({ name: 'Getter', transport_url: 'https://getter.example.com/mcp' });
    const byId = await server.api('GET', `/mcp-servers/${created.id}`);
    expect(byId.status).toBe(200);
    expect(byId.body.data).toEqual(created);
    const bySlug = await server.api('GET', '/mcp-servers/getter');
    expect(bySlug.status).toBe(200);
    expect(bySlug.body.data).toEqual(created);
  });

  it('answers 404 not_found for an unknown id or slug', async () => {
    const byId = await server.api('GET', '/mcp-servers/00000000-0000-4000-8000-000000000000');
    expect(byId.status).toBe(404);
    expect(byId.body.error.code).toBe('not_found');
    expect((await server.api('GET', '/mcp-servers/no-such-server')).status).toBe(404);
  });

  it('updates fields of a server addressed by id or slug', async () => {
    const created = await create({ name: 'Patcher', transport_url: 'https://old.example.com/mcp' });
    const res = await server.api('PATCH', `/mcp-servers/${created.id}`, {
      body: { transport_url: 'https://new.example.com/mcp', transport: 'streamable_http', description: 'moved', enabled: false },
    });
    expect(res.status).toBe(200);
    expect(res.body.data).toMatchObject({
      id: created.id,
      name: 'Patcher',
      slug: 'patcher',
      transport_url: 'https://new.example.com/mcp',
      transport: 'streamable_http',
      description: 'moved',
      enabled: false,
      created_at: created.created_at,
    });
    const renamed = await server.api('PATCH', '/mcp-servers/patcher', { body: { slug: 'patched', name: 'Patched', description: null } });
    expect(renamed.status).toBe(200);
    expect(renamed.body.data).toMatchObject({ id: created.id, slug: 'patched', name: 'Patched', description: null });
    expect((await server.api('GET', '/mcp-servers/patcher')).status).toBe(404);
    expect((await server.api('GET', '/mcp-servers/patched')).body.data).toEqual(renamed.body.data);
  });

  it.each([
    ['an empty patch', {}],
    ['an ftp: transport_url', { transport_url: 'ftp://files.example.com/mcp' }],
    ['a javascript: transport_url', { transport_url: 'javascript:alert(1)' }],
    ['a relative transport_url', { transport_url: '/mcp' }],
    ['a garbage transport_url', { transport_url: 'garbage' }],
    ['a bad slug', { slug: 'UPPER' }],
    ['an unknown field', { url: 'https://evil.example.com' }],
  ])('answers 400 invalid_request for %s, and changes nothing', async (_label, body) => {
    const created = await create({
      name: `Invalid patch ${Math.random().toString(36).slice(2, 10)}`,
      transport_url: 'https://keep.example.com/mcp',
    });
    const res = await server.api('PATCH', `/mcp-servers/${created.id}`, { body, unchecked: true });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('invalid_request');
    expect((await server.api('GET', `/mcp-servers/${created.id}`)).body.data).toEqual(created);
  });

  it('answers 409 conflict for a taken slug and 404 for an unknown server', async () => {
    const a = await create({ name: 'Slug A', transport_url: 'https://a.example.com/mcp' });
    await create({ name: 'Slug B', transport_url: 'https://b.example.com/mcp' });
    const taken = await server.api('PATCH', `/mcp-servers/${a.id}`, { body: { slug: 'slug-b' } });
    expect(taken.status).toBe(409);
    expect(taken.body.error.code).toBe('conflict');
    const missing = await server.api('PATCH', '/mcp-servers/00000000-0000-4000-8000-000000000000', { body: { enabled: false } });
    expect(missing.status).toBe(404);
    expect(missing.body.error.code).toBe('not_found');
  });

  it('deletes a server, then answers 404 not_found', async () => {
    const created = await create({ name: 'Doomed', transport_url: 'https://doomed.example.com/mcp' });
    const res = await server.api('DELETE', `/mcp-servers/${created.id}`);
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ data: { id: created.id, deleted: true } });
    const again = await server.api('GET', `/mcp-servers/${created.id}`);
    expect(again.status).toBe(404);
    expect(again.body.error.code).toBe('not_found');
    expect((await server.api('GET', '/mcp-servers/doomed')).status).toBe(404);
    expect((await server.api('DELETE', `/mcp-servers/${created.id}`)).status).toBe(404);
    expect((await server.api('PATCH', `/mcp-servers/${created.id}`, { body: { enabled: true } })).status).toBe(404);
  });

  it('deletes a server addressed by slug and frees the slug', async () => {
    const created = await create({ name: 'Recycled', transport_url: 'https://r.example.com/mcp' });
    const res = await server.api('DELETE', '/mcp-servers/recycled');
    expect(res.status).toBe(200);
    expect(res.body.data).toEqual({ id: created.id, deleted: true });
    const again = await create({ name: 'Recycled', transport_url: 'https://r2.example.com/mcp' });
    expect(again.id).not.toBe(created.id);
  });

  it('reads with mcp_servers:read, but patches and deletes only with mcp_servers:write', async () => {
    const created = await create({ name: 'Guarded', transport_url: 'https://guarded.example.com/mcp' });
    const reader = await keyFor(server, 'mcp_servers:read');
    expect((await server.api('GET', `/mcp-servers/${created.id}`, { key: reader })).status).toBe(200);
    const patch = await server.api('PATCH', `/mcp-servers/${created.id}`, { key: reader, body: { enabled: false } });
    expect(patch.status).toBe(403);
    expect(patch.body.error.code).toBe('insufficient_permission');
    const del = await server.api('DELETE', `/mcp-servers/${created.id}`, { key: reader });
    expect(del.status).toBe(403);
    expect(del.body.error.code).toBe('insufficient_permission');
    const unrelated = await keyFor(server, 'agents:read,agents:write');
    expect((await server.api('GET', `/mcp-servers/${created.id}`, { key: unrelated })).status).toBe(403);
    expect((await server.api('GET', `/mcp-servers/${created.id}`)).body.data).toEqual(created);
  });

  it('answers 401 unauthorized without a key', async () => {
    const created = await create({ name: 'Anon target', transport_url: 'https://anon.example.com/mcp' });
    const path = `/mcp-servers/${created.id}` as const;
    for (const res of [
      await server.api('GET', path, { key: null }),
      await server.api('PATCH', path, { key: null, body: { enabled: false } }),
      await server.api('DELETE', path, { key: null }),
    ]) {
      expect(res.status).toBe(401);
      expect(res.body.error.code).toBe('unauthorized');
    }
  });
});

describe('tenant isolation of MCP servers', () => {
  it('never shows, changes or deletes another workspace’s server', async () => {
    const created = await create({ name: 'Private MCP', transport_url: 'https://private.example.com/mcp' });
    const other = await keyFor(server, 'mcp_servers:read,mcp_servers:write', 'mcp-intruder');
    expect((await server.api('GET', `/mcp-servers/${created.id}`, { key: other })).status).toBe(404);
    expect((await server.api('GET', '/mcp-servers/private-mcp', { key: other })).status).toBe(404);
    expect(
      (await server.api('PATCH', `/mcp-servers/${created.id}`, { key: other, body: { transport_url: 'https://evil.example.com/mcp' } }))
        .status,
    ).toBe(404);
    expect((await server.api('DELETE', `/mcp-servers/${created.id}`, { key: other })).status).toBe(404);
    const list = await server.api('GET', '/mcp-servers?limit=100', { key: other });
    expect(list.status).toBe(200);
    expect(list.body.data).toEqual([]);
    expect((await server.api('GET', `/mcp-servers/${created.id}`)).body.data).toEqual(created);
  });

  it('lets two workspaces use the same slug', async () => {
    await create({ name: 'Same', slug: 'same-slug', transport_url: 'https://a.example.com/mcp' });
    const other = await keyFor(server, 'mcp_servers:read,mcp_servers:write', 'mcp-neighbour');
    const res = await server.api('POST', '/mcp-servers', {
      key: other,
      body: { name: 'Same', slug: 'same-slug', transport_url: 'https://b.example.com/mcp' },
    });
    expect(res.status).toBe(201);
  });
});
