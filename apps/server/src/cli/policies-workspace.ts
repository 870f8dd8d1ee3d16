/**
 * Policies as code, read from a running workspace (`--url`, the key in WARDEN_API_KEY):
 * - `warden policies export DIR [--force]` (policies:read): the workspace's policies as a
 *   directory, one YAML file per policy in the form `POST /policies` takes, and its default
 *   decisions in `defaults.yaml`; read back and checked before it reports, so what it wrote is a
 *   bundle `apply` takes. A directory that has policy files already is refused unless --force,
 *   which replaces them (test files stay).
 * - `warden policies fixtures --from-audit [--since 7d] [--limit N] [--out FILE]` (audit:read,
 *   agents:read, policies:read): test cases cut from the workspace's recorded decisions
 *   (features/policies/policy-fixtures.ts), each checked against the workspace's policies as
 *   they are now; a case they decide otherwise is left out and counted, with why.
 */
import { mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Agent, AuditEvent, Policy, Settings } from '@warden/contract';
import { CORE_SCHEMA, dump } from 'js-yaml';
import { BundleError, type PolicyBundle, readPolicyBundle } from '../features/policies/policy-bundle.ts';
import { FixtureCutter } from '../features/policies/policy-fixtures.ts';
import { storedPolicy } from '../features/policies/policy-forms.ts';
import { policyCases, runPolicyCases } from '../features/policies/policy-tests.ts';
import { type ApiClient, apiClient } from './api-client.ts';
import { UsageError } from './cli-errors.ts';

const toYaml = (value: unknown) => dump(value, { schema: CORE_SCHEMA, lineWidth: -1, noRefs: true });
const BUNDLE_FILE = /\.(ya?ml|json)$/;
const TEST_FILE = /\.test\.(ya?ml|json)$/;

/** A file name for a policy name: lower-case letters, digits and dashes, unique in the directory. */
function fileNames(names: string[]): string[] {
  const used = new Set(['defaults']);
  return names.map((name) => {
    const base =
      name
        .toLowerCase()
        .normalize('NFKD')
        .replace(/[^a-z0-9]+/g, '-')
        .replace(/^-+|-+$/g, '')
        .slice(0, 80) || 'policy';
    let candidate = base;
    for (let n = 2; used.has(candidate); n++) candidate = `${base}-${n}`;
    used.add(candidate);
    return `${candidate}.yaml`;
  });
}

/** The workspace's policies (in the API's order) and settings. */
export async function workspacePolicies(api: ApiClient): Promise<{ policies: Policy[]; settings: Settings }> {
  const policies: Policy[] = [];
  for await (const policy of api.list<Policy>('/policies')) policies.push(policy);
  return { policies, settings: await api.get<Settings>('/settings') };
}

export async function policiesExport(dir: string | undefined, options: { url?: string; force?: boolean }, json: boolean): Promise<number> {
  if (!dir) throw new UsageError('policies export needs the directory to write: warden policies export DIR --url API');
  const api = apiClient('policies export', options.url);
  const { policies, settings } = await workspacePolicies(api);
  mkdirSync(dir, { recursive: true });
  const present = readdirSync(dir).filter((file) => BUNDLE_FILE.test(file) && !TEST_FILE.test(file));
  if (present.length > 0 && !options.force) {
    console.error(`warden: ${dir} has policy files already (${present.slice(0, 3).join(', ')}…); --force replaces them`);
    return 2;
  }
  for (const file of present) rmSync(join(dir, file));
  policies.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0)); // the same files for the same policies, whatever the API's order
  const names = fileNames(policies.map((policy) => policy.name));
  policies.forEach((policy, index) => {
    const stated = storedPolicy(policy);
    writeFileSync(join(dir, names[index] as string), toYaml(stated));
  });
  writeFileSync(join(dir, 'defaults.yaml'), toYaml({ default_decision: settings.default_decision }));
  let bundle: PolicyBundle;
  try {
    bundle = readPolicyBundle(dir); // what was written reads back as the bundle `apply` sends
  } catch (error) {
    if (!(error instanceof BundleError)) throw error;
    console.error(`warden: the export does not read back: ${error.message}`);
    return 1;
  }
  const summary = { dir, policies: bundle.policies.length, digest: bundle.digest, files: [...names, 'defaults.yaml'] };
  if (json) console.log(JSON.stringify(summary));
  else
    console.log(`policies export: ${summary.policies} policies and the default decisions → ${dir} (bundle ${bundle.digest.slice(0, 12)})`);
  return 0;
}

