/**
 * Bundles the split spec (spec/openapi.yaml and the files it names) into one document,
 * spec/dist/openapi.json, which every tool reads: the generator, the server's validator,
 * Prism, Spectral and the docs.
 *
 * Conventions that keep the source files short:
 * - A `$ref` to a relative file (no `#`) is replaced by that file's content. References
 *   inside any file that start with `#/` always mean the root document.
 * - `{ $merge: [fileA, fileB] }` is replaced by the union of those files' mappings (the
 *   dashboard spec reuses every v1 schema beside its own).
 * - What holds for every operation is written once and added here: the standard response
 *   headers (components/headers.yaml) on every response, `Retry-After` on 429s and on the
 *   ServiceUnavailable (503) component, the 401 response on every operation that needs a
 *   key, and the 429, 500, 503 and default responses on every operation.
 */
import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { parse } from 'yaml';

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
type JsonObject = { [key: string]: Json };

const HTTP_METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'];
const COMMON_HEADERS = [
  'X-Request-Id',
  'X-Response-Time',
  'X-RateLimit-Limit',
  'X-RateLimit-Remaining',
  'X-RateLimit-Reset',
  // `RateLimit` is sent too but not declared: the OWASP ruleset accepts exactly one family
  // of rate-limit headers per response (oneOf), and X-RateLimit-* is the one the v1 reference names.
  'RateLimit-Policy',
  'Access-Control-Allow-Origin',
];

function isObject(value: Json | undefined): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function inlineFileRefs(node: Json, baseDir: string): Json {
  if (Array.isArray(node)) return node.map((item) => inlineFileRefs(item, baseDir));
  if (!isObject(node)) return node;
  if (Array.isArray(node.$merge)) {
    const merged: JsonObject = {};
    for (const part of node.$merge) {
      const file = resolve(baseDir, String(part));
      const content = inlineFileRefs(parse(readFileSync(file, 'utf8')) as Json, dirname(file));
      if (!isObject(content)) throw new Error(`${file}: $merge takes files of mappings`);
      for (const [key, value] of Object.entries(content)) {
        if (key in merged) throw new Error(`${file}: '${key}' is defined twice in a $merge`);
        merged[key] = value;
      }
    }
    return merged;
  }
  const ref = node.$ref;
  if (typeof ref === 'string' && !ref.startsWith('#')) {
    const file = resolve(baseDir, ref);
    return inlineFileRefs(parse(readFileSync(file, 'utf8')) as Json, dirname(file));
  }
  const out: JsonObject = {};
  for (const [key, value] of Object.entries(node)) out[key] = inlineFileRefs(value, baseDir);
  return out;
}

const headerRefs = (names: string[]): JsonObject =>
  Object.fromEntries(names.map((name) => [name, { $ref: `#/components/headers/${name}` }]));

/**
 * Retry-After goes on a 429 written in an operation, and on the components that tell the
 * caller to retry: TooManyRequests (429) and ServiceUnavailable (503). Health's own 503 is a
 * probe's answer and carries none.
 */
const RETRY_AFTER_COMPONENTS = new Set(['TooManyRequests', 'ServiceUnavailable']);

function addHeaders(response: JsonObject, retryAfter: boolean): void {
  if (typeof response.$ref === 'string') return; // the component itself gets them
  const names = retryAfter ? [...COMMON_HEADERS, 'Retry-After'] : COMMON_HEADERS;
  response.headers = { ...headerRefs(names), ...(isObject(response.headers) ? response.headers : {}) };
}

const UNIVERSAL_RESPONSES: Array<[string, string, boolean]> = [
  // [status, component, only for operations that need a key]
  ['401', 'Unauthorized', true],
  ['429', 'TooManyRequests', false],
  ['500', 'InternalError', false],
  // Any operation may meet an unreachable database, from the key lookup on.
  ['503', 'ServiceUnavailable', false],
  ['default', 'Default', false],
];

export function bundleSpec(rootFile: string): JsonObject {
  const doc = inlineFileRefs(parse(readFileSync(rootFile, 'utf8')) as Json, dirname(rootFile));
  if (!isObject(doc) || !isObject(doc.paths) || !isObject(doc.components)) {
    throw new Error(`${rootFile}: not an OpenAPI document with paths and components`);
  }
  const components = doc.components;
  const responses = components.responses as JsonObject;
  for (const pathItem of Object.values(doc.paths)) {
    if (!isObject(pathItem)) continue;
    for (const method of HTTP_METHODS) {
      const operation = pathItem[method];
      if (!isObject(operation)) continue;
      const needsKey = !(Array.isArray(operation.security) && operation.security.length === 0);
      const opResponses = (operation.responses ?? {}) as JsonObject;
      for (const [status, component, keyOnly] of UNIVERSAL_RESPONSES) {
        if (!(status in opResponses) && (needsKey || !keyOnly)) {
          opResponses[status] = { $ref: `#/components/responses/${component}` };
        }
      }
      // Keep statuses in numeric order with `default` last, whatever the source order.
      const ordered = Object.keys(opResponses).sort((a, b) => (a === 'default' ? 1 : b === 'default' ? -1 : a.localeCompare(b)));
      operation.responses = Object.fromEntries(ordered.map((status) => [status, opResponses[status] as Json]));
      for (const [status, response] of Object.entries(operation.responses)) {
        if (isObject(response)) addHeaders(response, status === '429');
      }
    }
  }
  for (const [name, response] of Object.entries(responses)) {
    if (isObject(response)) addHeaders(response, RETRY_AFTER_COMPONENTS.has(name));
  }
  return doc;
}
