/**
 * Tampering with the audit log by someone who can write the database (triggers disabled) and
 * runs the server's own code to recompute the tree, but does not hold the signing key: every
 * tampering is seen by the offline verifier (`warden audit verify`, run as a child process)
 * from a checkpoint file copied before it, which names the first bad index.
 *
 * The server checkpoints every 50 ms and the test waits for a checkpoint after each event, so a
 * checkpoint exists at every size and the verifier can name the tampered index exactly. A signed
 * root commits to its whole prefix, nothing finer: with fewer checkpoints, a rewrite is bounded
 * to the events between the last checkpoint that matches and the first that does not, and the
 * report gives the start of that range (the one-checkpoint variant below shows it).
 */
import { spawn } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type Kysely, sql } from 'kysely';
import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DB } from '../../apps/server/src/db/schema.ts';
import { generateSigningKey, noteSigner, signCheckpoint } from '../../apps/server/src/features/audit/checkpoint.ts';
import { Frontier, nodeMap } from '../../apps/server/src/features/audit/merkle.ts';
import type { ExportLine, OfflineReport } from '../../apps/server/src/features/audit/offline-verify.ts';
import { readNodes, recordSeals, sealsWithEvents } from '../../apps/server/src/features/audit/tree.repository.ts';
import { appendEvents, type EventFields, headOf } from '../../apps/server/src/features/audit/tree.ts';
import { verifyCheckpoint } from '../../packages/sdk/src/index.ts';
import { keyFor, startTestServer, type TestServer } from '../support/server.ts';
import { until } from '../support/until.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
/** What `npx tsx` runs, without npx's start-up cost. */
/** What `npm run warden` runs: the CLI, built (tools/warden.mjs). */
const CLI = join(ROOT, 'tools/warden.mjs');

/** Events the test writes per workspace, one checkpoint after each. */
const N = 8;

interface Workspace {
  slug: string;
  key: string;
  id: string;
  vkey: string;
  /** Events the workspace had before the test's (its configuration changes are audited too). */
  base: number;
  /** Its tree's size once the test's events are written: base + N. */
  size: number;
}

let server: TestServer;
let dir: string;
let checkpointFile: string;
/** The checkpoint file as it was before any tampering: what an auditor keeps outside. */
let snapshot: string;
const workspaces: Record<string, Workspace> = {};
const SLUGS = ['control', 'cut', 'rewound', 'rewritten', 'dropped'] as const;

// ---- a webhook receiver -------------------------------------------------------------------------

interface Received {
  headers: IncomingHttpHeaders;
  body: string;
}
const received: Received[] = [];
const receiver = createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (chunk: Buffer) => chunks.push(chunk));
  req.on('end', () => {
    received.push({ headers: req.headers, body: Buffer.concat(chunks).toString('utf8') });
    res.writeHead(200).end('ok');
  });
});
let webhookSecret: string;

// ---- helpers ------------------------------------------------------------------------------------

const checkpointSize = async (ws: Workspace) => {
  const res = await server.api('GET', '/audit/checkpoint', { key: ws.key });
  return res.status === 200 ? (res.body.data.tree_size as number) : 0;
};

/** Runs `warden …` (no database: nothing in its environment points to one). */
function warden(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const env = { ...process.env };
  for (const name of ['DATABASE_URL', 'WARDEN_DATA_DIR']) delete env[name];
  env.WARDEN_DATA_DIR = join(dir, 'no-data'); // never opened: verify needs no database
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, ...args], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk) => {
      stdout += chunk;
    });
    child.stderr.on('data', (chunk) => {
      stderr += chunk;
    });
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

/** `warden audit verify … --json`: its exit code and report. */
async function verifyOffline(exportFile: string, checkpointFiles: string[], vkey: string) {
  const run = await warden([
    'audit',
    'verify',
    '--export',
    exportFile,
    ...checkpointFiles.flatMap((f) => ['--checkpoint', f]),
    '--public-key',
    vkey,
    '--json',
  ]);
  expect(run.stderr).toBe('');
  return { code: run.code, report: JSON.parse(run.stdout) as OfflineReport };
}

/** The workspace's export, page by page through the admin command the CLI sends (the admin channel's path). */
async function exportLog(ws: Workspace, name: string, { withCheckpoints = true } = {}): Promise<{ file: string; lines: ExportLine[] }> {
  const lines: ExportLine[] = [];
  let cursor: string | undefined;
  do {
    const page = await server.admin('audit.export', { workspace: ws.slug, cursor });
    lines.push(...(page.lines as ExportLine[]));
    cursor = page.cursor ?? undefined;
  } while (cursor !== undefined);
  const kept = withCheckpoints ? lines : lines.filter((line) => line.type !== 'checkpoint');
  const file = join(dir, `${name}.ndjson`);
  writeFileSync(file, kept.map((line) => `${JSON.stringify(line)}\n`).join(''));
  return { file, lines };
}

