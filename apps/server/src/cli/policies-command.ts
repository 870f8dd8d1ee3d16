/**
 * `warden policies test DIR [--junit FILE] [--json]`: a policy directory's test cases run by the
 * server's evaluator, offline (features/policies/policy-tests.ts). One line per failed case and a
 * one-line summary; exit 0 when every case passes, 1 when one fails, 2 when the directory or a
 * file in it cannot be read as policies and tests.
 */
import { writeFileSync } from 'node:fs';
import { BundleError, readPolicyBundle } from '../features/policies/policy-bundle.ts';
import { junitXml, policyCases, runPolicyCases } from '../features/policies/policy-tests.ts';
import { UsageError } from './cli-errors.ts';

export function policiesTest(dir: string | undefined, options: { junit?: string }, json: boolean): number {
  if (!dir) throw new UsageError('policies test needs the policy directory: warden policies test DIR');
  let results: ReturnType<typeof runPolicyCases>;
  let bundle: ReturnType<typeof readPolicyBundle>;
  try {
    bundle = readPolicyBundle(dir);
    results = runPolicyCases(bundle, policyCases(bundle));
  } catch (error) {
    if (!(error instanceof BundleError)) throw error;
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
