/**
 * Policies as code (features/policies/policy-bundle.ts):
 * - `warden policies test DIR [--junit FILE] [--json]`: the directory's test cases run by the
 *   server's evaluator, offline (policy-tests.ts). One line per failed case and a one-line
 *   summary; exit 0 when every case passes, 1 when one fails, 2 when the directory or a file in
 *   it cannot be read as policies and tests.
 * - `warden policies diff|apply DIR --url API [--prune] [--json]`: the directory against a
 *   running Warden (`POST /policies/bundle`, a key with `policies:write` in WARDEN_API_KEY):
 *   what would change, or the change made, as one audit event naming the bundle's digest and,
 *   in a git checkout, its commit. Exit 0, 1 on a refusal, 2 when the directory is not valid.
 */
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { BundleError, readPolicyBundle } from '../features/policies/policy-bundle.ts';
import { junitXml, policyCases, runPolicyCases } from '../features/policies/policy-tests.ts';
import { ApiError } from '../shared/errors.ts';
import { UsageError } from './cli-errors.ts';

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

export async function policiesSync(
  verb: 'diff' | 'apply',
  dir: string | undefined,
  options: { url?: string; prune?: boolean },
  json: boolean,
): Promise<number> {
  if (!dir) throw new UsageError(`policies ${verb} needs the policy directory: warden policies ${verb} DIR --url API`);
  if (!options.url) throw new UsageError(`policies ${verb} needs --url, the API of a running Warden (http://host:8080/api/v1)`);
  const key = process.env.WARDEN_API_KEY;
  if (!key) throw new UsageError(`policies ${verb} reads the API key (with policies:write) from WARDEN_API_KEY`);
  let bundle: ReturnType<typeof readPolicyBundle>;
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
  const response = await fetch(`${options.url.replace(/\/+$/, '')}/policies/bundle`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({
      policies: bundle.policies.map(({ policy }) => policy),
      prune: options.prune === true,
      dry_run: verb === 'diff',
      source: { path: dir, ...(commit ? { commit } : {}) },
    }),
  });
  const answer = (await response.json().catch(() => null)) as {
    data?: Record<string, unknown>;
    error?: { code: string; message: string };
  } | null;
  if (!response.ok || !answer?.data) {
    console.error(
      `warden: ${options.url} refused the bundle (${response.status}${answer?.error ? ` ${answer.error.code}: ${answer.error.message}` : ''})`,
    );
    return 1;
  }
  const result = answer.data as {
    digest: string;
    created: string[];
    updated: string[];
    deleted: string[];
    unchanged: string[];
    audit_event_id: string | null;
  };
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
  const bundleName = `bundle ${result.digest.slice(0, 12)}`;
  const [c, u, d, same] = [result.created.length, result.updated.length, result.deleted.length, result.unchanged.length];
  if (verb === 'diff') console.log(`policies diff: ${c} to create, ${u} to update, ${d} to delete, ${same} unchanged (${bundleName})`);
  else if (result.audit_event_id)
    console.log(
      `policies apply: ${c} created, ${u} updated, ${d} deleted, ${same} unchanged (${bundleName}, audit event ${result.audit_event_id})`,
    );
  else console.log(`policies apply: nothing to change (${bundleName})`);
  return 0;
}
