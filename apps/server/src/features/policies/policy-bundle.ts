/**
 * Policies as code: a directory of policy files, each one policy in the API's own schema
 * (`PolicyCreate`, as `POST /policies` takes it), in YAML (`.yaml`, `.yml`) or JSON (`.json`),
 * and test files beside them (`*.test.yaml`, `*.test.yml`, `*.test.json`; policy-tests.ts).
 * A policy file is checked as the API checks a new policy: the spec's schema, then its CEL
 * conditions and limits (rule-checks.ts), so that a directory that reads here saves there.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { PolicyCreate } from '@warden/contract';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { parse as parseYaml } from 'yaml';
import { ApiError } from '../../shared/errors.ts';
import { specText } from '../../spec.ts';
import { bundleDigest } from './policy-forms.ts';
import { checkLimits, checkRules } from './rule-checks.ts';

/** A policy file or a test file that cannot be read as one: names the file and what is wrong. */
export class BundleError extends Error {}

export interface BundlePolicy {
  /** The file's name in the directory. */
  file: string;
  policy: PolicyCreate;
}

export interface PolicyBundle {
  policies: BundlePolicy[];
  /** The test files, parsed (their shape is checked by policy-tests.ts). */
  tests: { file: string; content: unknown }[];
  /** SHA-256 of the policies in canonical form, by name: the same bundle has the same digest wherever its files come from. */
  digest: string;
}

const POLICY_FILE = /\.(ya?ml|json)$/;
const TEST_FILE = /\.test\.(ya?ml|json)$/;

let validatePolicy: ((value: unknown) => boolean) & { errors?: { instancePath: string; message?: string }[] | null };

/** The spec's PolicyCreate as a JSON Schema validator (OpenAPI 3.1 schemas are JSON Schema 2020-12). */
function policySchema() {
  if (!validatePolicy) {
    const ajv = new Ajv2020({ strict: false, allErrors: false, validateFormats: false });
    ajv.addSchema(JSON.parse(specText), 'spec');
    validatePolicy = ajv.getSchema('spec#/components/schemas/PolicyCreate') as typeof validatePolicy;
  }
  return validatePolicy;
}

function parseFile(dir: string, file: string): unknown {
  const text = readFileSync(join(dir, file), 'utf8');
  try {
    return file.endsWith('.json') ? JSON.parse(text) : parseYaml(text);
  } catch (error) {
    throw new BundleError(`${file}: not ${file.endsWith('.json') ? 'JSON' : 'YAML'}: ${(error as Error).message.split('\n')[0]}`);
  }
}

/** One policy file, checked as `POST /policies` checks its body. */
export function checkedPolicy(file: string, value: unknown): PolicyCreate {
  const validate = policySchema();
  if (!validate(value)) {
    const [first] = validate.errors ?? [];
    throw new BundleError(`${file}: not a policy: ${first?.instancePath || '(the file)'} ${first?.message ?? 'is invalid'}`);
  }
  const policy = value as PolicyCreate;
  try {
    checkRules(policy.rules ?? []);
    checkLimits(policy.rules ?? []);
  } catch (error) {
    if (error instanceof ApiError) throw new BundleError(`${file}: ${error.message}`);
    throw error;
  }
  return policy;
}

/** Reads `dir`: every policy file checked, names unique; throws BundleError naming the first file that is wrong. */
export function readPolicyBundle(dir: string): PolicyBundle {
  let names: string[];
  try {
    names = readdirSync(dir).sort();
  } catch (error) {
    throw new BundleError(`${dir}: cannot read the directory (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})`);
  }
  const policies: BundlePolicy[] = [];
  const tests: PolicyBundle['tests'] = [];
  const seen = new Map<string, string>();
  for (const file of names.filter((name) => POLICY_FILE.test(name))) {
    const content = parseFile(dir, file);
    if (TEST_FILE.test(file)) {
      tests.push({ file, content });
      continue;
    }
    const policy = checkedPolicy(file, content);
    const other = seen.get(policy.name);
    if (other) throw new BundleError(`${file}: policy '${policy.name}' is also in ${other} (names are unique per workspace)`);
    seen.set(policy.name, file);
    policies.push({ file, policy });
  }
  return { policies, tests, digest: bundleDigest(policies.map(({ policy }) => policy)) };
}