/** The snapshot's checkpoints of one workspace whose sizes `keep` accepts, as a file. */
function snapshotOf(ws: Workspace, name: string, keep: (size: number) => boolean): string {
  const lines = readFileSync(snapshot, 'utf8')
    .split('\n')
    .filter((line) => line.length > 0 && JSON.parse(line).workspace_id === ws.id && keep(JSON.parse(line).tree_size));
  const file = join(dir, `${name}.ndjson`);
  writeFileSync(file, `${lines.join('\n')}\n`);
  return file;
}

// ---- the attacker: writes the database with triggers off, recomputes with the server's code -----

async function asAttacker(work: (trx: Kysely<DB>) => Promise<void>): Promise<void> {
  await server.database.db.transaction().execute(async (trx) => {
    await sql`SET LOCAL session_replication_role = replica`.execute(trx);
    await sql`SELECT 1 FROM audit_tree_heads FOR UPDATE`.execute(trx);
    await work(trx);
  });
}

/** The tree's right edge at `size`, from its stored nodes. */
async function frontierAt(trx: Kysely<DB>, workspaceId: string, size: number): Promise<Frontier> {
  const rows = await readNodes(
    trx,
    Frontier.nodesToRestore(size).map(({ level, index }) => ({ workspace_id: workspaceId, level, node_index: index })),
  );
  return Frontier.restore(
    size,
    nodeMap(rows.map((row) => ({ level: row.level, index: row.node_index, hash: Buffer.from(row.hash!, 'hex') }))),
  );
}

/** Rebuilds the tree from leaf `from` on with `events` (seals, nodes and head), as the sealer would. */
async function rebuildFrom(trx: Kysely<DB>, workspaceId: string, from: number, events: EventFields[]): Promise<void> {
  const frontier = await frontierAt(trx, workspaceId, from);
  await sql`DELETE FROM audit_seals WHERE workspace_id = ${workspaceId} AND sequence > ${from}`.execute(trx);
  await sql`DELETE FROM audit_tree_nodes WHERE workspace_id = ${workspaceId} AND ((node_index + 1) << level) > ${from}`.execute(trx);
  const { seals, nodes } = appendEvents(frontier, events);
  await recordSeals(trx, workspaceId, seals, nodes, headOf(frontier));
  const head = headOf(frontier);
  await sql`UPDATE audit_tree_heads SET tree_size = ${head.size}, root_hash = ${head.root} WHERE workspace_id = ${workspaceId}`.execute(
    trx,
  );
}

/** The sealed events from leaf `from` on, with their rows. */
async function eventsFrom(trx: Kysely<DB>, workspaceId: string, from: number) {
  return (await sealsWithEvents(trx, workspaceId, from, 1000)) as unknown as (EventFields & { sequence: number })[];
}

// ---- setup --------------------------------------------------------------------------------------

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'warden-audit-tamper-'));
  checkpointFile = join(dir, 'checkpoints.ndjson');
  await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
  server = await startTestServer({
    auditCheckpointFile: checkpointFile,
    auditCheckpointIntervalMs: 50,
    auditSealIntervalMs: 50,
    egressAllowlist: ['127.0.0.1/32'],
  });
  for (const slug of SLUGS) {
    const key = await keyFor(server, '*', slug);
    const signing = (await server.api('GET', '/audit/signing-key', { key })).body.data;
    const id = (signing.key_name as string).split('/audit/')[1] as string;
    workspaces[slug] = { slug, key, id, vkey: signing.verifier_key, base: 0, size: 0 };
  }
  const url = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
  webhookSecret = (await server.admin('webhooks.create', { workspace: 'control', url, events: 'audit.checkpoint' })).secret;
  // The events of the set-up (key and endpoint created) sealed and checkpointed first, so the test's follow them.
  for (const ws of Object.values(workspaces)) {
    ws.base = await until(`the set-up events of ${ws.slug} sealed`, async () => {
      const { data } = (await server.api('GET', '/audit/verify', { key: ws.key })).body;
      return data.unsealed === 0 && data.tree_size;
    });
    ws.size = ws.base + N;
    await until(`checkpoint ${ws.base} of ${ws.slug}`, async () => (await checkpointSize(ws)) === ws.base);
  }

  // N blocked events in each workspace, a checkpoint of every size in between.
  for (let i = 0; i < N; i++) {
    for (const ws of Object.values(workspaces)) {
      const res = await server.api('POST', '/audit', { key: ws.key, body: { action: `op.${i}`, result: 'blocked', agent: 'tamper-test' } });
      expect(res.status).toBe(201);
    }
    for (const ws of Object.values(workspaces))
      await until(`checkpoint ${ws.base + i + 1} of ${ws.slug}`, async () => (await checkpointSize(ws)) === ws.base + i + 1);
  }
  snapshot = join(dir, 'snapshot.ndjson');
  copyFileSync(checkpointFile, snapshot);
}, 60_000);

