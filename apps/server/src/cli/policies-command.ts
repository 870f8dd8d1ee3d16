/**
 * Policies as code (features/policies/policy-bundle.ts):
 * - `warden policies test DIR [--junit FILE] [--json]`: the directory's test cases run by the
 *   server's evaluator, offline (policy-tests.ts). One line per failed case and a one-line
 *   summary; exit 0 when every case passes, 1 when one fails, 2 when the directory or a file in
 *   it cannot be read as policies and tests.
 * - `warden policies diff|apply DIR --url API [--prune] [--json]`: the directory against a
 *   running Warden (`POST /policies/bundle`, a key with `policies:write` in WARDEN_API_KEY):
 *   what would change, or the change made, as one audit event naming the bundle's digest and,
 *   in a git checkout, its commit; its `defaults.yaml` sets the default decisions. `apply
 *   --what-if [--max-changed PCT] [--what-if-limit N] [--yes]` first replays the recent
 *   decisions with the workspace as the bundle would make it (a key with audit:read and
 *   policies:read too). Exit 0, 1 on a refusal (the API's, or what-if's), 2 when the directory
 *   is not valid or an option is misplaced.
 */
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { createInterface } from 'node:readline/promises';
import type { PolicyBundleResult, PolicySimulation } from '@warden/contract';
import { BundleError, type PolicyBundle, readPolicyBundle } from '../features/policies/policy-bundle.ts';
import { storedPolicy } from '../features/policies/policy-forms.ts';
import { junitXml, policyCases, runPolicyCases } from '../features/policies/policy-tests.ts';
import { ApiError } from '../shared/errors.ts';
import { type ApiClient, ApiRefusal, apiClient } from './api-client.ts';
import { UsageError } from './cli-errors.ts';
import { workspacePolicies } from './policies-workspace.ts';

export function policiesTest(dir: string | undefined, options: { junit?: string }, json: boolean): number {
  if (!dir) throw new UsageError('policies test needs the policy directory: warden policies test DIR');
  let results: ReturnType<typeof runPolicyCases>;
  let bundle: ReturnType<typeof readPolicyBundle>;
  try {
    bundle = readPolicyBundle(dir);
    results = runPolicyCases(bundle, policyCases(bundle));
  } catch (error) {
    // a case the server itself would refuse as invalid (a context over 64 KiB, a tool other than the executed one)
    if (!(error instanceof BundleError) && !(error instanceof ApiError)) throw error;
    console.error(`warden: ${error.message}`);
    return 2;
  }
  if (options.junit) writeFileSync(options.junit, junitXml(results));
  const failed = results.filter((r) => r.failure !== null);
  const summary = `policies test: ${results.length} cases, ${results.length - failed.length} passed, ${failed.length} failed (${bundle.policies.length} policies in ${dir}, bundle ${bundle.digest.slice(0, 12)})`;
  if (json) {
    console.log(
      JSON.stringify({
        cases: results.length,
        passed: results.length - failed.length,
        failed: failed.map((r) => ({ file: r.case.file, name: r.case.name, failure: r.failure, got: r.got })),
        policies: bundle.policies.length,
        digest: bundle.digest,
      }),
    );
  } else {
    for (const r of failed) console.log(`FAIL ${r.case.file} › ${r.case.name}: ${r.failure}`);
    console.log(summary);
  }
  if (results.length === 0) console.error('warden: the directory has no test cases (*.test.yaml, *.test.yml, *.test.json)');
  return failed.length > 0 ? 1 : 0;
}

