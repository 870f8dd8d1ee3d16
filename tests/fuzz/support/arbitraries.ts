/**
 * JSON Schema (the subset the spec uses) → fast-check arbitraries.
 *
 * - `validValue(schema)`: values the schema accepts (const, enum, oneOf/anyOf, allOf merged,
 *   type lists, strings with length/pattern/format, integers/numbers with bounds, objects with
 *   required/optional/additional properties, arrays with bounds and uniqueness). Sizes are
 *   kept small except for deliberate boundary values (strings of exactly maxLength).
 * - Hints by property name let a caller steer a field to known values (existing agents, MCP
 *   servers…) or to safe ones (URLs on a closed loopback port: nothing generated here ever
 *   names a host off this machine).
 * - `mutate(value, …)`: the invalid variants: wrong types, nulls, missing required fields,
 *   extra fields, huge strings, odd unicode, deep nesting — applied at a random node.
 */
import fc from 'fast-check';
import type { Schema } from './openapi.ts';

/** A reference to an existing resource, resolved when the request is sent (pools grow as the run goes). */
export class PoolRef {
  constructor(
    readonly pool: string,
    readonly form: string,
    readonly pick: number,
  ) {}
}

export type Hints = Record<string, (schema: Schema, fallback: fc.Arbitrary<unknown>) => fc.Arbitrary<unknown>>;

export interface GenOptions {
  hints?: Hints;
  /** The only URL this generator produces for `format: uri` fields (a closed port on loopback). */
  safeUrl: fc.Arbitrary<string>;
}

const MAX_SMALL_STRING = 24;
const MAX_ITEMS = 4;
const MAX_KEYS = 4;

function union<T>(a: T[] | undefined, b: T[] | undefined): T[] | undefined {
  if (!a && !b) return undefined;
  return [...new Set([...(a ?? []), ...(b ?? [])])];
}

/** Merges two schemas of an allOf (properties merged recursively, required united). */
export function merge(a: Schema, b: Schema): Schema {
  const out: Schema = { ...a, ...b };
  if (a.properties || b.properties) {
    const props: Schema = { ...(a.properties ?? {}) };
    for (const [key, value] of Object.entries<Schema>(b.properties ?? {})) props[key] = props[key] ? merge(props[key], value) : value;
    out.properties = props;
  }
  const required = union<string>(a.required, b.required);
  if (required) out.required = required;
  return out;
}

/** allOf merged into one schema; a oneOf/anyOf inside it is distributed over its branches. */
export function flatten(schema: Schema): Schema {
  if (!schema.allOf) return schema;
  const { allOf, ...rest } = schema as { allOf: Schema[] };
  let merged: Schema = rest;
  let branches: Schema[] | undefined;
  for (const part of allOf.map(flatten)) {
    const { oneOf, anyOf, ...plain } = part;
    merged = merge(merged, plain);
    if (oneOf || anyOf) branches = (oneOf ?? anyOf) as Schema[];
  }
  if (!branches) return merged;
  return { oneOf: branches.map((branch) => merge(merged, flatten(branch))) };
}

const codePoints = (s: string) => [...s].length;

function stringArb(schema: Schema, opts: GenOptions): fc.Arbitrary<string> {
  const min = schema.minLength ?? 0;
  const max = schema.maxLength ?? 1000;
  if (schema.format === 'uri') return opts.safeUrl;
  if (schema.format === 'uuid') return fc.uuid();
  if (schema.format === 'date-time') {
    return fc
      .date({ min: new Date('2000-01-01T00:00:00Z'), max: new Date('2100-01-01T00:00:00Z'), noInvalidDate: true })
      .map((d) => d.toISOString());
  }
  if (schema.pattern) {
    return fc.stringMatching(new RegExp(schema.pattern)).filter((s) => codePoints(s) >= min && codePoints(s) <= max);
  }
  const small = Math.min(max, Math.max(min, MAX_SMALL_STRING));
  return fc.oneof(
    { weight: 5, arbitrary: fc.string({ unit: 'grapheme-ascii', minLength: min, maxLength: small }) },
    { weight: 3, arbitrary: fc.string({ unit: 'grapheme-composite', minLength: min, maxLength: small }) },
    { weight: 1, arbitrary: fc.string({ unit: 'binary', minLength: min, maxLength: small }) },
    // boundaries: exactly the shortest and the longest the schema accepts
    { weight: 1, arbitrary: fc.constantFrom('a'.repeat(min), 'é'.repeat(max), 'z'.repeat(max)) },
  );
}