afterAll(async () => {
  await server?.close();
  await new Promise<void>((resolve) => receiver.close(() => resolve()));
  rmSync(dir, { recursive: true, force: true });
});

// ---- tests --------------------------------------------------------------------------------------

describe('the offline verifier on an untampered log', () => {
  it('verifies it (exit 0) against the checkpoint file, every checkpoint matching', async () => {
    const ws = workspaces.control!;
    const { file, lines } = await exportLog(ws, 'control');
    expect(lines[0]).toMatchObject({ type: 'log', origin: ws.vkey.split('+')[0], workspace_id: ws.id, tree_size: ws.size });
    const events = lines.filter((line) => line.type === 'event');
    expect(events.map((line) => line.index)).toEqual([...Array(ws.size).keys()]);
    const checkpoints = lines.filter((line) => line.type === 'checkpoint').map((line) => line.tree_size);
    expect(checkpoints.slice(-N)).toEqual([...Array(N).keys()].map((i) => ws.base + i + 1));

    const { code, report } = await verifyOffline(file, [snapshot], ws.vkey);
    expect(report).toMatchObject({
      valid: true,
      events: ws.size,
      tree_size: ws.size,
      checkpoints: checkpoints.length,
      checkpoints_outside: checkpoints.length,
      verified_size: ws.size,
      first_bad_index: null,
      problems: [],
    });
    // The other workspaces' lines in the shared file are skipped.
    const fileLines = readFileSync(snapshot, 'utf8').trim().split('\n');
    expect(report.other_logs).toBe(fileLines.length - checkpoints.length);
    expect(code).toBe(0);

    const human = await warden(['audit', 'verify', '--export', file, '--checkpoint', snapshot, '--public-key', ws.vkey]);
    expect(human.code).toBe(0);
    expect(human.stdout).toContain(
      `VALID: every event hashes to its leaf and the tree makes every signed checkpoint, up to size ${ws.size}`,
    );
  });

  it('reports a checkpoint signed by another key, and every checkpoint when verified with another key', async () => {
    const ws = workspaces.control!;
    const { file, lines } = await exportLog(ws, 'control-forged');
    const checkpoints = lines.filter((line) => line.type === 'checkpoint').length;
    const latest = (await server.api('GET', '/audit/checkpoint', { key: ws.key })).body.data;
    const origin = latest.origin as string;
    const forger = noteSigner(generateSigningKey(), origin);
    const forged = join(dir, 'forged.txt');
    writeFileSync(
      forged,
      signCheckpoint({ origin, size: ws.size, rootHash: Buffer.from(latest.root_hash, 'hex'), time: new Date() }, forger),
    );

    const withForged = await verifyOffline(file, [snapshot, forged], ws.vkey);
    expect(withForged.code).toBe(1);
    expect(withForged.report.problems).toEqual([
      expect.objectContaining({ kind: 'bad_checkpoint', index: null, message: expect.stringMatching(/no signature by a known key/) }),
    ]);

    const otherKey = await verifyOffline(file, [snapshot], forger.vkey);
    expect(otherKey.code).toBe(1);
    expect(otherKey.report.checkpoints).toBe(0);
    expect(otherKey.report.problems.filter((p) => p.kind === 'bad_checkpoint')).toHaveLength(2 * checkpoints); // the export's and the file's
    expect(otherKey.report.problems.map((p) => p.kind)).toContain('no_checkpoint');
  });

  it('a checkpoint delivered by the audit.checkpoint webhook verifies with the public key (SDK), and as a checkpoint file', async () => {
    const ws = workspaces.control!;
    const hooks = await until('the checkpoint webhooks', async () => {
      const bodies = received.filter((r) => JSON.parse(r.body).type === 'audit.checkpoint');
      return bodies.some((r) => JSON.parse(r.body).data.checkpoint.tree_size === ws.size) && bodies;
    });
    const sizes = new Set<number>();
    for (const hook of hooks) {
      const payload = new Webhook(webhookSecret).verify(hook.body, {
        'webhook-id': String(hook.headers['webhook-id']),
        'webhook-timestamp': String(hook.headers['webhook-timestamp']),
        'webhook-signature': String(hook.headers['webhook-signature']),
      }) as { type: string; data: { checkpoint: { origin: string; tree_size: number; root_hash: string; note: string } } };
      const { checkpoint } = payload.data;
      const verified = await verifyCheckpoint(checkpoint.note, ws.vkey, { origin: checkpoint.origin });
      expect(verified.size).toBe(checkpoint.tree_size);
      expect(Buffer.from(verified.rootHash).toString('hex')).toBe(checkpoint.root_hash);
      sizes.add(verified.size);
    }
    // One per size since the endpoint was created.
    expect([...sizes].sort((a, b) => a - b).slice(-N)).toEqual([...Array(N).keys()].map((i) => ws.base + i + 1));

    const last = hooks.find((hook) => JSON.parse(hook.body).data.checkpoint.tree_size === ws.size)!;
    const hookFile = join(dir, 'webhook.json');
    writeFileSync(hookFile, last.body);
    const { file } = await exportLog(ws, 'control-hook', { withCheckpoints: false });
    const { code, report } = await verifyOffline(file, [hookFile], ws.vkey);
    expect(report).toMatchObject({ valid: true, checkpoints: 1, checkpoints_outside: 1, verified_size: ws.size });
    expect(code).toBe(0);
  });
});

