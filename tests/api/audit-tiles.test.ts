/**
 * The audit log as C2SP tlog-tiles (`/api/v1/audit/log`), followed by a verifier no one at Warden
 * wrote the checking parts of: a small Go program (tests/support/tlog-verifier) built against
 * Go's own transparency-log packages as Debian ships them (golang-golang-x-mod-dev:
 * sumdb/note, sumdb/tlog). Over a 10,000-event log it opens the checkpoint with the log's vkey,
 * reads every hash it needs through tlog.TileHashReader (each tile checked against the signed
 * root), proves 100 leaves included (each read from its entry bundle) and 50 older signed
 * checkpoints consistent; with one bit of one tile flipped on the way, it refuses.
 *
 * Without Go and those packages the file is skipped, except under CI=true, where it fails.
 */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer, request as httpRequest, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { keyFor, useTestServer } from '../support/server.ts';

const run = promisify(execFile);
const GO_MOD = '/usr/share/gocode/src/golang.org/x/mod/sumdb/tlog';
const HAS_GO = existsSync('/usr/bin/go') && existsSync(GO_MOD);
if (!HAS_GO && process.env.CI === 'true')
  throw new Error('Go and its x/mod packages are missing: apt-get install -y golang-go golang-golang-x-mod-dev');

const EVENTS = 10_000;
// the log is written as fast as 16 writers go: no rate limit in the way
const server = useTestServer({ auditSealIntervalMs: 50, auditCheckpointIntervalMs: 100, rateLimitPerMinute: 10_000_000 });
let dir: string;
let verifier: string;
let reader: string;
/** Older signed checkpoints, seen while the log grew. */
const older = new Set<string>();

const tile = (path: string, key = reader) => fetch(`${server.url}/audit/log/${path}`, { headers: { authorization: `Bearer ${key}` } });

