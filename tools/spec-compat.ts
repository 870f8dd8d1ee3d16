/**
 * `npm run spec:compat`: is the bundled spec (spec/dist/openapi.json) still compatible with
 * the last released one (spec/released/openapi.json)? Exits 1 and lists every breaking change,
 * e.g.:
 *
 *   BREAKING getAgent: GET /agents/{id} 200 body.data: removed response field `slug`
 *
 * Breaking, for a client built against the released spec:
 * - an operation removed, or a success status (2xx) it answered removed;
 * - in a response: a field removed or no longer required, an enum value removed, the type
 *   changed or widened (e.g. now nullable), a new variant of a oneOf/anyOf;
 * - in a request (body or parameter): a new required field or parameter, a field or
 *   parameter removed (the API refuses unknown ones), a body newly required, the type, enum
 *   or a constraint (length, range, pattern, format, items) narrowed, a variant removed.
 *
 * Not breaking: new operations, new optional fields and parameters, new response fields,
 * widened request types, descriptions and examples. A compact checker rather than an npm
 * diff tool: openapi-diff 0.24.1 refuses OpenAPI 3.1 ("Swagger Parser only supports versions
 * 3.0.0 … 3.0.3"), and oasdiff and openapi-changes are Go binaries fetched at install time.
 *
 * Usage: tsx tools/spec-compat.ts [--base spec/released/openapi.json] [--head spec/dist/openapi.json] [--json]
 * After a release, refresh the baseline:
 *   cp spec/dist/openapi.json spec/released/openapi.json && npx biome format --write spec/released/openapi.json
 */
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

type Json = any;
type Direction = 'request' | 'response';

export interface BreakingChange {
  /** operationId (or `METHOD path` when it has none). */
  operation: string;
  /** Where in the operation: `GET /agents 200 body.data[].slug`, `POST /agents request body.name`, `query limit`. */
  location: string;
  message: string;
}

const METHODS = ['get', 'put', 'post', 'delete', 'patch', 'head', 'options', 'trace'];
/** Constraints whose larger value accepts more, and whose smaller value accepts more. */
const UPPER_BOUNDS = ['maxLength', 'maxItems', 'maxProperties', 'maximum', 'exclusiveMaximum'];
const LOWER_BOUNDS = ['minLength', 'minItems', 'minProperties', 'minimum', 'exclusiveMinimum'];

function pointer(doc: Json, ref: string): Json {
  if (!ref.startsWith('#/')) throw new Error(`spec-compat: only local $refs are supported, got ${ref}`);
  return ref
    .slice(2)
    .split('/')
    .map((p) => p.replace(/~1/g, '/').replace(/~0/g, '~'))
    .reduce((at: Json, p) => at?.[p], doc);
}

function deref(doc: Json, node: Json): Json {
  let current = node;
  for (let hops = 0; current && typeof current.$ref === 'string'; hops++) {
    if (hops > 32) throw new Error(`spec-compat: $ref cycle at ${node.$ref}`);
    current = pointer(doc, current.$ref);
  }
  return current;
}

/** A schema with its `$ref` followed and `allOf` merged (properties and required united). */
function flatten(doc: Json, node: Json): Json {
  const schema = deref(doc, node) ?? {};
  if (!Array.isArray(schema.allOf)) return schema;
  const { allOf, ...rest } = schema;
  const merged: Json = { ...rest };
  for (const part of allOf.map((p: Json) => flatten(doc, p))) {
    for (const [key, value] of Object.entries(part)) {
      if (key === 'properties') merged.properties = { ...merged.properties, ...(value as object) };
      else if (key === 'required') merged.required = [...new Set([...(merged.required ?? []), ...(value as string[])])];
      else if (!(key in merged)) merged[key] = value;
    }
  }
  return merged;
}

function types(schema: Json): Set<string> | undefined {
  const set = new Set<string>();
  if (typeof schema.type === 'string') set.add(schema.type);
  else if (Array.isArray(schema.type)) for (const t of schema.type) set.add(t);
  else if (schema.const !== undefined) set.add(schema.const === null ? 'null' : typeof schema.const);
  else return undefined;
  // An integer is a number: number → integer narrows, integer → number widens.
  if (set.has('number')) set.add('integer');
  return set;
}

function enumValues(schema: Json): unknown[] | undefined {
  if (Array.isArray(schema.enum)) return schema.enum;
  if (schema.const !== undefined) return [schema.const];
  return undefined;
}

const show = (value: unknown) => JSON.stringify(value);

class Comparison {
  readonly changes: BreakingChange[] = [];
  private readonly seen = new Set<string>();

  constructor(
    private readonly base: Json,
    private readonly head: Json,
  ) {}

  private add(operation: string, location: string, message: string) {
    this.changes.push({ operation, location, message });
  }

