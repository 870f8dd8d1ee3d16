/**
 * What one large upstream MCP message costs a Warden server process (issue 35, attack 4):
 * starts Warden (embedded database, a data dir of its own) from `--root` (default: this
 * checkout), an upstream on loopback whose `big` tool answers any number of bytes (as SSE or
 * JSON), and for each size calls it once through the gateway (an SDK client), while another
 * agent calls a small tool every 20 ms. Prints the server's RSS before, its peak
 * during (VmHWM, reset first) and after, and the other agent's slowest call meanwhile.
 *
 *   tools/with-node24 npx tsx tools/bench/mcp-message-memory.ts [--root DIR] [--sizes 30,80]
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { cpuMs, freePort, memoryMb, ROOT } from './procs.ts';

const { values } = parseArgs({ options: { root: { type: 'string', default: ROOT }, sizes: { type: 'string', default: '30,80' } } });
const sizes = (values.sizes as string).split(',').map(Number);
const MB = 1024 * 1024;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

// upstreams in processes of their own (one answers the large messages, one the other agent's
// calls): building their answers stalls neither this process's clients nor each other
const upstreamModule = new URL('../../tests/security/mcp-bounds-upstream.ts', import.meta.url).href;
const upstreams = [0, 1].map(() =>
  spawn(
    process.execPath,
    [
      '--import',
      'tsx',
      '--input-type=module',
      '-e',
      `const m = await import(${JSON.stringify(upstreamModule)}); console.log((await m.startBoundsUpstream()).url);`,
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  ),
);
const [upstream, probeUpstream] = await Promise.all(
  upstreams.map(
    (child) =>
      new Promise<{ url: string }>((resolve) => child.stdout?.once('data', (chunk: Buffer) => resolve({ url: chunk.toString().trim() }))),
  ),
);
const dataDir = mkdtempSync(join(tmpdir(), 'warden-mem-'));
const port = await freePort();
const bootstrap = `wk_memory_${'0'.repeat(32)}`;
const server = spawn(process.execPath, ['--import', 'tsx', 'apps/server/src/main.ts'], {
  cwd: values.root,
  env: {
    ...process.env,
    PORT: String(port),
    WARDEN_DATA_DIR: dataDir,
    WARDEN_BOOTSTRAP_KEY: bootstrap,
    WARDEN_EGRESS_ALLOWLIST: '127.0.0.1/32',
    WARDEN_RATE_LIMIT_PER_MINUTE: '100000',
    NODE_ENV: 'production',
  },
  stdio: ['ignore', 'ignore', 'inherit'],
});
const base = `http://127.0.0.1:${port}/api/v1`;
try {
  for (let i = 0; ; i++) {
    if (
      await fetch(`${base}/health`).then(
        (r) => r.ok,
        () => false,
      )
    )
      break;
    if (i > 3000) throw new Error('Warden did not start');
    await sleep(100);
  }
  const api = async (key: string, path: string, body: unknown) => {
    const res = await fetch(`${base}${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    if (!res.ok) throw new Error(`${path}: ${res.status} ${await res.text()}`);
    return (await res.json()) as { data: Record<string, unknown> };
  };
  for (const mode of ['sse', 'json']) {
    await api(bootstrap, '/mcp-servers', { name: `tools ${mode}`, slug: `tools-${mode}`, transport_url: `${upstream?.url}/${mode}` });
    await api(bootstrap, '/mcp-servers', { name: `probe ${mode}`, slug: `probe-${mode}`, transport_url: `${probeUpstream?.url}/${mode}` });
  }
  /** An agent of its own, and an SDK client on the gateway acting for it. */
  const agent = async (name: string, server: string) => {
    const agentKey = `ak_${name}_${'1'.repeat(24)}`;
    await api(bootstrap, '/agents', { name, slug: name, provider: 'local', api_key: agentKey });
    const client = new Client({ name, version: '1.0.0' });
    await client.connect(
      new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${port}/api/v1/mcp/${server}`), {
        requestInit: { headers: { authorization: `Bearer ${agentKey}` } },
      }),
    );
    return client;
  };
  const rows: string[] = [];
  for (const mode of ['sse', 'json']) {
    const caller = await agent(`big-${mode}`, `tools-${mode}`);
    const other = await agent(`other-${mode}`, `probe-${mode}`);
    for (const size of sizes) {
      await caller.callTool({ name: 'big', arguments: { bytes: 10 } });
      await other.callTool({ name: 'big', arguments: { bytes: 10 } });
      await sleep(1_000);
      const before = memoryMb(server.pid as number).rss;
      writeFileSync(`/proc/${server.pid}/clear_refs`, '5');
      let running = true;
      let slowest = 0;
      const probe = (async () => {
        while (running) {
          const started = performance.now();
          await other.callTool({ name: 'big', arguments: { bytes: 10 } });
          slowest = Math.max(slowest, performance.now() - started);
          await sleep(20);
        }
      })();
      const cpuBefore = cpuMs(server.pid as number);
      const started = performance.now();
      const result = await caller.callTool({ name: 'big', arguments: { bytes: size * MB } }, undefined, { timeout: 120_000 });
      const took = performance.now() - started;
      const cpu = cpuMs(server.pid as number) - cpuBefore;
      running = false;
      await probe;
      const peak = memoryMb(server.pid as number).hwm;
      await sleep(1_000);
      const after = memoryMb(server.pid as number).rss;
      const answer = result.isError
        ? `tool error: ${(result.content as { text: string }[])[0]?.text.slice(0, 160)}`
        : `${((result.content as { text: string }[])[0]?.text.length ?? 0) / MB} MB`;
      rows.push(
        `${mode.padEnd(4)} ${String(size).padStart(3)} MB: RSS ${before.toFixed(0)} MB before, peak ${peak.toFixed(0)} (+${(peak - before).toFixed(0)}), ` +
          `after ${after.toFixed(0)} (+${(after - before).toFixed(0)}); call ${took.toFixed(0)} ms (${answer}), Warden CPU ${cpu.toFixed(0)} ms; other agent's slowest call ${slowest.toFixed(0)} ms`,
      );
    }
    await caller.close();
    await other.close();
  }
  console.log(rows.join('\n'));
} finally {
  server.kill('SIGTERM');
  await new Promise((resolve) => server.once('exit', resolve));
  for (const child of upstreams) child.kill('SIGTERM');
  rmSync(dataDir, { recursive: true, force: true });
}