function numberArb(schema: Schema, integer: boolean): fc.Arbitrary<number> {
  const min = schema.minimum ?? (integer ? -(2 ** 31) : -1e9);
  const max = schema.maximum ?? (integer ? 2 ** 31 - 1 : 1e9);
  const inner = integer
    ? fc.integer({ min: Math.max(min, Number.MIN_SAFE_INTEGER), max: Math.min(max, Number.MAX_SAFE_INTEGER) })
    : fc.double({ min, max, noNaN: true, noDefaultInfinity: true });
  return fc.oneof({ weight: 4, arbitrary: inner }, { weight: 1, arbitrary: fc.constantFrom(min, max) });
}

/** Free-form JSON (bodies of `context`, `arguments`, `execution.body`). */
const freeJson = fc.jsonValue({ maxDepth: 2, depthSize: 'small' });
const freeObject = (maxKeys: number) =>
  fc.oneof(
    fc.dictionary(fc.string({ maxLength: 10 }), freeJson, { maxKeys }),
    fc.record({ amount: fc.integer({ min: -1000, max: 100_000 }), role: fc.constantFrom('admin', 'user', 'guest') }, { requiredKeys: [] }),
  );

export function validValue(input: Schema, opts: GenOptions, name?: string): fc.Arbitrary<unknown> {
  const schema = flatten(input);
  const fallback = plainValid(schema, opts);
  const hint = name !== undefined ? opts.hints?.[name] : undefined;
  const stringy = schema.type === 'string' || (Array.isArray(schema.type) && schema.type.includes('string'));
  return hint && stringy ? hint(schema, fallback) : fallback;
}

function plainValid(schema: Schema, opts: GenOptions): fc.Arbitrary<unknown> {
  if ('const' in schema) return fc.constant(schema.const);
  if (schema.enum) return fc.constantFrom(...(schema.enum as unknown[]));
  const branches = (schema.oneOf ?? schema.anyOf) as Schema[] | undefined;
  if (branches) {
    const { oneOf: _o, anyOf: _a, ...rest } = schema;
    return fc.oneof(...branches.map((b) => validValue(merge(rest, b), opts)));
  }
  if (Array.isArray(schema.type)) return fc.oneof(...schema.type.map((type: string) => plainValid({ ...schema, type }, opts)));
  switch (schema.type) {
    case 'string':
      return stringArb(schema, opts);
    case 'integer':
      return numberArb(schema, true);
    case 'number':
      return numberArb(schema, false);
    case 'boolean':
      return fc.boolean();
    case 'null':
      return fc.constant(null);
    case 'array': {
      const item = validValue(schema.items ?? {}, opts);
      const constraints = {
        minLength: schema.minItems ?? 0,
        maxLength: Math.max(schema.minItems ?? 0, Math.min(schema.maxItems ?? MAX_ITEMS, MAX_ITEMS)),
      };
      return schema.uniqueItems
        ? fc.uniqueArray(item, { ...constraints, selector: (v) => JSON.stringify(v) })
        : fc.array(item, constraints);
    }
    case 'object':
      return objectArb(schema, opts);
    default:
      return freeJson; // no type: any JSON value
  }
}

function objectArb(schema: Schema, opts: GenOptions): fc.Arbitrary<Record<string, unknown>> {
  const maxKeys = Math.min(schema.maxProperties ?? MAX_KEYS, MAX_KEYS);
  const props = Object.entries<Schema>(schema.properties ?? {}).filter(([, s]) => s.readOnly !== true);
  if (props.length === 0) {
    if (schema.additionalProperties && typeof schema.additionalProperties === 'object') {
      const key = fc.stringMatching(/^[A-Za-z][A-Za-z0-9-]{0,15}$/);
      return fc.dictionary(key, validValue(schema.additionalProperties, opts), { maxKeys, minKeys: schema.minProperties ?? 0 });
    }
    return freeObject(maxKeys);
  }
  const required: string[] = schema.required ?? [];
  const record = fc.record(Object.fromEntries(props.map(([key, s]) => [key, validValue(s, opts, key)])), {
    requiredKeys: required.filter((k) => props.some(([p]) => p === k)) as never[],
  });
  const minProperties = schema.minProperties ?? 0;
  return (record as fc.Arbitrary<Record<string, unknown>>).filter((o) => Object.keys(o).length >= minProperties);
}