/**
 * Each tampering, verified three ways from the snapshot: with the export as the database gives
 * it (its checkpoints intact), without the export's checkpoints (the attacker deleted them too),
 * and with the snapshot's largest checkpoint alone (one checkpoint held outside).
 */
async function expectReported(
  ws: Workspace,
  tampered: number,
  expected: { kinds: string[]; oneCheckpoint: { kinds: string[]; index: number } },
) {
  const full = await exportLog(ws, `${ws.slug}-tampered`);
  const stripped = await exportLog(ws, `${ws.slug}-stripped`, { withCheckpoints: false });
  const latestOnly = snapshotOf(ws, `${ws.slug}-latest`, (size) => size === ws.size);
  const [asExported, outsideOnly, oneCheckpoint] = await Promise.all([
    verifyOffline(full.file, [snapshot], ws.vkey),
    verifyOffline(stripped.file, [snapshot], ws.vkey),
    verifyOffline(stripped.file, [latestOnly], ws.vkey),
  ]);
  const results = { asExported, outsideOnly, oneCheckpoint };
  for (const [variant, { code, report }] of Object.entries(results)) {
    expect(code, variant).toBe(1);
    expect(report.valid, variant).toBe(false);
    const kinds = variant === 'oneCheckpoint' ? expected.oneCheckpoint.kinds : expected.kinds;
    expect(
      report.problems.map((p) => p.kind),
      variant,
    ).toEqual(kinds);
  }
  // Checkpoints one event apart name the tampered index itself.
  expect(results.asExported.report.first_bad_index).toBe(tampered);
  expect(results.outsideOnly.report.first_bad_index).toBe(tampered);
  // One checkpoint only bounds it: the index reported starts the range it lies in, never after it.
  expect(results.oneCheckpoint.report.first_bad_index).toBe(expected.oneCheckpoint.index);
  expect(results.oneCheckpoint.report.first_bad_index).toBeLessThanOrEqual(tampered);
  return results;
}

