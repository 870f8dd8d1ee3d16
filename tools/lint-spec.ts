/**
 * `npm run lint:spec`: Spectral (spectral:oas and the OWASP ruleset, `.spectral.yaml`) over the
 * bundled v1 and dashboard specs. Every error fails; so does every warning that is not in the
 * reviewed allowlist `spec/lint-allowlist.json` (rule and JSON path, per file), so a new one
 * cannot hide among the old. `--update` rewrites the allowlist from what Spectral finds now
 * (review the diff: each line added is a warning accepted). An entry no longer found is
 * reported, to be removed.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = resolve(fileURLToPath(new URL('..', import.meta.url)));
const SPECS = ['spec/dist/openapi.json', 'spec/dist/dashboard.json'];
const ALLOWLIST = join(ROOT, 'spec/lint-allowlist.json');
const SEVERITY = ['error', 'warning', 'info', 'hint'];

interface Finding {
  code: string;
  path: (string | number)[];
  message: string;
  severity: number;
  source?: string;
}

/** One finding as the allowlist names it: `<file> <rule> <JSON path>`. */
const keyOf = (f: Finding) => `${relative(ROOT, f.source ?? '')} ${f.code} ${f.path.join('.')}`;

function spectral(): Finding[] {
  const cli = join(ROOT, 'node_modules/.bin/spectral');
  try {
    return JSON.parse(execFileSync(cli, ['lint', ...SPECS, '-f', 'json', '--quiet'], { cwd: ROOT, encoding: 'utf8', maxBuffer: 64 << 20 }));
  } catch (error) {
    // spectral exits 1 when it finds errors; its report is still on stdout
    const out = (error as { stdout?: string }).stdout;
    if (!out) throw error;
    return JSON.parse(out);
  }
}

const findings = spectral();
const keys = findings
  .filter((f) => f.severity === 1)
  .map(keyOf)
  .sort();
if (process.argv.includes('--update')) {
  writeFileSync(ALLOWLIST, `${JSON.stringify([...new Set(keys)], null, 2)}\n`);
  console.log(`lint:spec: ${keys.length} warnings written to ${relative(ROOT, ALLOWLIST)}: review the diff`);
  process.exit(0);
}
const allowed = new Set<string>(JSON.parse(readFileSync(ALLOWLIST, 'utf8')));
const failing = findings.filter((f) => f.severity === 0 || (f.severity === 1 && !allowed.has(keyOf(f))));
const gone = [...allowed].filter((key) => !keys.includes(key));
for (const f of failing) console.log(`${SEVERITY[f.severity]}  ${keyOf(f)}\n         ${f.message}`);
if (gone.length > 0) console.log(`${gone.length} allowlisted warnings are gone: remove them (npm run lint:spec -- --update)`);
console.log(
  `lint:spec: ${findings.filter((f) => f.severity === 0).length} errors, ${keys.length} warnings ` +
    `(${keys.length - (failing.length - findings.filter((f) => f.severity === 0).length)} allowlisted, ` +
    `${failing.filter((f) => f.severity === 1).length} new)`,
);
process.exit(failing.length > 0 ? 1 : 0);
