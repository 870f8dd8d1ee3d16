/**
 * The outbox fan-out keeps up with sustained load: at the default poll (1 s) a round takes
 * outbox events 200 at a time and must keep taking them until the outbox is drained, or the
 * events of a busy workspace would reach webhooks later and later (a fixed 200 a second).
 */
import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { useTestServer } from '../support/server.ts';

const server = useTestServer({ webhookPollMs: 1_000 });

const undispatched = async () =>
  Number(
    (await sql<{ n: string }>`select count(*) as n from outbox_events where dispatched_at is null`.execute(server.database.db)).rows[0]?.n,
  );

describe('outbox fan-out (DeliveryWorker)', () => {
  it('dispatches 1,000 events that arrived at once within the next two rounds, not 200 a second', async () => {
    const workspace = await sql<{ id: string }>`select id from workspaces where slug = 'default'`.execute(server.database.db);
    const workspaceId = workspace.rows[0]?.id as string;
    // As a burst of decisions leaves them: 1,000 outbox events committed at one moment.
    await sql`insert into outbox_events (workspace_id, id, type, data)
      select ${workspaceId}::uuid, gen_random_uuid(), 'audit.created', '{"event":{}}'::jsonb from generate_series(1, 1000)`.execute(
      server.database.db,
    );
    const written = Date.now();
    let left = await undispatched();
    while (left > 0 && Date.now() - written < 2_500) {
      await new Promise((resolve) => setTimeout(resolve, 100));
      left = await undispatched();
    }
    expect(left, `outbox events still undispatched ${Date.now() - written} ms after they were written`).toBe(0);
  });
});
