/**
 * A workspace that publishes its audit log (`audit_log_public`, issue 52 item 1): anyone follows
 * it as C2SP tlog-tiles at /api/v1/audit/logs/<workspace id>/ without a key — the same bytes the
 * keyed URL serves, cached as public — and nobody does while the setting is off (404, the
 * answer for a workspace that does not exist), nor for another workspace.
 */
import { describe, expect, it } from 'vitest';
import { keyFor, useTestServer } from '../support/server.ts';
import { until } from '../support/until.ts';

const server = useTestServer({ auditSealIntervalMs: 50, auditCheckpointIntervalMs: 50 });
const anonymous = (workspaceId: string, path: string) => fetch(`${server.url}/audit/logs/${workspaceId}/${path}`);
const keyed = (path: string) => fetch(`${server.url}/audit/log/${path}`, { headers: { authorization: `Bearer ${server.key}` } });

async function workspaceId(key = server.key): Promise<string> {
  return ((await server.api('GET', '/audit/signing-key', { key })).body.data.key_name as string).split('/audit/')[1] as string;
}

/** The log checkpointed at its head; its size. */
async function checkpointed(): Promise<number> {
  return until(
    'the log checkpointed at its head',
    async () => {
      const head = (await server.api('GET', '/audit/verify')).body.data;
      const served = (await server.api('GET', '/audit/checkpoint')).body.data;
      return head.unsealed === 0 && served?.tree_size === head.tree_size && head.tree_size;
    },
    30_000,
  );
}

describe('a public audit log', () => {
  it('is not served without a key until the workspace publishes it, then serves what the keyed URL serves', async () => {
    const id = await workspaceId();
    for (let i = 0; i < 3; i++)
      expect((await server.api('POST', '/audit', { body: { action: `public.${i}`, result: 'blocked', agent: 'pub' } })).status).toBe(201);
    let size = await checkpointed();

    for (const path of ['checkpoint', `tile/0/000.p/${size}`, `tile/entries/000.p/${size}`, 'nothing']) {
      const refused = await anonymous(id, path);
      expect(refused.status, path).toBe(404);
      expect(refused.headers.get('cache-control')).toBe('no-store');
    }
    expect((await anonymous('00000000-0000-4000-8000-000000000000', 'checkpoint')).status).toBe(404);
    expect((await anonymous('not-a-uuid', 'checkpoint')).status).toBe(404);

    const published = await server.api('PATCH', '/settings', { body: { audit_log_public: true } });
    expect(published.status).toBe(200);
    expect(published.body.data.audit_log_public).toBe(true);
    // the change is an act like any other: audited with the field it set
    const events = (await server.api('GET', '/audit-logs', { query: { action: 'settings.updated', limit: 1 } })).body.data;
    expect(events[0]?.context).toMatchObject({ fields: ['audit_log_public'], audit_log_public: true });

    size = await checkpointed();
    const checkpoint = await anonymous(id, 'checkpoint');
    expect(checkpoint.status).toBe(200);
    expect(await checkpoint.text()).toBe(await (await keyed('checkpoint')).text());
    for (const path of [`tile/0/000.p/${size}`, `tile/entries/000.p/${size}`]) {
      const tile = await anonymous(id, path);
      expect(tile.status, path).toBe(200);
      expect(tile.headers.get('cache-control')).toBe('public, max-age=31536000, immutable');
      expect(Buffer.from(await tile.arrayBuffer()).equals(Buffer.from(await (await keyed(path)).arrayBuffer())), path).toBe(true);
    }
    expect((await anonymous(id, 'tile/0/x000')).status).toBe(404);

    // another workspace's log stays its own
    const other = await keyFor(server, '*', 'unpublished');
    expect((await anonymous(await workspaceId(other), 'checkpoint')).status).toBe(404);

    expect((await server.api('PATCH', '/settings', { body: { audit_log_public: false } })).status).toBe(200);
    expect((await anonymous(id, 'checkpoint')).status).toBe(404);
  });
});