// ————— invalid variants —————

export const MUTATIONS = [
  'wrong_type',
  'null',
  'missing_required',
  'delete_key',
  'extra_field',
  'huge_string',
  'odd_unicode',
  'deep_nesting',
  'number_edge',
] as const;
export type Mutation = (typeof MUTATIONS)[number];

/** Strings that break naive handling: NUL and control characters, lone surrogates, BOM, bidi overrides, combining marks, non-characters. */
export const ODD_STRINGS = [
  '\u0000',
  'a\u0000b',
  '\ud800',
  '\udfff',
  'x\ud83dy',
  '\ufeffbom',
  '\u202eevil\u202c',
  '\u200b\u200c\u200d',
  `e${'\u0301'.repeat(500)}`,
  '\uffff\ufffe',
  '𝕳𝖊𝖑𝖑𝖔 🧨🔥👩‍👩‍👧‍👦',
  '\u0007\u0008\u001b[31m',
  '%00%ff%',
  '../../etc/passwd',
  "'; DROP TABLE audit_events; --",
  ['$', '{jndi:ldap://127.0.0.1/x}'].join(''),
  '{{7*7}}',
  '<script>alert(1)</script>',
  '\\',
  '"',
  '',
  ' ',
  '__proto__',
];

export const oddString = fc.oneof(
  fc.constantFrom(...ODD_STRINGS),
  fc.string({ unit: 'binary', maxLength: 40 }),
  fc.string({ unit: 'binary-ascii', maxLength: 40 }),
);

/** Any JSON value of another kind than usual, for wrong-type mutations. */
export const wrongValue = fc.oneof(
  fc.integer(),
  fc.double({ noNaN: true, noDefaultInfinity: true }),
  fc.boolean(),
  fc.constant([]),
  fc.constant({}),
  fc.string({ maxLength: 8 }),
  fc.array(fc.integer(), { maxLength: 3 }),
  fc.constant([null]),
  fc.constant({ a: { b: 1 } }),
);

export const numberEdge = fc.constantFrom(-1, 0, -0, 1.5, 2 ** 31, 2 ** 53 + 2, -(2 ** 63), 1e308, -1e308, 5e-324, 1e21);

export interface MutationInput {
  kind: Mutation;
  pick: number;
  other: unknown;
  length: number;
  odd: string;
  key: string;
  depth: number;
  edge: number;
}

export const mutationInput = (kinds: readonly Mutation[] = MUTATIONS): fc.Arbitrary<MutationInput> =>
  fc.record({
    kind: fc.constantFrom(...kinds),
    pick: fc.nat(),
    other: wrongValue,
    length: fc.oneof(fc.integer({ min: 1000, max: 20_000 }), fc.integer({ min: 20_000, max: 300_000 })),
    odd: oddString,
    key: fc.oneof(
      fc.constantFrom('__proto__', 'constructor', 'transport_url', 'url', 'upstream', 'id', 'workspace_id', 'admin', ''),
      fc.string({ maxLength: 12 }),
    ),
    depth: fc.oneof(fc.integer({ min: 20, max: 500 }), fc.integer({ min: 500, max: 10_000 })),
    edge: numberEdge,
  });

type Path = (string | number)[];

function nodes(value: unknown, path: Path = [], out: { path: Path; value: unknown }[] = []) {
  out.push({ path, value });
  if (value instanceof PoolRef || value === null || typeof value !== 'object') return out;
  if (Array.isArray(value)) {
    for (const [i, v] of value.entries()) nodes(v, [...path, i], out);
  } else for (const [k, v] of Object.entries(value)) nodes(v, [...path, k], out);
  return out;
}

function setAt(root: unknown, path: Path, value: unknown): unknown {
  if (path.length === 0) return value;
  let parent: any = root;
  for (const step of path.slice(0, -1)) parent = parent[step];
  const last = path[path.length - 1] as string | number;
  Object.defineProperty(parent, last, { value, enumerable: true, writable: true, configurable: true });
  return root;
}

/** A placeholder replaced by deep nesting once serialised (JSON.stringify would overflow on it). */
export const DEEP = '\u0001deep\u0001';

