/**
 * The README's first steps ("First steps with curl" up to "The CLI"), run as printed: the server
 * started with the README's own `npm start` line, every command run by bash in order, and every
 * output the README shows under a command matched against what the command printed
 * (tests/support/walkthrough.ts says how an output is read). When an output drifts, this fails
 * naming the command, what the README shows and what it printed.
 *
 * Paced as a person types: before each command the server has sealed what it recorded and
 * signed a checkpoint of it, so that the counts the README shows (events checked, checkpoints)
 * are those anyone following it sees, not a race. Only three things are changed in what runs:
 * the port (a free one, not 8080), the data directory and the files the walk-through writes
 * (a temporary directory, not the checkout).
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ChildServer, childEnv, startChildServer } from '../reliability/support/child-server.ts';
import { START_CAP_MS } from '../support/child-ready.ts';
import { matchShown, type Step, stepsOf, withKnown } from '../support/walkthrough.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const README = readFileSync(join(ROOT, 'README.md'), 'utf8');
const SECTION = README.slice(README.indexOf('## First steps with curl'), README.indexOf('## The CLI'));
const BLOCKS = [...SECTION.matchAll(/```[a-z]*\n([\s\S]*?)```/g)].map((m) => m[1] as string);
/** The README's start line: `WARDEN_BOOTSTRAP_KEY=<key> npm start`. */
const START = /^WARDEN_BOOTSTRAP_KEY=(\S+) npm start\b/m;
const ASSIGNMENT = /^([A-Z_]+)=(\S+)(\s+#.*)?$/;

describe('the README walk-through, run as printed', () => {
  const dir = mkdtempSync(join(tmpdir(), 'warden-readme-'));
  const key = START.exec(SECTION)?.[1] as string;
  let server: ChildServer;

  beforeAll(async () => {
    expect(key, 'the README starts the server with WARDEN_BOOTSTRAP_KEY=… npm start').toBeTruthy();
    server = await startChildServer({ command: 'npm-start', env: { WARDEN_BOOTSTRAP_KEY: key, WARDEN_DATA_DIR: join(dir, '.data') } });
  }, START_CAP_MS + 30_000);
  afterAll(async () => {
    await server?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  /** What a person's pause gives the server: every event sealed, and a checkpoint of them all (bounded). */
  async function settled(): Promise<void> {
    const headers = { authorization: `Bearer ${key}` };
    const deadline = Date.now() + 30_000;
    while (Date.now() < deadline) {
      const events = (await (await fetch(`${server.url}/audit-logs?limit=100`, { headers })).json()) as {
        data: { sequence: number | null }[];
      };
      const checkpoint = await fetch(`${server.url}/audit/checkpoint`, { headers });
      const size = checkpoint.ok ? ((await checkpoint.json()) as { data: { tree_size: number } }).data.tree_size : 0;
      if (events.data.every((e) => e.sequence !== null) && size === events.data.length) return;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    throw new Error('the server did not seal and checkpoint its events within 30 s');
  }

  /** The command as it runs here: this server's port, files in the temporary directory. */
  const localised = (command: string) =>
    command
      .replaceAll('127.0.0.1:8080', `127.0.0.1:${server.port}`)
      .replace(/(^|\s)\.data\//g, `$1${dir}/.data/`)
      .replace(/(\s|>\s?)([\w-]+\.(?:json|ndjson))\b/g, `$1${dir}/$2`);

  const bash = (script: string) =>
    new Promise<{ stdout: string; stderr: string; code: number }>((resolve) => {
      execFile(
        'bash',
        ['-c', script],
        {
          cwd: ROOT,
          timeout: 120_000,
          // the README's terminal: the embedded database in the walk-through's directory, whatever this run's DATABASE_URL
          env: childEnv({ PATH: `${dirname(process.execPath)}:${process.env.PATH ?? ''}`, WARDEN_DATA_DIR: join(dir, '.data') }),
        },
        (error, stdout, stderr) => resolve({ stdout, stderr, code: error ? Number(error.code ?? 1) : 0 }),
      );
    });

  it('every output the README shows is what its command prints', async () => {
    const steps: Step[] = BLOCKS.filter((block) => !START.test(block)).flatMap(stepsOf);
    expect(steps.filter((s) => s.shown !== null).length, 'outputs found in the README').toBeGreaterThanOrEqual(12);
    const known = new Map<string, string>();
    const assignments: string[] = [];
    let previous: string | null = null;
    for (const step of steps) {
      const command = step.command ?? previous;
      if (command === null) throw new Error('"again" with no command before it');
      if (step.command !== null) previous = step.command;
      if (ASSIGNMENT.test(command)) {
        assignments.push(localised(withKnown(command, known)));
        continue;
      }
      await settled();
      const ran = await bash([...assignments, localised(withKnown(command, known))].join('\n'));
      if (step.shown === null) continue;
      const printed = step.file ? readFileSync(join(dir, step.file), 'utf8') : ran.stdout;
      const shown = localised(withKnown(step.shown, known));
      expect(matchShown(shown, printed, known), `${command}\n\nthe README shows:\n${shown}\n\nit printed:\n${printed}${ran.stderr}`).toBe(
        true,
      );
    }
  }, 300_000);
});
