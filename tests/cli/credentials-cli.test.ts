/**
 * `warden credentials set|list|delete` on an embedded data directory: the secret is read from
 * stdin or WARDEN_CREDENTIAL_SECRET, never from the command line, and nothing the CLI prints
 * shows it (only the header and the hint). Setting an existing name rotates its secret.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
/** What `npm run warden` runs: the CLI, built (tools/warden.mjs). */
const CLI = join(ROOT, 'tools/warden.mjs');
/** One CLI process opens the embedded database: seconds, far more on a busy machine. */
const CLI_TIMEOUT = 90_000;
const SECRET = 'sk_cli_secret_from_stdin_0123456789ABCD';
const ROTATED = 'sk_cli_secret_from_env_9876543210WXYZ';

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

let dataDir: string;
let env: NodeJS.ProcessEnv;
beforeAll(() => {
  dataDir = mkdtempSync(join(tmpdir(), 'warden-credentials-cli-'));
  env = { ...process.env, WARDEN_DATA_DIR: dataDir };
  for (const name of ['DATABASE_URL', 'WARDEN_BOOTSTRAP_KEY', 'WARDEN_MASTER_KEY', 'WARDEN_CREDENTIAL_SECRET', 'PORT']) delete env[name];
});
afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

/** Runs `warden …` with `stdin` written to it, to its end (its process group killed after CLI_TIMEOUT). */
function warden(args: string[], stdin = '', extraEnv: Record<string, string> = {}): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, ...args], { cwd: ROOT, env: { ...env, ...extraEnv }, stdio: 'pipe', detached: true });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk) => {
      stdout += chunk;
    });
    child.stderr.on('data', (chunk) => {
      stderr += chunk;
    });
    child.stdin.end(stdin);
    const timer = setTimeout(() => {
      try {
        process.kill(-(child.pid as number), 'SIGKILL');
      } catch {
        // already gone
      }
    }, CLI_TIMEOUT);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

describe('warden credentials (embedded data directory)', { timeout: 4 * CLI_TIMEOUT }, () => {
  const outputs: string[] = [];
  const run = async (args: string[], stdin?: string, extraEnv?: Record<string, string>) => {
    const result = await warden(args, stdin, extraEnv);
    outputs.push(result.stdout, result.stderr);
    return result;
  };

  it('set reads the secret from stdin and prints the header and hint only', async () => {
    expect((await run(['workspaces', 'create', '--slug', 'shop'])).code).toBe(0);
    const set = await run(['credentials', 'set', 'stripe', '--workspace', 'shop', '--hosts', 'api.stripe.com', '--json'], `${SECRET}\n`);
    expect(set.code, set.stderr).toBe(0);
    expect(JSON.parse(set.stdout)).toMatchObject({
      name: 'stripe',
      hosts: ['api.stripe.com'],
      auth: { type: 'bearer', header: 'authorization', hint: '…ABCD' },
    });
  });

  it('set on an existing name rotates the secret, here from WARDEN_CREDENTIAL_SECRET; list shows the new hint', async () => {
    const rotated = await run(['credentials', 'set', 'stripe', '--workspace', 'shop', '--header', 'X-Api-Key'], '', {
      WARDEN_CREDENTIAL_SECRET: ROTATED,
    });
    expect(rotated.code, rotated.stderr).toBe(0);
    expect(rotated.stdout).toContain('credential stripe (x-api-key: …WXYZ) for api.stripe.com');
    const listed = await run(['credentials', 'list', '--workspace', 'shop', '--json']);
    expect(JSON.parse(listed.stdout)).toMatchObject([{ name: 'stripe', auth: { header: 'x-api-key', hint: '…WXYZ' } }]);
  });

  it('refuses a set without a secret (exit 2) and bad input with the API’s message (exit 1)', async () => {
    const empty = await run(['credentials', 'set', 'other', '--workspace', 'shop', '--hosts', 'example.com'], '');
    expect(empty.code).toBe(2);
    expect(empty.stderr).toMatch(/no secret/);
    const badHeader = await run(
      ['credentials', 'set', 'other', '--workspace', 'shop', '--hosts', 'example.com', '--header', 'Host'],
      'abcdefghijklmnop',
    );
    expect(badHeader.code).toBe(1);
    expect(badHeader.stderr).toMatch(/cannot carry a credential/);
  });

  it('delete removes it; no output ever carried a secret', async () => {
    expect((await run(['credentials', 'delete', 'stripe', '--workspace', 'shop'])).code).toBe(0);
    expect(JSON.parse((await run(['credentials', 'list', '--workspace', 'shop', '--json'])).stdout)).toEqual([]);
    const all = outputs.join('\n');
    for (const secret of [SECRET, ROTATED, 'abcdefghijklmnop']) expect(all).not.toContain(secret);
  });
});
