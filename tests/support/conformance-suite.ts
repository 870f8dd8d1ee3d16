/**
 * Running the official MCP conformance suite (`@modelcontextprotocol/conformance`, pinned) as a
 * child process, and reaching Warden with it: the suite's CLI takes a URL and sends no
 * credentials, so Warden is reached through a loopback proxy that adds an agent's key as the
 * bearer and passes everything else (Host and Origin included) as it came.
 */
import { spawn } from 'node:child_process';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { createServer, request as httpRequest, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export const CONFORMANCE_CLI = new URL('../../node_modules/@modelcontextprotocol/conformance/dist/index.js', import.meta.url).pathname;

export type Status = 'SUCCESS' | 'FAILURE' | 'WARNING' | 'INFO' | 'SKIPPED';
/** Each check's status by `scenario/check id`. */
export type Checks = Map<string, { status: Status; error?: string }>;

/** Loopback proxies that add `Authorization: Bearer <key>` to each request; closed together. */
export class BearerProxies {
  private readonly proxies: Server[] = [];

  /** A proxy to `target` adding the key: the URL the suite is given. */
  async open(target: string, key: string): Promise<string> {
    const to = new URL(target);
    const proxy = createServer((req, res) => {
      const forwarded = httpRequest(
        {
          host: to.hostname,
          port: to.port,
          method: req.method,
          path: to.pathname,
          headers: { ...req.headers, authorization: `Bearer ${key}` },
        },
        (answer) => {
          res.writeHead(answer.statusCode ?? 502, answer.headers);
          answer.pipe(res);
        },
      );
      forwarded.on('error', () => res.destroy());
      req.pipe(forwarded);
    });
    this.proxies.push(proxy);
    await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
    return `http://127.0.0.1:${(proxy.address() as AddressInfo).port}/mcp`;
  }

  async close(): Promise<void> {
    for (const proxy of this.proxies) {
      proxy.closeAllConnections();
      await new Promise<void>((resolve) => proxy.close(() => resolve()));
    }
  }
}

/**
 * Runs server scenarios against `url`: those a revision requires (`--requirements`), or one
 * named scenario of an extension, forced at revision 2026-07-28 (extensions are on no timeline).
 * `timeoutMs` bounds the whole run.
 */
export async function runConformance(
  url: string,
  selection: { requirements: string } | { scenario: string },
  timeoutMs: number,
): Promise<Checks> {
  const out = await mkdtemp(join(tmpdir(), 'warden-conformance-'));
  const args =
    'requirements' in selection
      ? ['--requirements', selection.requirements]
      : ['--scenario', selection.scenario, '--spec-version', '2026-07-28', '--force'];
  try {
    const child = spawn(process.execPath, [CONFORMANCE_CLI, 'server', '--url', url, ...args, '--output-dir', out], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    child.stderr?.on('data', (chunk: Buffer) => {
      stderr += chunk.toString('utf8');
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    // exit 1 only says that a check failed: the checks say which
    const code = await new Promise<number | null>((resolve) => child.once('exit', (exit) => resolve(exit)));
    clearTimeout(timer);
    if (code !== 0 && code !== 1) throw new Error(`the conformance suite ended with ${code}: ${stderr}`);
    const checks: Checks = new Map();
    for (const dir of await readdir(out)) {
      const scenario = /^server-(.+)-\d{4}-\d{2}-\d{2}T[\d-]+Z$/.exec(dir)?.[1];
      if (!scenario) continue;
      // a scenario that broke off (its client threw) leaves no checks: that is a failure of its own
      const written = await readFile(join(out, dir, 'checks.json'), 'utf8').catch(() => undefined);
      const list = (written ? JSON.parse(written) : [{ id: 'scenario-completed', status: 'FAILURE' }]) as {
        id: string;
        status: Status;
        errorMessage?: string;
      }[];
      for (const check of list) checks.set(`${scenario}/${check.id}`, { status: check.status, error: check.errorMessage });
    }
    return checks;
  } finally {
    await rm(out, { recursive: true, force: true });
  }
}

/** The ids of the checks that passed. */
export const passedChecks = (checks: Checks) => [...checks].filter(([, c]) => c.status === 'SUCCESS').map(([id]) => id);
