/**
 * Policies as code: a directory of policy files, each one policy in the API's own schema
 * (`PolicyCreate`, as `POST /policies` takes it), in YAML (`.yaml`, `.yml`) or JSON (`.json`),
 * and test files beside them (`*.test.yaml`, `*.test.yml`, `*.test.json`; policy-tests.ts).
 * One name is reserved: `defaults.yaml` (`.yml`, `.json`) holds the workspace's default
 * decisions the bundle sets (`default_decision: { production: block }`), applied with it.
 * A policy file is checked as the API checks a new policy: the spec's schema, then its CEL
 * conditions and limits (rule-checks.ts), so that a directory that reads here saves there.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { DefaultDecisionsChange, PolicyCreate } from '@warden/contract';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { CORE_SCHEMA, load as loadYaml } from 'js-yaml';
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
  /** The default decisions of `defaults.yaml`, when the directory has one. */
  defaults?: DefaultDecisionsChange;
  /** SHA-256 of the policies in canonical form, by name (and the defaults): the same bundle has the same digest wherever its files come from. */
  digest: string;
}

const POLICY_FILE = /\.(ya?ml|json)$/;
const TEST_FILE = /\.test\.(ya?ml|json)$/;
const DEFAULTS_FILE = /^defaults\.(ya?ml|json)$/;

type Validator = ((value: unknown) => boolean) & { errors?: { instancePath: string; message?: string }[] | null };
let ajv: Ajv2020 | undefined;

/** One of the spec's schemas as a JSON Schema validator (OpenAPI 3.1 schemas are JSON Schema 2020-12). */
function specSchema(name: 'PolicyCreate' | 'DefaultDecisionsChange'): Validator {
  if (!ajv) {
    ajv = new Ajv2020({ strict: false, allErrors: false, validateFormats: false });
    ajv.addSchema(JSON.parse(specText), 'spec');
  }
  return ajv.getSchema(`spec#/components/schemas/${name}`) as Validator;
}

/** Throws BundleError naming the file and the first thing `schema` finds wrong with `value`. */
function check(file: string, what: string, schema: Validator, value: unknown, at = ''): void {
  if (schema(value)) return;
  const [first] = schema.errors ?? [];
  throw new BundleError(`${file}: not ${what}: ${at + (first?.instancePath ?? '') || '(the file)'} ${first?.message ?? 'is invalid'}`);
}

/** `defaults.yaml`: `{ default_decision: { <environment>: allow | block } }`. */
function checkedDefaults(file: string, value: unknown): DefaultDecisionsChange {
  const keys = typeof value === 'object' && value !== null && !Array.isArray(value) ? Object.keys(value) : [];
  if (keys.length !== 1 || keys[0] !== 'default_decision')
    throw new BundleError(`${file}: the defaults file holds one key, default_decision: { production: block }`);
  const defaults = (value as { default_decision: unknown }).default_decision;
  check(file, 'default decisions', specSchema('DefaultDecisionsChange'), defaults, '/default_decision');
  return defaults as DefaultDecisionsChange;
}

function parseFile(dir: string, file: string): unknown {
  const text = readFileSync(join(dir, file), 'utf8');
  try {
    return file.endsWith('.json') ? JSON.parse(text) : loadYaml(text, { schema: CORE_SCHEMA, filename: file });
  } catch (error) {
    throw new BundleError(`${file}: not ${file.endsWith('.json') ? 'JSON' : 'YAML'}: ${(error as Error).message.split('\n')[0]}`);
  }
}

/** One policy file, checked as `POST /policies` checks its body. */
export function checkedPolicy(file: string, value: unknown): PolicyCreate {
  check(file, 'a policy', specSchema('PolicyCreate'), value);
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
  let defaults: { file: string; value: DefaultDecisionsChange } | undefined;
  for (const file of names.filter((name) => POLICY_FILE.test(name))) {
    const content = parseFile(dir, file);
    if (DEFAULTS_FILE.test(file)) {
      if (defaults) throw new BundleError(`${file}: the directory also has ${defaults.file} (one defaults file)`);
      defaults = { file, value: checkedDefaults(file, content) };
      continue;
    }
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
  const policyList = policies.map(({ policy }) => policy);
  return { policies, tests, defaults: defaults?.value, digest: bundleDigest(policyList, defaults?.value) };
}
