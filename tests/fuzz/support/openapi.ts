/**
 * The bundled spec as plain data for the fuzzer: every operation with its parameters, request
 * schema and response schemas, `$ref`s resolved inline (the spec has no recursive schema; a
 * cycle would throw here rather than loop).
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

export type Schema = Record<string, any>;

export interface Parameter {
  name: string;
  in: 'path' | 'query' | 'header';
  required: boolean;
  schema: Schema;
}

export interface Operation {
  operationId: string;
  method: string;
  /** Template, e.g. `/agents/{id}`. */
  path: string;
  parameters: Parameter[];
  body: Schema | undefined;
  bodyRequired: boolean;
  /** Response body schema by status ('200', '400', …, 'default'); null when a response has no JSON body. */
  responses: Record<string, Schema | null>;
  permission: string | undefined;
}

export const SPEC_PATH = fileURLToPath(new URL('../../../spec/dist/openapi.json', import.meta.url));

export function loadSpec(): Schema {
  return JSON.parse(readFileSync(SPEC_PATH, 'utf8'));
}

function pointer(root: Schema, ref: string): Schema {
  if (!ref.startsWith('#/')) throw new Error(`external $ref ${ref} is not supported`);
  let node: any = root;
  for (const raw of ref.slice(2).split('/')) node = node?.[raw.replace(/~1/g, '/').replace(/~0/g, '~')];
  if (node === undefined) throw new Error(`unresolved $ref ${ref}`);
  return node;
}

/** A copy of `node` with every `$ref` replaced by its target (siblings of `$ref` kept; a recursive one, once). */
export function deref(root: Schema, node: unknown, seen: string[] = []): any {
  if (Array.isArray(node)) return node.map((item) => deref(root, item, seen));
  if (!node || typeof node !== 'object') return node;
  const { $ref, ...rest } = node as Schema;
  let out: Schema = {};
  if (typeof $ref === 'string') {
    // a schema that contains itself (an audit event's folded outcome event) is expanded once; below that, any value
    if (seen.includes($ref)) return {};
    out = deref(root, pointer(root, $ref), [...seen, $ref]);
  }
  for (const [key, value] of Object.entries(rest)) out[key] = deref(root, value, seen);
  return out;
}

export function listOperations(spec: Schema): Operation[] {
  const ops: Operation[] = [];
  for (const [path, item] of Object.entries<Schema>(spec.paths)) {
    const shared: Schema[] = item.parameters ?? [];
    for (const method of ['get', 'post', 'put', 'patch', 'delete']) {
      const op = item[method];
      if (!op?.operationId) continue;
      const parameters = [...shared, ...(op.parameters ?? [])]
        .map((p) => deref(spec, p) as Schema)
        .map((p) => ({ name: p.name, in: p.in, required: p.required === true, schema: p.schema ?? {} }));
      const requestBody = op.requestBody ? deref(spec, op.requestBody) : undefined;
      const responses: Record<string, Schema | null> = {};
      for (const [status, response] of Object.entries<Schema>(op.responses)) {
        const resolved = deref(spec, response);
        responses[status] = resolved.content?.['application/json']?.schema ?? null;
      }
      ops.push({
        operationId: op.operationId,
        method: method.toUpperCase(),
        path,
        parameters,
        body: requestBody?.content?.['application/json']?.schema,
        bodyRequired: requestBody?.required === true,
        responses,
        permission: op['x-required-permission'],
      });
    }
  }
  return ops;
}
