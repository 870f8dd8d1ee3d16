/**
 * The backend team's promise (issue 24): edit the spec, `npm run generate`, `npm run typecheck`
 * — and the handler that no longer matches is reported, every time. Turbo caches type checks by
 * the inputs of a package and of the packages it declares as dependencies; the server and the
 * dashboard did not declare the contract package, so a spec change replayed their stale passing
 * check. In a copy of the repository: a cached passing check, then a required field added to
 * `Agent`, then the check must fail at the service that builds agents.
 */
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** The repository's sources, with node_modules linking its workspace packages to the copy's own. */
function copyRepository(): string {
  const sandbox = mkdtempSync(join(tmpdir(), 'warden-typecheck-'));
  const skip = (source: string) => !/[/\\](node_modules|\.turbo|\.data|test-output)([/\\]|$)/.test(source);
  for (const entry of [
    'package.json',
    'package-lock.json',
    'turbo.json',
    'tsconfig.json',
    'tsconfig.base.json',
    'spec',
    'tools',
    'packages',
    'apps',
    'tests/support',
  ]) {
    cpSync(join(ROOT, entry), join(sandbox, entry), { recursive: true, filter: skip });
  }
  const modules = join(sandbox, 'node_modules');
  mkdirSync(modules);
  const workspaces: Record<string, Record<string, string>> = {
    '@warden': { contract: 'packages/contract', server: 'apps/server', dashboard: 'apps/dashboard' },
    '@agentwarden': { sdk: 'packages/sdk' },
  };
  for (const entry of readdirSync(join(ROOT, 'node_modules'))) {
    const own = workspaces[entry];
    if (!own) {
      symlinkSync(join(ROOT, 'node_modules', entry), join(modules, entry));
      continue;
    }
    mkdirSync(join(modules, entry));
    for (const [name, path] of Object.entries(own)) symlinkSync(join(sandbox, path), join(modules, entry, name), 'dir');
  }
  // A workspace's own node_modules holds the versions it pins where the root's differ.
  for (const path of Object.values(workspaces).flatMap(Object.values)) {
    if (existsSync(join(ROOT, path, 'node_modules')))
      symlinkSync(join(ROOT, path, 'node_modules'), join(sandbox, path, 'node_modules'), 'dir');
  }
  // Turbo hashes a git work tree's files as git sees them (the way a developer's checkout is).
  const git = (...args: string[]) =>
    spawnSync('git', ['-c', 'user.name=warden-test', '-c', 'user.email=test@warden.invalid', '-c', 'commit.gpgsign=false', ...args], {
      cwd: sandbox,
    });
  git('init', '-q');
  writeFileSync(join(sandbox, '.gitignore'), 'node_modules\n.turbo\n');
  git('add', '-A');
  git('commit', '-q', '-m', 'snapshot');
  return sandbox;
}

const run = (cwd: string, command: string, args: string[]) => {
  const result = spawnSync(command, args, {
    cwd,
    encoding: 'utf8',
    timeout: 240_000,
    env: { ...process.env, TURBO_TELEMETRY_DISABLED: '1' },
  });
  return { status: result.status, output: `${result.stdout}\n${result.stderr}` };
};

it('npm run typecheck reports the handler that no longer matches after a spec edit and npm run generate, despite a cached pass', () => {
  const sandbox = copyRepository();
  try {
    const typecheck = () => run(sandbox, 'npx', ['turbo', 'run', 'typecheck', '--filter=@warden/server', '--filter=@warden/dashboard']);
    const cached = typecheck();
    expect(cached.status, cached.output).toBe(0);

    const schemas = join(sandbox, 'spec/components/schemas/agents.yaml');
    const source = readFileSync(schemas, 'utf8');
    const edited = source.replace(/^Agent:\n[\s\S]*?\n {2}required:\n {4}\[\n/m, (head) => `${head}      nickname,\n`);
    expect(edited).not.toBe(source);
    writeFileSync(
      schemas,
      edited.replace(/^(Agent:[\s\S]*?\n {2}properties:\n)/m, (head) => `${head}    nickname:\n      type: string\n      maxLength: 64\n`),
    );
    const generated = run(sandbox, 'npx', ['tsx', 'tools/generate.ts']);
    expect(generated.status, generated.output).toBe(0);

    const drifted = typecheck();
    expect(drifted.status, drifted.output).not.toBe(0);
    expect(drifted.output).toMatch(/agents\.service\.ts.*nickname/s);
  } finally {
    rmSync(sandbox, { recursive: true, force: true });
  }
}, 300_000);