  /** Breaking differences of one schema pair, for values flowing in `direction`. */
  schema(op: string, where: string, baseNode: Json, headNode: Json, direction: Direction): void {
    // Recursive schemas: compare each pair of $refs once per location.
    if (baseNode?.$ref && headNode?.$ref) {
      const key = `${op} ${where} ${baseNode.$ref} ${headNode.$ref} ${direction}`;
      if (this.seen.has(key)) return;
      this.seen.add(key);
    }
    const b = flatten(this.base, baseNode);
    const h = flatten(this.head, headNode);

    const bVariants = b.oneOf ?? b.anyOf;
    const hVariants = h.oneOf ?? h.anyOf;
    if (bVariants || hVariants) {
      this.variants(op, where, bVariants ?? [b], hVariants ?? [h], direction);
      return;
    }

    const bt = types(b);
    const ht = types(h);
    if (bt && ht) {
      if (direction === 'request') {
        const lost = [...bt].filter((t) => !ht.has(t));
        if (lost.length) this.add(op, where, `narrowed type: ${lost.join(', ')} no longer accepted`);
      } else {
        const gained = [...ht].filter((t) => !bt.has(t));
        if (gained.length) this.add(op, where, `changed type: the response may now be ${gained.join(', ')}`);
      }
    } else if (direction === 'request' && !bt && ht) {
      this.add(op, where, `narrowed type: now only ${[...ht].join(', ')}`);
    }

    const be = enumValues(b);
    const he = enumValues(h);
    if (he) {
      const removed = (be ?? []).filter((v) => !he.some((x) => show(x) === show(v)));
      if (removed.length) {
        const what = direction === 'request' ? 'enum value no longer accepted' : 'removed enum value in a response';
        this.add(op, where, `${what}: ${removed.map(show).join(', ')}`);
      }
      if (!be && direction === 'request') this.add(op, where, `narrowed type: now limited to ${he.map(show).join(', ')}`);
    }

    if (direction === 'request') this.constraints(op, where, b, h);

    const bProps: Record<string, Json> = b.properties ?? {};
    const hProps: Record<string, Json> = h.properties ?? {};
    const bRequired = new Set<string>(b.required ?? []);
    const hRequired = new Set<string>(h.required ?? []);
    const hidden = (prop: Json) => {
      const p = deref(this.base, prop) ?? {};
      return direction === 'response' ? p.writeOnly === true : p.readOnly === true;
    };
    for (const [name, prop] of Object.entries(bProps)) {
      if (hidden(prop)) continue;
      const at = `${where}.${name}`;
      if (!(name in hProps)) {
        if (direction === 'response') this.add(op, where, `removed response field \`${name}\``);
        else if (h.additionalProperties === false) this.add(op, where, `removed request field \`${name}\` (unknown fields are refused)`);
        continue;
      }
      this.schema(op, at, prop, hProps[name], direction);
      if (direction === 'response' && bRequired.has(name) && !hRequired.has(name)) {
        this.add(op, where, `response field \`${name}\` is no longer required (may be missing)`);
      }
    }
    if (direction === 'request') {
      for (const name of hRequired) {
        if (!bRequired.has(name)) this.add(op, where, `added required request field \`${name}\``);
      }
      if (b.additionalProperties !== false && h.additionalProperties === false && Object.keys(bProps).length === 0) {
        this.add(op, where, 'narrowed type: unknown fields are now refused');
      }
    }
    if (typeof b.additionalProperties === 'object' && typeof h.additionalProperties === 'object') {
      this.schema(op, `${where}{*}`, b.additionalProperties, h.additionalProperties, direction);
    }
    if (b.items && h.items) this.schema(op, `${where}[]`, b.items, h.items, direction);
  }

  private constraints(op: string, where: string, b: Json, h: Json) {
    for (const key of UPPER_BOUNDS) {
      if (h[key] !== undefined && (b[key] === undefined || h[key] < b[key]))
        this.add(op, where, `narrowed: ${key} ${b[key] ?? 'none'} → ${h[key]}`);
    }
    for (const key of LOWER_BOUNDS) {
      if (h[key] !== undefined && (b[key] === undefined || h[key] > b[key]))
        this.add(op, where, `narrowed: ${key} ${b[key] ?? 'none'} → ${h[key]}`);
    }
    for (const key of ['pattern', 'format']) {
      if (h[key] !== undefined && h[key] !== b[key]) this.add(op, where, `narrowed: ${key} ${show(b[key] ?? null)} → ${show(h[key])}`);
    }
    if (h.uniqueItems === true && b.uniqueItems !== true) this.add(op, where, 'narrowed: items must now be unique');
  }

  /**
   * Unions (oneOf/anyOf): a request variant the client could send must still be accepted by
   * some variant; a response variant the server may send must match some released variant.
   * When none matches cleanly, the closest one's differences are reported.
   */
  private variants(op: string, where: string, bVariants: Json[], hVariants: Json[], direction: Direction) {
    const diff = (bv: Json, hv: Json) => {
      const probe = new Comparison(this.base, this.head);
      probe.schema(op, where, bv, hv, direction);
      return probe.changes;
    };
    const [from, to] = direction === 'request' ? [bVariants, hVariants] : [hVariants, bVariants];
    from.forEach((variant, i) => {
      const candidates = to.map((other) => (direction === 'request' ? diff(variant, other) : diff(other, variant)));
      const closest = candidates.reduce((best, c) => (c.length < best.length ? c : best), candidates[0] ?? []);
      if (candidates.length === 0) this.add(op, where, `${direction} variant ${i + 1} of the union has no counterpart`);
      else if (closest.length > 0) {
        for (const change of closest) this.add(op, change.location, `${direction} variant ${i + 1}: ${change.message}`);
      }
    });
  }

