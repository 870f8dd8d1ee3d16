/**
 * `warden … --json` gives one JSON document on stdout however it is run: directly, through
 * `npm run -s warden -- …`, through npm's own `--json` (`npm run warden --json -- …`); plain
 * `npm run warden -- … --json` (npm prints its banner on stdout first) says so on stderr with
 * the fix. List commands print a table for a person and JSON with `--json`. A refused egress
 * target names WARDEN_EGRESS_ALLOWLIST.
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
const NPM = process.platform === 'win32' ? 'npm.cmd' : 'npm';

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

function run(command: string, args: string[], env: NodeJS.ProcessEnv, timeoutMs = 60_000): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk) => {
      stdout += chunk;
    });
    child.stderr.on('data', (chunk) => {
      stderr += chunk;
    });
    const timer = setTimeout(() => {
      try {
        process.kill(-(child.pid as number), 'SIGKILL');
      } catch {
        // gone
      }
    }, timeoutMs);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

describe('warden --json and list output, on an embedded data directory', () => {
  let dir: string;
  let env: NodeJS.ProcessEnv;
  const warden = (args: string[]) => run(process.execPath, [CLI, ...args], env);
  const npm = (args: string[]) => run(NPM, args, env, 90_000);

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'warden-cli-json-'));
    env = { ...process.env, WARDEN_DATA_DIR: join(dir, 'data') };
    // What would change how npm or the CLI print: none of the caller's.
    for (const name of ['DATABASE_URL', 'npm_config_json', 'npm_config_loglevel', 'npm_lifecycle_event', 'WARDEN_EGRESS_ALLOWLIST'])
      delete env[name];
    const created = await warden(['workspaces', 'create', '--slug', 'acme', '--json']);
    expect(created.code, created.stderr).toBe(0);
    const key = await warden([
      'keys',
      'create',
      '--workspace',
      'acme',
      '--permissions',
      'agents:read,audit:read',
      '--name',
      'ci-bot',
      '--json',
    ]);
    expect(key.code, key.stderr).toBe(0);
  }, 120_000);
  afterAll(() => {
    rmSync(dir, { recursive: true, force: true });
  });

  it('keys list --json prints the keys as one JSON array; without --json a table with a header', async () => {
    const json = await warden(['keys', 'list', '--workspace', 'acme', '--json']);
    expect(json.code, json.stderr).toBe(0);
    expect(JSON.parse(json.stdout)).toEqual([
      expect.objectContaining({ name: 'ci-bot', permissions: ['agents:read', 'audit:read'], revoked_at: null }),
    ]);
    const human = await warden(['keys', 'list', '--workspace', 'acme']);
    expect(human.code, human.stderr).toBe(0);
    const [header, row, ...rest] = human.stdout.trimEnd().split('\n');
    expect(header).toMatch(/^ID\s+PREFIX\s+NAME\s+CREATED_AT\s+REVOKED_AT\s+PERMISSIONS$/);
    expect(row).toMatch(/^[0-9a-f-]{36}\s+wk_\S{4}\s+ci-bot\s+\S+Z\s+-\s+agents:read,audit:read$/);
    expect(rest).toEqual([]);
  }, 60_000);

  it('webhooks list --json prints [] for a workspace without endpoints; without --json it says so', async () => {
    const json = await warden(['webhooks', 'list', '--workspace', 'acme', '--json']);
    expect(json.code, json.stderr).toBe(0);
    expect(JSON.parse(json.stdout)).toEqual([]);
    const human = await warden(['webhooks', 'list', '--workspace', 'acme']);
    expect(human.stdout.trim()).toBe('no webhook endpoints');
  }, 60_000);

  it('npm run -s warden -- keys list --json: stdout is the JSON alone', async () => {
    const result = await npm(['run', '-s', 'warden', '--', 'keys', 'list', '--workspace', 'acme', '--json']);
    expect(result.code, result.stderr).toBe(0);
    expect(JSON.parse(result.stdout)).toHaveLength(1);
    expect(result.stderr).not.toContain('npm printed its banner');
  }, 90_000);

  it("npm run warden --json -- keys list (npm's own --json): the banner goes to stderr and stdout is the JSON", async () => {
    const result = await npm(['run', 'warden', '--json', '--', 'keys', 'list', '--workspace', 'acme']);
    expect(result.code, result.stderr).toBe(0);
    expect(JSON.parse(result.stdout)).toEqual([expect.objectContaining({ name: 'ci-bot' })]);
    expect(result.stderr).toContain('> warden');
  }, 90_000);

  it('npm run warden -- keys list --json: npm puts its banner on stdout, and the CLI says on stderr how to get the JSON alone', async () => {
    const result = await npm(['run', 'warden', '--', 'keys', 'list', '--workspace', 'acme', '--json']);
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toMatch(/^\s*> warden/);
    expect(JSON.parse(result.stdout.trim().split('\n').at(-1) as string)).toHaveLength(1);
    expect(result.stderr).toContain(
      'warden: npm printed its banner on stdout before the JSON; for the JSON alone run `npm run -s warden -- …` or `npx warden …`',
    );
  }, 90_000);

  it('webhooks create to a plain-http URL is refused with a message naming WARDEN_EGRESS_ALLOWLIST and the entry to add', async () => {
    const result = await warden(['webhooks', 'create', '--workspace', 'acme', '--url', 'http://hooks.example.com/warden', '--events', '*']);
    expect(result.code).toBe(1);
    expect(result.stdout).not.toContain('whsec_');
    expect(result.stderr).toContain('add hooks.example.com to WARDEN_EGRESS_ALLOWLIST');
  }, 60_000);
});
