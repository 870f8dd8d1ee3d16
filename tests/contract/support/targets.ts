/**
 * What the contract suite runs against: a Prism mock of the bundled spec, a Warden server on
 * an embedded database started here (with loopback upstreams its egress guard lets through),
 * or a server already running at a URL. Used by tools/contract.ts; the vitest file starts its
 * server with tests/support/server.ts (which also runs on PostgreSQL) and the upstreams below.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer as createHttpServer, type Server } from 'node:http';
import { type AddressInfo, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startTestMcpServer } from '../../support/mcp-server.ts';
import type { ContractTarget } from './contract-suite.ts';

export const ROOT = fileURLToPath(new URL('../../..', import.meta.url));
export const SPEC_FILE = join(ROOT, 'spec/dist/openapi.json');

export interface StartedTarget extends ContractTarget {
  close(): Promise<void>;
}

export async function freePort(): Promise<number> {
  const probe = createServer();
  await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
  const { port } = probe.address() as AddressInfo;
  await new Promise((resolve) => probe.close(resolve));
  return port;
}

/** Prism (static: the spec's examples) on loopback, on `port` or a free one; Prism ignores the base path. */
export async function startMockTarget(specFile = SPEC_FILE, port?: number): Promise<StartedTarget> {
  port ??= await freePort();
  const child: ChildProcess = spawn(
    join(ROOT, 'node_modules/.bin/prism'),
    ['mock', specFile, '--host', '127.0.0.1', '--port', String(port), '--dynamic', 'false'],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let output = '';
  child.stdout?.on('data', (chunk) => {
    output += chunk;
  });
  child.stderr?.on('data', (chunk) => {
    output += chunk;
  });
  const baseUrl = `http://127.0.0.1:${port}`;
  const close = async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGTERM');
    await exited;
  };
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`prism exited with ${child.exitCode}:\n${output}`);
    try {
      await fetch(`${baseUrl}/health`);
      break;
    } catch {
      if (Date.now() > deadline) {
        await close();
        throw new Error(`prism did not listen within 60 s:\n${output}`);
      }
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
  }
  return { name: 'mock', kind: 'mock', baseUrl, key: 'wk_contract_mock_key', close };
}

/** An HTTP upstream for allowed executions: answers every request with a small JSON body. */
async function startHttpUpstream(): Promise<{ url: string; close: () => Promise<void> }> {
  const server: Server = createHttpServer((req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ orders: [], path: req.url }));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    close: async () => {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

/** Loopback HTTP and MCP upstreams; the server must allow 127.0.0.1/32 (WARDEN_EGRESS_ALLOWLIST). */
export async function startUpstreams(): Promise<{ http: string; mcp: string; close: () => Promise<void> }> {
  const http = await startHttpUpstream();
  const mcp = await startTestMcpServer();
  return {
    http: http.url,
    mcp: mcp.url,
    close: async () => {
      await mcp.close();
      await http.close();
    },
  };
}

/** A Warden server on a fresh embedded database in a temporary directory, removed on close. */
export async function startLocalTarget(port = 0): Promise<StartedTarget> {
  const { startServer } = await import('../../../apps/server/src/server.ts');
  const { createLogger } = await import('../../../apps/server/src/logger.ts');
  const dataDir = mkdtempSync(join(tmpdir(), 'warden-contract-'));
  const key = `wk_contract_${randomBytes(24).toString('base64url')}`;
  const upstreams = await startUpstreams();
  try {
    const server = await startServer(
      {
        port,
        host: '127.0.0.1',
        databaseUrl: undefined,
        dataDir,
        bootstrapKey: key,
        egressAllowlist: ['127.0.0.1/32'],
        validateResponses: true,
        auditSealIntervalMs: 100,
        auditCheckpointIntervalMs: 200,
      },
      createLogger(process.env.WARDEN_CONTRACT_LOGS !== 'true'),
    );
    return {
      name: `local (${server.url}, embedded database in ${dataDir})`,
      kind: 'server',
      baseUrl: server.url,
      key,
      upstreams,
      close: async () => {
        await server.close();
        await upstreams.close();
        rmSync(dataDir, { recursive: true, force: true });
      },
    };
  } catch (error) {
    await upstreams.close();
    rmSync(dataDir, { recursive: true, force: true });
    throw error;
  }
}

/**
 * A target already running at `url`, taken exactly as given (a trailing slash aside): Warden's
 * API is at `…/api/v1`, a Prism mock (`kind: 'mock'`, `npm run mock`) at its root.
 */
export function urlTarget(url: string, key: string, kind: StartedTarget['kind'] = 'server'): StartedTarget {
  const baseUrl = url.replace(/\/+$/, '');
  return { name: kind === 'mock' ? `mock at ${baseUrl}` : baseUrl, kind, baseUrl, key, close: async () => {} };
}
