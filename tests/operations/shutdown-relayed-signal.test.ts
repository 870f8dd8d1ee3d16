/**
 * Issue 38: a server started as `npm start` starts it (npm → tsx's CLI → the server) receives
 * SIGTERM more than once — from the service manager or the terminal, which signal the whole
 * process group, and again from tsx, which relays its own copy. The server subscribed with
 * `process.once`, so the second copy found no handler and the process ended on the spot: the
 * requests it was answering were lost, nothing said it stopped. Here the server runs under tsx's
 * CLI and gets SIGTERM twice, 50 ms apart, while a slow execution is under way: it must finish
 * that request, say it stopped, and exit.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { type ChildServer, randomKey, startChildServer } from '../reliability/support/child-server.ts';
import { freshDatabase } from '../support/database.ts';
import { request } from '../support/server.ts';

const SLOW_UPSTREAM_MS = 1_500;
const key = randomKey('relayed');
let server: ChildServer;
let upstream: Server;
let dataDir: string | undefined;
let drop: (() => Promise<void>) | undefined;

beforeAll(async () => {
  upstream = createServer((_req, res) => {
    setTimeout(() => res.writeHead(200, { 'content-type': 'application/json' }).end('{"slow":true}'), SLOW_UPSTREAM_MS);
  });
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
  let env: Record<string, string>;
  if (process.env.DATABASE_URL) {
    const db = await freshDatabase(process.env.DATABASE_URL, 'warden_relayed_signal');
    drop = db.drop;
    env = { DATABASE_URL: db.url };
  } else {
    dataDir = mkdtempSync(join(tmpdir(), 'warden-relayed-signal-'));
    env = { WARDEN_DATA_DIR: dataDir };
  }
  server = await startChildServer({
    env: { ...env, WARDEN_BOOTSTRAP_KEY: key, WARDEN_EGRESS_ALLOWLIST: '127.0.0.1/32', WARDEN_SHUTDOWN_TIMEOUT_MS: '10000' },
    viaTsxCli: true,
  });
  expect((await request(server.url, key, 'POST', '/agents', { body: { name: 'Relay', provider: 'local', slug: 'relay' } })).status).toBe(
    201,
  );
}, 180_000);

afterAll(async () => {
  await server?.stop();
  await new Promise((resolve) => upstream?.close(resolve));
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  await drop?.();
});

it('finishes the request under way and stops cleanly when SIGTERM arrives twice', async () => {
  // the server is tsx's child (Linux: the children of its only thread)
  const serverPid = Number(readFileSync(`/proc/${server.pid}/task/${server.pid}/children`, 'utf8').trim().split(' ')[0]);
  expect(serverPid).toBeGreaterThan(0);
  const url = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}/slow`;
  const slow = request(server.url, key, 'POST', '/runtime/execute', {
    body: { input: { action: 'http.get', agent: 'relay' }, execution: { mode: 'http_proxy', method: 'GET', url } },
    timeoutMs: 20_000,
  });
  await new Promise((resolve) => setTimeout(resolve, 300));
  process.kill(serverPid, 'SIGTERM');
  await new Promise((resolve) => setTimeout(resolve, 50));
  process.kill(serverPid, 'SIGTERM');

  const answer = await slow;
  expect(answer.status).toBe(200);
  expect(answer.body.data.execution.body).toEqual({ slow: true });
  const deadline = Date.now() + 15_000;
  while (!server.exitStatus() && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 50));
  expect(server.output()).toContain('"message":"warden stopped"');
}, 60_000);
