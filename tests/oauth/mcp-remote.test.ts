/**
 * `mcp-remote` (the stdio bridge clients such as Claude Desktop launch) completes its OAuth
 * flow against Warden with nothing but the URL: it finds the metadata, registers, prints the
 * authorization URL (its browser step, driven here by headless Chromium: sign-in and consent),
 * receives the code on its loopback callback, and then relays MCP over stdio: tools are listed
 * and called as the agent consented to.
 */
import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { existsSync, mkdtempSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Browser, chromium } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type CountingUpstream, startCountingUpstream } from '../mcp-gateway/support.ts';
import { keyFor, useTestServer } from '../support/server.ts';

const CHROMIUM = '/usr/bin/chromium';
const HAS_CHROMIUM = existsSync(CHROMIUM);
if (!HAS_CHROMIUM && process.env.CI === 'true') throw new Error(`${CHROMIUM} is missing: apt-get install -y chromium`);
const PROXY = createRequire(import.meta.url).resolve('mcp-remote/dist/proxy.js');
const WAIT_MS = 30_000;

const server = useTestServer({ egressAllowlist: ['127.0.0.1/32'] });
let upstream: CountingUpstream;
let browser: Browser | undefined;
let bridge: ChildProcessWithoutNullStreams | undefined;
let admin: string;

beforeAll(async () => {
  upstream = await startCountingUpstream();
  admin = await keyFor(server, 'admin,agents:read,agents:write,mcp_servers:write,audit:read', 'remote');
  const api = (path: string, body: unknown) => server.api('POST', path as '/agents', { key: admin, body, unchecked: true });
  expect((await api('/mcp-servers', { name: 'tools', slug: 'tools', transport_url: upstream.url })).status).toBe(201);
  expect((await api('/agents', { name: 'Bridge', slug: 'bridge', provider: 'local' })).status).toBe(201);
  if (HAS_CHROMIUM)
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--no-first-run'],
    });
}, 60_000);
afterAll(async () => {
  bridge?.kill();
  await browser?.close();
  await upstream?.close();
});

/** Resolves with the first match of `pattern` in what `read` accumulates, or fails after WAIT_MS. */
function waitFor(read: () => string, pattern: RegExp): Promise<RegExpExecArray> {
  const deadline = Date.now() + WAIT_MS;
  return new Promise((resolve, reject) => {
    const poll = () => {
      const match = pattern.exec(read());
      if (match) return resolve(match);
      if (Date.now() > deadline) return reject(new Error(`not seen in time: ${pattern}\n${read().slice(-2000)}`));
      setTimeout(poll, 50);
    };
    poll();
  });
}

describe.skipIf(!HAS_CHROMIUM)('mcp-remote', () => {
  it('completes its OAuth flow (browser step headless), then lists and calls tools as the agent', async () => {
    let stderr = '';
    let stdout = '';
    bridge = spawn(process.execPath, [PROXY, `${server.url}/mcp/tools`, '--transport', 'http-only'], {
      // its own token store; BROWSER=true: the bridge's attempt to open a browser does nothing (Chromium below does it)
      env: { ...process.env, MCP_REMOTE_CONFIG_DIR: mkdtempSync(join(tmpdir(), 'warden-mcp-remote-')), BROWSER: 'true' },
    });
    bridge.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
    });
    bridge.stdout.on('data', (chunk: Buffer) => {
      stdout += chunk.toString();
    });
    const authorize = new URL((await waitFor(() => stderr, /Please authorize this client by visiting:\s*(\S+)/))[1] as string);
    expect(`${authorize.origin}${authorize.pathname}`).toBe(`${server.origin}/authorize`);
    expect(authorize.searchParams.get('code_challenge_method')).toBe('S256');

    const page = await (browser as Browser).newPage();
    try {
      await page.goto(authorize.href);
      await page.getByTestId('login-key').fill(admin);
      await page.getByTestId('login-submit').click();
      await page.getByTestId('consent-card').waitFor();
      await page.getByTestId('consent-agent').selectOption({ label: 'Bridge (bridge)' });
      await page.getByTestId('consent-allow').click();
      await page.waitForURL((url) => url.hostname === 'localhost' && url.searchParams.has('code'));
    } finally {
      await page.close();
    }

    const send = (message: unknown) => bridge?.stdin.write(`${JSON.stringify(message)}\n`);
    const answer = async (id: number) => {
      const line = await waitFor(() => stdout, new RegExp(`^(\\{.*"id":${id}[,}].*)$`, 'm'));
      return JSON.parse(line[1] as string);
    };
    send({
      jsonrpc: '2.0',
      id: 1,
      method: 'initialize',
      params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'stdio-client', version: '1' } },
    });
    expect((await answer(1)).result.serverInfo).toBeDefined();
    send({ jsonrpc: '2.0', method: 'notifications/initialized' });
    send({ jsonrpc: '2.0', id: 2, method: 'tools/list', params: {} });
    expect((await answer(2)).result.tools.map((t: { name: string }) => t.name)).toContain('echo');
    send({ jsonrpc: '2.0', id: 3, method: 'tools/call', params: { name: 'echo', arguments: { text: 'via mcp-remote' } } });
    expect((await answer(3)).result.content).toEqual([{ type: 'text', text: 'via mcp-remote' }]);

    const audit = await server.api('GET', '/audit-logs', { key: admin, query: { action: 'mcp.call', limit: 10 }, unchecked: true });
    expect(audit.body.data.some((e: { agent: string; result: string }) => e.agent === 'bridge' && e.result === 'allowed')).toBe(true);
  }, 120_000);
});
