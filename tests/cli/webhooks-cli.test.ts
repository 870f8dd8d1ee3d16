/**
 * `warden webhooks …` and `warden billing set-plan` as a user runs them: the CLI as a child
 * process (`node tools/warden.mjs`, what `npm run warden` runs) on a temporary embedded data directory
 * (DATABASE_URL removed). Creating an endpoint only checks its URL: nothing is sent to
 * hooks.example.com.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
/** What `npx tsx` runs, without npx's start-up cost. */
/** What `npm run warden` runs: the CLI, built (tools/warden.mjs). */
const CLI = join(ROOT, 'tools/warden.mjs');
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
/** One CLI process opens (and on first use initialises) the embedded database: seconds, but far more on a busy machine. */
const CLI_TIMEOUT = 90_000;
/** A test runs up to three CLI processes. */
const TEST_TIMEOUT = 3 * CLI_TIMEOUT;

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
  timedOut: boolean;
}

let dataDir: string;
let env: NodeJS.ProcessEnv;
beforeAll(() => {
  dataDir = mkdtempSync(join(tmpdir(), 'warden-webhooks-cli-'));
  env = { ...process.env, WARDEN_DATA_DIR: dataDir };
  for (const name of ['DATABASE_URL', 'WARDEN_BOOTSTRAP_KEY', 'WARDEN_EGRESS_ALLOWLIST', 'WARDEN_MASTER_KEY', 'PORT']) delete env[name];
});
afterAll(() => {
  rmSync(dataDir, { recursive: true, force: true });
});

/** Runs `warden …` to its end, or kills its process group after CLI_TIMEOUT. */
function warden(args: string[]): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, ...args], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    let stdout = '';
    let stderr = '';
    let timedOut = false;
    child.stdout.on('data', (chunk) => {
      stdout += chunk;
    });
    child.stderr.on('data', (chunk) => {
      stderr += chunk;
    });
    const timer = setTimeout(() => {
      timedOut = true;
      try {
        process.kill(-(child.pid as number), 'SIGKILL');
      } catch {
        // already gone
      }
    }, CLI_TIMEOUT);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr, timedOut });
    });
  });
}

/** Runs the CLI with --json, expects success and one JSON document on stdout. */
async function wardenJson(args: string[]) {
  const run = await warden([...args, '--json']);
  expect(run.timedOut, `warden ${args.join(' ')} was killed after ${CLI_TIMEOUT / 1000} s`).toBe(false);
  expect(run.code, `warden ${args.join(' ')} failed:\n${run.stderr}`).toBe(0);
  return JSON.parse(run.stdout.trim());
}

