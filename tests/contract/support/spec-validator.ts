/**
 * Validates HTTP answers against the bundled spec: finds the operation of a request (method +
 * path, with or without the /api/v1 base path), the response the spec declares for the status
 * (or `default`), and checks the JSON body against its schema with ajv (JSON Schema 2020-12,
 * the dialect of OpenAPI 3.1).
 */
import { readFileSync } from 'node:fs';
import { Ajv2020 } from 'ajv/dist/2020.js';
import * as formatsModule from 'ajv-formats';

type Json = any;

// ajv-formats is CommonJS with `exports.default`; under NodeNext the default import is the module.
type FormatsPlugin = (ajv: Ajv2020) => Ajv2020;
const addFormats = ((formatsModule as { default?: unknown }).default ?? formatsModule) as FormatsPlugin;

const METHODS = ['get', 'put', 'post', 'delete', 'patch', 'head', 'options', 'trace'];
const SPEC_ID = 'openapi.json';

export interface Operation {
  operationId: string;
  method: string;
  path: string;
  pattern: RegExp;
  node: Json;
  pointer: string;
}

export interface Finding {
  operation: string;
  status: number;
  problem: string;
}

const escapePointer = (part: string) => part.replace(/~/g, '~0').replace(/\//g, '~1');

export function loadSpec(file: string): Json {
  return JSON.parse(readFileSync(file, 'utf8'));
}

export function createSpecValidator(spec: Json, basePath = '') {
  const ajv = new Ajv2020({ strict: false, allErrors: true, validateSchema: false });
  addFormats(ajv);
  ajv.addFormat('int32', { type: 'number', validate: (n: number) => Number.isInteger(n) && n >= -(2 ** 31) && n < 2 ** 31 });
  ajv.addFormat('int64', { type: 'number', validate: (n: number) => Number.isInteger(n) });
  ajv.addSchema(spec, SPEC_ID);

  const operations: Operation[] = [];
  for (const [path, item] of Object.entries(spec.paths as Record<string, Json>)) {
    for (const method of METHODS) {
      const node = item[method];
      if (!node) continue;
      const regex = path.replace(/[.*+?^${}()|[\]\\]/g, '\\$&').replace(/\\\{[^}]+\\\}/g, '[^/]+');
      operations.push({
        operationId: node.operationId,
        method: method.toUpperCase(),
        path,
        pattern: new RegExp(`^${basePath}${regex}$`),
        node,
        pointer: `#/paths/${escapePointer(path)}/${method}`,
      });
    }
  }

  /** Follows a `$ref` to components/responses; returns the node and its JSON pointer. */
  const resolveResponse = (operation: Operation, status: number): { node: Json; pointer: string } | undefined => {
    const responses = operation.node.responses ?? {};
    const key = String(status) in responses ? String(status) : `${String(status)[0]}XX` in responses ? `${String(status)[0]}XX` : 'default';
    let node = responses[key];
    let pointer = `${operation.pointer}/responses/${key}`;
    if (!node) return undefined;
    for (let hops = 0; typeof node.$ref === 'string' && hops < 10; hops++) {
      pointer = node.$ref;
      node = node.$ref
        .slice(2)
        .split('/')
        .map((p: string) => p.replace(/~1/g, '/').replace(/~0/g, '~'))
        .reduce((at: Json, p: string) => at?.[p], spec);
    }
    return { node, pointer };
  };

  const find = (method: string, pathname: string) => operations.find((o) => o.method === method.toUpperCase() && o.pattern.test(pathname));

  /** Problems of one answer to `operation`; empty when it is what the spec promises. */
  const checkAnswer = (operation: Operation, status: number, contentType: string | null, body: unknown): Finding[] => {
    const label = operation.operationId;
    const declared = operation.node.responses ?? {};
    if (!(String(status) in declared) && !('default' in declared)) {
      return [{ operation: label, status, problem: `status ${status} is not declared` }];
    }
    const response = resolveResponse(operation, status);
    const media = response?.node?.content?.['application/json'];
    if (!media)
      return body === '' || body === undefined ? [] : [{ operation: label, status, problem: 'a body where the spec declares none' }];
    if (!contentType?.includes('application/json'))
      return [{ operation: label, status, problem: `content-type ${contentType}, not application/json` }];
    const validate = ajv.getSchema(`${SPEC_ID}${response.pointer}/content/application~1json/schema`);
    if (!validate) return [{ operation: label, status, problem: `no schema at ${response.pointer}` }];
    if (validate(body)) return [];
    return (validate.errors ?? []).map((e) => ({
      operation: label,
      status,
      problem: `${e.instancePath || '/'} ${e.message} ${JSON.stringify(e.params)}`,
    }));
  };

  /** Follows `$ref`s from `node`; the node reached and its JSON pointer. */
  const follow = (node: Json, pointer: string): { node: Json; pointer: string } => {
    for (let hops = 0; typeof node?.$ref === 'string' && hops < 10; hops++) {
      pointer = node.$ref;
      node = node.$ref
        .slice(2)
        .split('/')
        .map((p: string) => p.replace(/~1/g, '/').replace(/~0/g, '~'))
        .reduce((at: Json, p: string) => at?.[p], spec);
    }
    return { node, pointer };
  };

  /**
   * Every example of the spec that does not validate against its schema: the examples of the
   * operations' JSON responses (`example` and each named one of `examples`) and of the
   * component schemas. What the docs show and Prism answers must be what the spec promises.
   */
  const exampleProblems = (): string[] => {
    const problems: string[] = [];
    const check = (schemaPointer: string, value: unknown, where: string) => {
      const validate = ajv.getSchema(`${SPEC_ID}${schemaPointer}`);
      if (!validate) return problems.push(`${where}: no schema at ${schemaPointer}`);
      if (!validate(value)) {
        for (const e of validate.errors ?? []) problems.push(`${where}: ${e.instancePath || '/'} ${e.message} ${JSON.stringify(e.params)}`);
      }
    };
    const seen = new Set<string>();
    for (const operation of operations) {
      for (const [status, ref] of Object.entries((operation.node.responses ?? {}) as Record<string, Json>)) {
        const response = follow(ref, `${operation.pointer}/responses/${status}`);
        const media = response.node?.content?.['application/json'];
        if (!media?.schema) continue;
        const schemaPointer = `${response.pointer}/content/application~1json/schema`;
        // A shared response (components/responses) is checked once, named by its pointer.
        const shared = response.pointer.startsWith('#/components/');
        if (shared && seen.has(response.pointer)) continue;
        seen.add(response.pointer);
        const where = shared ? response.pointer : `${operation.operationId} ${status}`;
        if ('example' in media) check(schemaPointer, media.example, `${where} example`);
        for (const [name, example] of Object.entries((media.examples ?? {}) as Record<string, Json>)) {
          check(schemaPointer, follow(example, '').node?.value, `${where} example '${name}'`);
        }
      }
    }
    for (const [name, schema] of Object.entries((spec.components?.schemas ?? {}) as Record<string, Json>)) {
      if (schema && typeof schema === 'object' && 'example' in schema) {
        check(`#/components/schemas/${escapePointer(name)}`, schema.example, `schema ${name} example`);
      }
    }
    return problems;
  };

  return {
    operations,
    find,
    exampleProblems,
    /** The operation with this operationId. */
    byId: (operationId: string) => operations.find((o) => o.operationId === operationId),
    checkAnswer,
    /** Problems of one answer, its operation found by method and path; empty when it is what the spec promises. */
    check(method: string, pathname: string, status: number, contentType: string | null, body: unknown): Finding[] {
      const operation = find(method, pathname);
      if (!operation) return [{ operation: `${method} ${pathname}`, status, problem: 'no operation of the spec matches this request' }];
      return checkAnswer(operation, status, contentType, body);
    },
  };
}

export type SpecValidator = ReturnType<typeof createSpecValidator>;