describe('tampering by a database writer is reported with its first bad index', () => {
  it('(a) the tail deleted (events, seals, nodes) and the tree head rewound: truncated at the first deleted index', async () => {
    const ws = workspaces.cut!;
    const from = ws.base + 5;
    await asAttacker(async (trx) => {
      const doomed = await eventsFrom(trx, ws.id, from);
      expect(doomed).toHaveLength(ws.size - from);
      for (const event of doomed) await sql`DELETE FROM audit_events WHERE workspace_id = ${ws.id} AND id = ${event.id}`.execute(trx);
      await rebuildFrom(trx, ws.id, from, []);
    });
    // The database's own checks see it while its checkpoints are intact.
    expect((await server.api('GET', '/audit/verify', { key: ws.key, query: { full: true } })).body.data).toMatchObject({
      valid: false,
      tree_size: from,
    });

    const { asExported } = await expectReported(ws, from, { kinds: ['truncated'], oneCheckpoint: { kinds: ['truncated'], index: 0 } });
    expect(asExported.report).toMatchObject({ events: from, verified_size: from });
    expect(asExported.report.problems[0]).toMatchObject({ index: from, last_index: ws.size - 1 });
    const human = await warden([
      'audit',
      'verify',
      '--export',
      join(dir, 'cut-tampered.ndjson'),
      '--checkpoint',
      snapshot,
      '--public-key',
      ws.vkey,
    ]);
    expect(human.code).toBe(1);
    expect(human.stdout).toContain(`INVALID: 1 problem, first bad index ${from}\n  index ${from}..${ws.size - 1}: truncated: `);
  });

  it('(b) the tree head alone rewound: truncated at the head', async () => {
    const ws = workspaces.rewound!;
    const to = ws.base + 5;
    await asAttacker(async (trx) => {
      const head = headOf(await frontierAt(trx, ws.id, to));
      await sql`UPDATE audit_tree_heads SET tree_size = ${head.size}, root_hash = ${head.root} WHERE workspace_id = ${ws.id}`.execute(trx);
    });
    const { asExported } = await expectReported(ws, to, { kinds: ['truncated'], oneCheckpoint: { kinds: ['truncated'], index: 0 } });
    expect(asExported.report).toMatchObject({ events: to, tree_size: to });
  });

  it('(c) a blocked event rewritten as allowed, every later seal, node and the head recomputed: the rewritten index', async () => {
    const ws = workspaces.rewritten!;
    const victim = ws.base + 3;
    await asAttacker(async (trx) => {
      const [event] = await eventsFrom(trx, ws.id, victim);
      expect(event).toMatchObject({ result: 'blocked', action: 'op.3' });
      await sql`UPDATE audit_events SET result = 'allowed' WHERE workspace_id = ${ws.id} AND id = ${event!.id}`.execute(trx);
      await rebuildFrom(trx, ws.id, victim, await eventsFrom(trx, ws.id, victim));
    });
    // Every leaf matches its seal and every node its leaves: only a checkpoint shows it.
    expect((await server.api('GET', '/audit/verify', { key: ws.key, query: { full: true } })).body.data).toMatchObject({
      valid: false,
      tree_size: ws.size,
      first_invalid_sequence: null,
      checkpoint: { tree_size: ws.size, valid: false },
    });

    const { asExported, oneCheckpoint } = await expectReported(ws, victim, {
      kinds: ['root_mismatch'],
      oneCheckpoint: { kinds: ['root_mismatch'], index: 0 },
    });
    expect(asExported.report).toMatchObject({ events: ws.size, verified_size: victim });
    expect(asExported.report.problems[0]).toMatchObject({ index: victim, last_index: victim });
    expect(oneCheckpoint.report.problems[0]).toMatchObject({ index: 0, last_index: ws.size - 1 });

    // Two checkpoints around it bound it to the events between them.
    const before = victim - 1;
    const around = snapshotOf(ws, 'rewritten-around', (size) => size === before || size === ws.size);
    const bounded = await verifyOffline(join(dir, 'rewritten-stripped.ndjson'), [around], ws.vkey);
    expect(bounded.code).toBe(1);
    expect(bounded.report.problems).toEqual([expect.objectContaining({ kind: 'root_mismatch', index: before, last_index: ws.size - 1 })]);
  });

  it('(d) an event dropped from the middle and everything after it recomputed: the dropped index', async () => {
    const ws = workspaces.dropped!;
    const dropped = ws.base + 4;
    await asAttacker(async (trx) => {
      const [event] = await eventsFrom(trx, ws.id, dropped);
      expect(event).toMatchObject({ action: 'op.4' });
      await sql`DELETE FROM audit_events WHERE workspace_id = ${ws.id} AND id = ${event!.id}`.execute(trx);
      const rest = (await eventsFrom(trx, ws.id, dropped)).filter((row) => row.id !== null);
      expect(rest).toHaveLength(ws.size - dropped - 1);
      await rebuildFrom(trx, ws.id, dropped, rest);
    });
    // The leaves moved down: the checkpoint of dropped + 1 events no longer matches, and the largest is beyond what is left.
    const { asExported } = await expectReported(ws, dropped, {
      kinds: ['root_mismatch', 'truncated'],
      oneCheckpoint: { kinds: ['truncated'], index: 0 },
    });
    expect(asExported.report).toMatchObject({ events: ws.size - 1, verified_size: dropped });
  });
});