describe('warden webhooks and billing (embedded data directory)', { timeout: TEST_TIMEOUT }, () => {
  let endpointId: string | undefined;

  it('workspaces create --slug shop --json creates the workspace', async () => {
    expect(await wardenJson(['workspaces', 'create', '--slug', 'shop'])).toMatchObject({ slug: 'shop' });
  });

  it("webhooks create --workspace shop --url https://… --events '*' --json prints the endpoint's id and its whsec_ secret", async () => {
    const created = await wardenJson([
      'webhooks',
      'create',
      '--workspace',
      'shop',
      '--url',
      'https://hooks.example.com/x',
      '--events',
      '*',
    ]);
    expect(created).toMatchObject({ url: 'https://hooks.example.com/x', events: ['*'], paused: false, disabled: false });
    expect(created.id).toMatch(UUID);
    expect(created.secret).toMatch(/^whsec_[A-Za-z0-9+/]+={0,2}$/);
    expect(Buffer.from(created.secret.slice('whsec_'.length), 'base64').length).toBeGreaterThanOrEqual(24);
    endpointId = created.id;
  });

  it('webhooks create without --json prints the id and the secret for a person', async () => {
    const run = await warden([
      'webhooks',
      'create',
      '--workspace',
      'shop',
      '--url',
      'https://hooks.example.com/y',
      '--events',
      'agent.created,billing.updated',
    ]);
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toMatch(/[0-9a-f-]{36}/);
    expect(run.stdout).toMatch(/whsec_[A-Za-z0-9+/=]+/);
    expect(run.stdout).toContain('https://hooks.example.com/y');
  });

  it('webhooks list --workspace shop --json lists both endpoints, without secrets', async () => {
    const list = await wardenJson(['webhooks', 'list', '--workspace', 'shop']);
    expect(Array.isArray(list)).toBe(true);
    expect(list.map((e: { url: string }) => e.url).sort()).toEqual(['https://hooks.example.com/x', 'https://hooks.example.com/y']);
    expect(list.find((e: { url: string }) => e.url === 'https://hooks.example.com/y').events).toEqual(['agent.created', 'billing.updated']);
    expect(JSON.stringify(list)).not.toMatch(/whsec_/);
  });

  it('webhooks pause ID then resume ID toggle paused', async () => {
    expect(endpointId, 'webhooks create must have run').toBeDefined();
    const id = endpointId as string;
    expect(await wardenJson(['webhooks', 'pause', id, '--workspace', 'shop'])).toMatchObject({ id, paused: true });
    expect(await wardenJson(['webhooks', 'resume', id, '--workspace', 'shop'])).toMatchObject({ id, paused: false });
  });

  it('billing set-plan --workspace shop --plan team --json changes the plan', async () => {
    expect(await wardenJson(['billing', 'set-plan', '--workspace', 'shop', '--plan', 'team'])).toMatchObject({
      plan: 'team',
      previous_plan: 'free',
    });
  });

  it('billing set-plan exits non-zero with a message for an unknown plan', async () => {
    const run = await warden(['billing', 'set-plan', '--workspace', 'shop', '--plan', 'platinum', '--json']);
    expect(run.code).not.toBe(0);
    expect(run.stderr).toMatch(/plan/i);
    // The plan did not change.
    expect(await wardenJson(['billing', 'set-plan', '--workspace', 'shop', '--plan', 'business'])).toMatchObject({
      plan: 'business',
      previous_plan: 'team',
    });
  });

  it('webhooks create exits non-zero with a message for an http:// URL that is not allow-listed, printing no secret', async () => {
    const run = await warden([
      'webhooks',
      'create',
      '--workspace',
      'shop',
      '--url',
      'http://hooks.example.com/x',
      '--events',
      '*',
      '--json',
    ]);
    expect(run.code).not.toBe(0);
    expect(run.stderr).toMatch(/https/);
    expect(run.stdout).not.toMatch(/whsec_/);
  });

  it('webhooks create exits non-zero with a message for a private address or an unknown event type', async () => {
    const privateTarget = await warden(['webhooks', 'create', '--workspace', 'shop', '--url', 'https://10.0.0.1/x', '--events', '*']);
    expect(privateTarget.code).not.toBe(0);
    expect(privateTarget.stderr).toMatch(/denied|private/i);
    const unknownEvent = await warden([
      'webhooks',
      'create',
      '--workspace',
      'shop',
      '--url',
      'https://hooks.example.com/z',
      '--events',
      'agent.exploded',
    ]);
    expect(unknownEvent.code).not.toBe(0);
    expect(unknownEvent.stderr).toMatch(/agent\.exploded/);
  });

  it('webhooks commands exit non-zero with a message for an unknown workspace or endpoint', async () => {
    const noWorkspace = await warden(['webhooks', 'list', '--workspace', 'nowhere']);
    expect(noWorkspace.code).not.toBe(0);
    expect(noWorkspace.stderr).toMatch(/nowhere/);
    const noEndpoint = await warden(['webhooks', 'pause', '00000000-0000-4000-8000-000000000000', '--workspace', 'shop']);
    expect(noEndpoint.code).not.toBe(0);
    expect(noEndpoint.stderr).toMatch(/not found|does not exist|no webhook/i);
  });

  it('webhooks delete ID removes the endpoint; the refused creations left nothing behind', async () => {
    const id = endpointId as string;
    expect(await wardenJson(['webhooks', 'delete', id, '--workspace', 'shop'])).toEqual({ id, deleted: true });
    const list = await wardenJson(['webhooks', 'list', '--workspace', 'shop']);
    expect(list.map((e: { id: string }) => e.id)).not.toContain(id);
    expect(list).toHaveLength(1);
  });
});