  operation(label: string, route: string, b: Json, h: Json): void {
    const op = b.operationId ?? label;
    // Parameters, keyed by where and name (operation-level ones are all this spec uses).
    const params = (doc: Json, node: Json) =>
      new Map<string, Json>((node.parameters ?? []).map((p: Json) => deref(doc, p)).map((p: Json) => [`${p.in} ${p.name}`, p]));
    const bParams = params(this.base, b);
    const hParams = params(this.head, h);
    for (const [key, hp] of hParams) {
      const bp = bParams.get(key);
      if (hp.required && !bp?.required) this.add(op, `${route} ${key}`, bp ? 'parameter is now required' : 'added required parameter');
    }
    for (const [key, bp] of bParams) {
      const hp = hParams.get(key);
      if (!hp) {
        if (bp.in !== 'header' && bp.in !== 'cookie') this.add(op, `${route} ${key}`, 'removed parameter (unknown ones are refused)');
        continue;
      }
      if (bp.schema && hp.schema) this.schema(op, `${route} ${key}`, bp.schema, hp.schema, 'request');
    }

    const bBody = deref(this.base, b.requestBody);
    const hBody = deref(this.head, h.requestBody);
    if (hBody?.required && !bBody?.required) this.add(op, `${route} request body`, 'a request body is now required');
    const bBodySchema = bBody?.content?.['application/json']?.schema;
    const hBodySchema = hBody?.content?.['application/json']?.schema;
    if (bBodySchema && hBodySchema) this.schema(op, `${route} request body`, bBodySchema, hBodySchema, 'request');
    else if (bBodySchema && hBody && !hBodySchema) this.add(op, `${route} request body`, 'application/json is no longer accepted');

    for (const [status, bResponseNode] of Object.entries<Json>(b.responses ?? {})) {
      if (!/^2\d\d$/.test(status)) continue;
      const hResponseNode = h.responses?.[status];
      if (!hResponseNode) {
        this.add(op, `${route} ${status}`, 'removed success status');
        continue;
      }
      const bSchema = deref(this.base, bResponseNode)?.content?.['application/json']?.schema;
      const hResponse = deref(this.head, hResponseNode);
      const hSchema = hResponse?.content?.['application/json']?.schema;
      if (bSchema && !hSchema) this.add(op, `${route} ${status}`, 'the JSON body of this response was removed');
      else if (bSchema && hSchema) this.schema(op, `${route} ${status} body`, bSchema, hSchema, 'response');
    }
  }

  run(): BreakingChange[] {
    for (const [path, bItemNode] of Object.entries<Json>(this.base.paths ?? {})) {
      const bItem = deref(this.base, bItemNode);
      const hItem = deref(this.head, this.head.paths?.[path]);
      for (const method of METHODS) {
        const b = bItem?.[method];
        if (!b) continue;
        const route = `${method.toUpperCase()} ${path}`;
        const h = hItem?.[method];
        if (!h) this.add(b.operationId ?? route, route, 'removed operation');
        else this.operation(route, route, b, h);
      }
    }
    return this.changes;
  }
}

/** Every breaking change from `base` (released) to `head` (candidate); empty when compatible. */
export function compareSpecs(base: Json, head: Json): BreakingChange[] {
  return new Comparison(base, head).run();
}

function main(argv: string[]): number {
  const arg = (name: string, fallback: string) => {
    const i = argv.indexOf(name);
    return i >= 0 && argv[i + 1] ? (argv[i + 1] as string) : fallback;
  };
  const root = resolve(fileURLToPath(new URL('..', import.meta.url)));
  const baseFile = resolve(root, arg('--base', 'spec/released/openapi.json'));
  const headFile = resolve(root, arg('--head', 'spec/dist/openapi.json'));
  const base = JSON.parse(readFileSync(baseFile, 'utf8'));
  const head = JSON.parse(readFileSync(headFile, 'utf8'));
  const changes = compareSpecs(base, head);
  if (argv.includes('--json')) {
    console.log(JSON.stringify({ base: baseFile, head: headFile, breaking: changes }, null, 2));
  } else if (changes.length === 0) {
    console.log(`spec-compat: ${headFile} is compatible with ${baseFile} (${base.info?.version} → ${head.info?.version})`);
  } else {
    for (const c of changes) console.error(`BREAKING ${c.operation}: ${c.location}: ${c.message}`);
    console.error(`spec-compat: ${changes.length} breaking change(s) against the released spec ${baseFile}`);
  }
  return changes.length === 0 ? 0 : 1;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  process.exitCode = main(process.argv.slice(2));
}