/** Applies one invalid mutation to a copy of `value`; returns the new value and what was done. */
export function mutate(value: unknown, schema: Schema | undefined, m: MutationInput): { value: unknown; note: string } {
  const copy: unknown = value === undefined ? undefined : structuredCloneWithRefs(value);
  const all = nodes(copy);
  const pickFrom = <T>(items: T[]): T | undefined => (items.length ? items[m.pick % items.length] : undefined);
  const objects = all.filter((n) => n.value && typeof n.value === 'object' && !Array.isArray(n.value) && !(n.value instanceof PoolRef));
  const strings = all.filter((n) => typeof n.value === 'string' || n.value instanceof PoolRef);
  const numbers = all.filter((n) => typeof n.value === 'number');
  const at = (path: Path) => path.join('.') || '(root)';
  switch (m.kind) {
    case 'wrong_type': {
      const target = pickFrom(all)!;
      return { value: setAt(copy, target.path, m.other), note: `${at(target.path)} := ${JSON.stringify(m.other)}` };
    }
    case 'null': {
      const target = pickFrom(all)!;
      return { value: setAt(copy, target.path, null), note: `${at(target.path)} := null` };
    }
    case 'missing_required': {
      const required: string[] = flatten(schema ?? {}).required ?? [];
      const root = copy as Record<string, unknown>;
      const key = pickFrom(required.filter((k) => root && typeof root === 'object' && k in root));
      if (key !== undefined) {
        delete root[key];
        return { value: root, note: `without required ${key}` };
      }
      return mutate(value, schema, { ...m, kind: 'delete_key' });
    }
    case 'delete_key': {
      const target = pickFrom(objects.filter((n) => Object.keys(n.value as object).length > 0));
      if (!target) return mutate(value, schema, { ...m, kind: 'wrong_type' });
      const obj = target.value as Record<string, unknown>;
      const key = Object.keys(obj)[m.pick % Object.keys(obj).length] as string;
      delete obj[key];
      return { value: copy, note: `${at(target.path)} without ${key}` };
    }
    case 'extra_field': {
      const target = pickFrom(objects);
      if (!target) return mutate(value, schema, { ...m, kind: 'wrong_type' });
      return { value: setAt(copy, [...target.path, m.key], m.other), note: `${at(target.path)}.${JSON.stringify(m.key)} added` };
    }
    case 'huge_string': {
      const target = pickFrom(strings) ?? pickFrom(all)!;
      const unit = m.pick % 3 === 0 ? '\u{1f600}' : m.pick % 3 === 1 ? 'é' : 'x';
      return {
        value: setAt(copy, target.path, unit.repeat(Math.ceil(m.length / unit.length))),
        note: `${at(target.path)} := ${m.length} × ${JSON.stringify(unit)}`,
      };
    }
    case 'odd_unicode': {
      const target = pickFrom(strings) ?? pickFrom(all)!;
      return { value: setAt(copy, target.path, m.odd), note: `${at(target.path)} := ${JSON.stringify(m.odd).slice(0, 60)}` };
    }
    case 'deep_nesting': {
      const target = pickFrom(all)!;
      return { value: setAt(copy, target.path, `${DEEP}${m.depth}`), note: `${at(target.path)} nested ${m.depth} deep` };
    }
    case 'number_edge': {
      const target = pickFrom(numbers) ?? pickFrom(all)!;
      return { value: setAt(copy, target.path, m.edge), note: `${at(target.path)} := ${m.edge}` };
    }
  }
}

function structuredCloneWithRefs(value: unknown): unknown {
  if (value instanceof PoolRef || value === null || typeof value !== 'object') return value;
  if (Array.isArray(value)) return value.map(structuredCloneWithRefs);
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value))
    Object.defineProperty(out, k, { value: structuredCloneWithRefs(v), enumerable: true, writable: true, configurable: true });
  return out;
}

/** Serialises a body, expanding deep-nesting placeholders into `[[[…]]]` / `{"a":{…}}`. */
export function serialise(value: unknown): string {
  const text = JSON.stringify(value);
  return text.replace(/"\\u0001deep\\u0001(\d+)"/g, (_all, depth: string) => {
    const d = Number(depth);
    return d % 2 === 0 ? `${'['.repeat(d)}1${']'.repeat(d)}` : `${'{"a":'.repeat(d)}1${'}'.repeat(d)}`;
  });
}