/** `7d`, `24h`, `30m` before now, or an ISO 8601 timestamp (a date, or a date and time), not in the future. */
function sinceOf(value: string): string {
  const relative = /^(\d{1,6})([dhm])$/.exec(value);
  if (relative) {
    const unit = { d: 86_400_000, h: 3_600_000, m: 60_000 }[relative[2] as 'd' | 'h' | 'm'];
    return new Date(Date.now() - Number(relative[1]) * unit).toISOString();
  }
  const at = /^\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:\d{2}))?$/.test(value) ? new Date(value) : null;
  if (at === null || Number.isNaN(at.getTime()) || at.getTime() > Date.now())
    throw new UsageError(
      `--since is a duration (7d, 24h, 30m) or a past ISO 8601 timestamp (2026-11-26, 2026-11-26T09:00Z), not '${value}'`,
    );
  return at.toISOString();
}

/** Decision events read at most, whatever --limit: a week of a busy workspace is read in bounded time. */
const MAX_EVENTS = 200_000;

export async function policiesFixtures(
  options: { url?: string; 'from-audit'?: boolean; since?: string; limit?: string; out?: string },
  json: boolean,
): Promise<number> {
  if (!options['from-audit']) throw new UsageError('policies fixtures cuts test cases from the audit log: --from-audit');
  const limit = options.limit === undefined ? 1000 : Number(options.limit);
  if (!Number.isInteger(limit) || limit < 1 || limit > 100_000) throw new UsageError('--limit is a number of cases from 1 to 100000');
  const since = sinceOf(options.since ?? '7d');
  const api = apiClient('policies fixtures', options.url);
  const agents: Agent[] = [];
  for await (const agent of api.list<Agent>('/agents')) agents.push(agent);
  const { policies, settings } = await workspacePolicies(api);
  // read page by page until the file is full or the window is read (at most MAX_EVENTS)
  const cutter = new FixtureCutter(agents, limit);
  let read = 0;
  for await (const event of api.list<AuditEvent>('/audit-logs', { view: 'acts', from: since }, MAX_EVENTS)) {
    read++;
    if (!cutter.add(event)) break;
  }
  const file = cutter.file;
  if (read === MAX_EVENTS)
    console.error(`warden: read the newest ${MAX_EVENTS} events of the window only; a shorter --since reads all of one`);

  // Checked against today's policies: a case they decide otherwise is no regression test of them.
  const bundle: PolicyBundle = {
    policies: policies.map((policy) => ({ file: policy.name, policy: storedPolicy(policy) })),
    defaults: settings.default_decision,
    tests: [{ file: 'fixtures', content: file }],
    digest: '',
  };
  const results = runPolicyCases(bundle, policyCases(bundle));
  const kept = new Set(results.filter((r) => r.failure === null).map((r) => r.case.name));
  const left = results.filter((r) => r.failure !== null);
  // the audit keeps a digest of a body or of arguments too big to keep: a condition on them cannot be replayed
  const digestOnly = left.filter(({ case: c }) => {
    const audited = c.execution as unknown as Record<string, unknown> | null;
    return (
      audited !== null &&
      (audited.body_sha256 ||
        audited.params_sha256 ||
        audited.arguments_bytes !== undefined ||
        (audited.arguments_sha256 && !audited.arguments))
    );
  }).length;
  const written = { ...file, cases: file.cases.filter((c) => kept.has(c.name)) };
  const usedAgents = new Set(written.cases.map((c) => c.agent));
  written.agents = Object.fromEntries(Object.entries(file.agents).filter(([key]) => usedAgents.has(key)));
  const text = `# warden policies fixtures --from-audit --since ${options.since ?? '7d'}: cut ${new Date().toISOString()} from ${options.url}\n${toYaml(written)}`;
  if (options.out) writeFileSync(options.out, text);
  const summary = {
    events: read,
    cases: written.cases.length,
    left_out: { decided_otherwise: left.length - digestOnly, digest_only: digestOnly },
    out: options.out ?? null,
  };
  if (json) console.log(JSON.stringify(options.out ? summary : { ...summary, fixtures: written }));
  else {
    if (!options.out) process.stdout.write(text);
    console.error(
      `policies fixtures: ${written.cases.length} cases from ${read} events since ${since}` +
        (left.length
          ? `; left out ${left.length - digestOnly} that today's policies decide otherwise (changed since, or a condition reads what the audit redacts) and ${digestOnly} whose body or arguments the audit keeps only as a digest`
          : ''),
    );
  }
  // the cases assume the workspace's default decisions: a directory states them in defaults.yaml
  const defaults = Object.entries(settings.default_decision)
    .map(([environment, decision]) => `${environment}: ${decision}`)
    .join(', ');
  console.error(
    `policies fixtures: decided with the default decisions ${defaults}; keep them in the directory's defaults.yaml (export writes it)`,
  );
  return 0;
}