/** The commit DIR is checked out at, when it is in a git checkout with no change to it. */
function commitOf(dir: string): string | undefined {
  try {
    const run = (...args: string[]) =>
      execFileSync('git', ['-C', dir, ...args], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
    return run('status', '--porcelain', '--', '.') === '' ? run('rev-parse', 'HEAD') : undefined;
  } catch {
    return undefined;
  }
}

interface WhatIfOptions {
  'what-if'?: boolean;
  'max-changed'?: string;
  'what-if-limit'?: string;
  yes?: boolean;
}

/**
 * `apply --what-if`: the workspace's recent decisions replayed with the workspace as the bundle
 * would make it (POST /policies/simulate, audit:read): refused when the share the bundle decides
 * otherwise passes --max-changed (default 5 %), unless --yes, or asked on a terminal.
 */
/** --max-changed and --what-if-limit, checked before anything is sent. */
function whatIfLimits(options: WhatIfOptions): { maxChanged: number; limit: number } {
  const maxText = (options['max-changed'] ?? '5').replace(/\s*%$/, '');
  const maxChanged = Number(maxText);
  if (!/^\d+(\.\d+)?$/.test(maxText) || maxChanged > 100) throw new UsageError('--max-changed is a percentage from 0 to 100');
  const limit = options['what-if-limit'] ?? '10000';
  if (!/^\d{1,6}$/.test(limit) || Number(limit) < 1 || Number(limit) > 100_000)
    throw new UsageError('--what-if-limit is a number of decisions from 1 to 100000');
  return { maxChanged, limit: Number(limit) };
}

async function whatIf(api: ApiClient, bundle: PolicyBundle, options: WhatIfOptions & { prune?: boolean }): Promise<boolean> {
  const { maxChanged, limit } = whatIfLimits(options);
  const draft = bundle.policies.map(({ policy }) => policy);
  if (!options.prune) {
    // without --prune the workspace keeps its other policies: they are part of what decides
    const named = new Set(draft.map((policy) => policy.name));
    const { policies } = await workspacePolicies(api);
    draft.push(...policies.filter((policy) => !named.has(policy.name)).map(storedPolicy));
  }
  const replay = await api.post<PolicySimulation>('/policies/simulate', {
    policies: draft,
    ...(bundle.defaults ? { default_decision: bundle.defaults } : {}),
    limit,
  });
  const share = replay.replayed === 0 ? 0 : (100 * replay.changed) / replay.replayed;
  const shown = `${replay.changed} of ${replay.replayed} recent decisions (${share.toFixed(1)} %)`;
  console.error(`what-if: the bundle decides ${shown} otherwise than the workspace's policies do now`);
  for (const group of replay.groups.slice(0, 5))
    console.error(
      `  ${group.count} ${group.from} → ${group.to} (${group.policy ?? 'default decision'}${group.rule ? ` › ${group.rule}` : ''})`,
    );
  if (share <= maxChanged || options.yes) return true;
  if (process.stdin.isTTY && process.stderr.isTTY) {
    const prompt = createInterface({ input: process.stdin, output: process.stderr });
    const answer = await prompt.question(`apply anyway (more than ${maxChanged} % changed)? [y/N] `);
    prompt.close();
    if (/^y(es)?$/i.test(answer.trim())) return true;
    console.error('warden: not applied');
    return false;
  }
  console.error(`warden: refusing: more than --max-changed ${maxChanged} % of the decisions change (--yes applies anyway)`);
  return false;
}

export async function policiesSync(
  verb: 'diff' | 'apply',
  dir: string | undefined,
  options: { url?: string; prune?: boolean } & WhatIfOptions,
  json: boolean,
): Promise<number> {
  if (!dir) throw new UsageError(`policies ${verb} needs the policy directory: warden policies ${verb} DIR --url API`);
  // a guard that silently does nothing is worse than none
  const whatIfOptions = (['max-changed', 'what-if-limit', 'yes'] as const).filter((name) => options[name] !== undefined);
  if (verb === 'diff' && options['what-if']) throw new UsageError('--what-if is an option of apply (diff changes nothing)');
  if (whatIfOptions.length > 0 && !options['what-if'])
    throw new UsageError(`--${whatIfOptions[0]} is an option of apply --what-if: add --what-if`);
  if (options['what-if']) whatIfLimits(options);
  const api = apiClient(`policies ${verb}`, options.url);
  let bundle: PolicyBundle;
  try {
    bundle = readPolicyBundle(dir);
  } catch (error) {
    if (!(error instanceof BundleError)) throw error;
    console.error(`warden: ${error.message}`);
    return 2;
  }
  // an empty or mistyped directory must not empty the workspace
  if (options.prune && bundle.policies.length === 0) {
    console.error(`warden: ${dir} has no policy files: --prune would delete every policy of the workspace; refusing`);
    return 2;
  }
  const commit = commitOf(dir);
  const body = {
    policies: bundle.policies.map(({ policy }) => policy),
    ...(bundle.defaults ? { default_decision: bundle.defaults } : {}),
    prune: options.prune === true,
    source: { path: dir, ...(commit ? { commit } : {}) },
  };
  let result: PolicyBundleResult;
  try {
    if (verb === 'apply' && options['what-if']) {
      // nothing to change needs no replay
      const planned = await api.post<PolicyBundleResult>('/policies/bundle', { ...body, dry_run: true });
      if (changes(planned) > 0 && !(await whatIf(api, bundle, options))) return 1;
    }
    result = await api.post<PolicyBundleResult>('/policies/bundle', { ...body, dry_run: verb === 'diff' });
  } catch (error) {
    if (!(error instanceof ApiRefusal)) throw error;
    console.error(`warden: ${error.message}`);
    return 1;
  }
  if (json) {
    console.log(JSON.stringify(result));
    return 0;
  }
  for (const [sign, names] of [
    ['+', result.created],
    ['~', result.updated],
    ['-', result.deleted],
  ] as const)
    for (const name of names) console.log(`${sign} ${name}`);
  for (const environment of result.default_decision_changed)
    console.log(`~ default decision (${environment}): ${bundle.defaults?.[environment]}`);
  const bundleName = `bundle ${result.digest.slice(0, 12)}`;
  const [c, u, d, same] = [result.created.length, result.updated.length, result.deleted.length, result.unchanged.length];
  const defaults = result.default_decision_changed.length ? `, ${result.default_decision_changed.length} default decisions` : '';
  if (verb === 'diff')
    console.log(`policies diff: ${c} to create, ${u} to update, ${d} to delete${defaults}, ${same} unchanged (${bundleName})`);
  else if (result.audit_event_id)
    console.log(
      `policies apply: ${c} created, ${u} updated, ${d} deleted${defaults}, ${same} unchanged (${bundleName}, audit event ${result.audit_event_id})`,
    );
  else console.log(`policies apply: nothing to change (${bundleName})`);
  return 0;
}

const changes = (result: PolicyBundleResult) =>
  result.created.length + result.updated.length + result.deleted.length + result.default_decision_changed.length;