beforeAll(async () => {
  if (!HAS_GO) return;
  dir = await mkdtemp(join(tmpdir(), 'warden-tlog-'));
  verifier = join(dir, 'verifier');
  const built = run('go', ['build', '-o', verifier, 'main.go'], {
    cwd: new URL('../support/tlog-verifier/', import.meta.url).pathname,
    env: { ...process.env, GO111MODULE: 'off', GOPATH: '/usr/share/gocode', GOCACHE: join(dir, 'gocache'), GOFLAGS: '' },
  });
  reader = server.key;
  // the log grows by concurrent writers; its checkpoints are kept as a monitor would
  let written = 0;
  const writer = async () => {
    while (written < EVENTS) {
      written += 1;
      const res = await server.api('POST', '/audit', {
        body: { agent: 'tiles-bot', action: `refund.${written}`, resource: `orders/${written}`, result: 'blocked', severity: 'low' },
      });
      expect(res.status).toBe(201);
    }
  };
  const watching = { on: true };
  const watcher = (async () => {
    while (watching.on) {
      const res = await tile('checkpoint');
      if (res.status === 200) older.add(await res.text());
      await new Promise((resolve) => setTimeout(resolve, 40));
    }
  })();
  try {
    const started = Date.now();
    await Promise.all(Array.from({ length: 16 }, writer));
    console.log(`${EVENTS} events written in ${Date.now() - started} ms`);
    // every event sealed and checkpointed
    for (let attempt = 0; ; attempt++) {
      const note = await (await tile('checkpoint')).text();
      if (Number(note.split('\n')[1]) >= EVENTS) break;
      if (attempt > 600) throw new Error(`no checkpoint of every event within 60 s: ${note.slice(0, 200)}`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  } finally {
    watching.on = false;
    await watcher;
  }
  await built;
}, 600_000);
afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** Runs the Go verifier against `url` (the log, or a proxy of it): its exit and what it printed. */
async function verify(url: string, checkpoints: string[]): Promise<{ ok: boolean; out: string }> {
  const vkey = (await server.api('GET', '/audit/signing-key')).body.data.verifier_key;
  const file = join(dir, `older-${Math.random()}`);
  await writeFile(file, checkpoints.join('---\n'));
  try {
    const { stdout } = await run(verifier, [url, reader, vkey, '100', file], { timeout: 120_000 });
    return { ok: true, out: stdout };
  } catch (error) {
    const failed = error as { stderr?: string; code?: number };
    return { ok: false, out: failed.stderr ?? String(error) };
  }
}

describe.skipIf(!HAS_GO)('the audit log as tlog-tiles, read by Go’s sumdb/tlog', () => {
  it('verifies the checkpoint, 100 inclusion proofs and 50 consistency proofs over 10,000 events', { timeout: 180_000 }, async () => {
    const checkpoints = [...older].filter((note) => Number(note.split('\n')[1]) < EVENTS).slice(-50);
    expect(checkpoints.length).toBe(50);
    const result = await verify(`${server.url}/audit/log`, checkpoints);
    expect(result.out).toMatch(/^checkpoint \d+ verified: 100 inclusion proofs, 50 consistency proofs$/m);
    expect(result.ok).toBe(true);
  });

  it('is refused when one bit of one tile is flipped on the way', { timeout: 180_000 }, async () => {
    let flipped = 0;
    const proxy: Server = createServer((req, res) => {
      const forwarded = httpRequest(`${server.url}/audit/log${req.url}`, { headers: req.headers }, (answer) => {
        const chunks: Buffer[] = [];
        answer.on('data', (chunk: Buffer) => chunks.push(chunk));
        answer.on('end', () => {
          const body = Buffer.concat(chunks);
          // the first level-1 tile: a hash every proof over the log needs
          if (req.url?.startsWith('/tile/1/') && body.length > 40) {
            body[40] = (body[40] as number) ^ 0x01;
            flipped += 1;
          }
          res.writeHead(answer.statusCode ?? 502, answer.headers);
          res.end(body);
        });
      });
      forwarded.on('error', () => res.destroy());
      forwarded.end();
    });
    await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
    try {
      const result = await verify(`http://127.0.0.1:${(proxy.address() as AddressInfo).port}`, []);
      expect(flipped).toBeGreaterThan(0);
      expect(result.ok).toBe(false);
      expect(result.out).toMatch(/tiles do not make the signed root|inconsistent|malformed|invalid/i);
    } finally {
      proxy.closeAllConnections();
      await new Promise<void>((resolve) => proxy.close(() => resolve()));
    }
  });

  it('serves tiles only as tlog-tiles names them, to a key with audit:read', async () => {
    const full = await tile('tile/0/000');
    expect(full.status).toBe(200);
    expect(full.headers.get('cache-control')).toContain('immutable');
    expect(full.headers.get('vary')).toContain('Authorization');
    expect((await full.arrayBuffer()).byteLength).toBe(256 * 32);
    // a partial tile is the start of the full one
    const fullBytes = Buffer.from(await (await tile('tile/0/000')).arrayBuffer());
    expect(Buffer.from(await (await tile('tile/0/000.p/7')).arrayBuffer())).toEqual(fullBytes.subarray(0, 7 * 32));
    // entry bundles: 256 length-prefixed canonical events
    const bundle = Buffer.from(await (await tile('tile/entries/000')).arrayBuffer());
    let offset = 0;
    let entries = 0;
    while (offset < bundle.length) {
      const length = bundle.readUInt16BE(offset);
      JSON.parse(bundle.subarray(offset + 2, offset + 2 + length).toString('utf8'));
      offset += 2 + length;
      entries += 1;
    }
    expect(entries).toBe(256);
    // one spelling per tile; none beyond the log
    for (const path of ['tile/0/x000/000', 'tile/0/0', 'tile/0/000.p/256', 'tile/0/000.p/0', 'tile/8/000', 'tile/0/x001/000', 'other']) {
      const missing = await tile(path);
      expect(missing.status, path).toBe(404);
      expect(missing.headers.get('cache-control'), path).toBe('no-store');
    }
    const reads = await keyFor(server, 'policies:read', 'tiles-no-audit');
    expect((await tile('tile/0/000', reads)).status).toBe(403);
    expect((await fetch(`${server.url}/audit/log/checkpoint`)).status).toBe(401);
  });
});
