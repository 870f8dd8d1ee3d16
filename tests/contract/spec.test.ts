/**
 * The bundled spec (spec/dist/openapi.json) against the v1 reference: every endpoint and
 * error code of the reference is there, every operation is named and declares the common
 * responses and headers, and regeneration changes no file.
 */
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
type Json = any;
const spec: Json = JSON.parse(readFileSync(join(ROOT, 'spec/dist/openapi.json'), 'utf8'));

const HTTP_METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'];

/** Follows local `$ref`s (`#/components/...`) until a concrete object. */
function deref(node: Json): Json {
  let current = node;
  for (let hops = 0; current && typeof current === 'object' && typeof current.$ref === 'string'; hops++) {
    if (hops > 20) throw new Error(`$ref cycle at ${node.$ref}`);
    const ref: string = current.$ref;
    if (!ref.startsWith('#/')) throw new Error(`non-local $ref ${ref} in the bundled spec`);
    current = ref
      .slice(2)
      .split('/')
      .map((part) => part.replace(/~1/g, '/').replace(/~0/g, '~'))
      .reduce((at: Json, part) => at?.[part], spec);
    if (current === undefined) throw new Error(`dangling $ref ${ref}`);
  }
  return current;
}

interface Operation {
  method: string;
  path: string;
  label: string;
  op: Json;
}

const operations: Operation[] = Object.entries(spec.paths as Record<string, Json>).flatMap(([path, item]) =>
  Object.entries(deref(item) as Record<string, Json>)
    .filter(([method]) => HTTP_METHODS.includes(method))
    .map(([method, op]) => ({ method: method.toUpperCase(), path, label: `${method.toUpperCase()} ${path}`, op: deref(op) })),
);
const byLabel = new Map(operations.map((o) => [o.label, o]));
const authenticated = operations.filter((o) => o.label !== 'GET /health');

/** Every endpoint of the v1 reference, aliases included: the contract. */
const REFERENCE_ENDPOINTS = [
  'GET /health',
  'GET /agents',
  'POST /agents',
  'GET /agents/{id}',
  'PATCH /agents/{id}',
  'DELETE /agents/{id}',
  'GET /policies',
  'POST /policies',
  'GET /approvals',
  'POST /approvals',
  'GET /approval/request',
  'POST /approval/request',
  'PATCH /approvals/{id}',
  'POST /audit',
  'POST /audit-events',
  'GET /audit-logs',
  'GET /events',
  'GET /compliance/status',
  'POST /policy/evaluate',
  'POST /runtime/execute',
  'POST /runtime/mcp/discover',
  'POST /runtime/mcp/call',
  'POST /runtime/mcp/session',
  'GET /mcp-servers',
  'POST /mcp-servers',
  'GET /mcp-servers/{id}',
  'PATCH /mcp-servers/{id}',
  'DELETE /mcp-servers/{id}',
];

/** Implied by the reference (the `policy.updated` event on PATCH) and required by the foundation issue. */
const IMPLIED_ENDPOINTS = ['GET /policies/{id}', 'PATCH /policies/{id}'];

/** The Errors table of the reference: status, codes, and the operations that must declare that status. */
const REFERENCE_ERRORS: Array<{ status: string; codes: string[]; where: string[] }> = [
  {
    status: '400',
    codes: [
      'invalid_request',
      'agent_context_required',
      'environment_context_required',
      'agent_identity_mismatch',
      'environment_mismatch',
      'evaluation_failed',
    ],
    where: ['POST /policy/evaluate'],
  },
  { status: '400', codes: ['policy_evaluation_required'], where: ['POST /audit'] },
  { status: '400', codes: ['invalid_execution_mode', 'invalid_execution', 'invalid_execution_url'], where: ['POST /runtime/execute'] },
  { status: '401', codes: ['unauthorized', 'agent_key_required', 'invalid_agent_key'], where: ['POST /policy/evaluate'] },
  { status: '403', codes: ['agent_not_found', 'agent_inactive', 'execution_proxy_required'], where: ['POST /policy/evaluate'] },
  { status: '403', codes: ['execution_target_denied'], where: ['POST /runtime/execute', 'POST /runtime/mcp/session'] },
  { status: '404', codes: ['mcp_server_not_found'], where: ['POST /runtime/execute'] },
  { status: '502', codes: ['execution_failed'], where: ['POST /runtime/execute'] },
  { status: '502', codes: ['discovery_failed'], where: ['POST /runtime/mcp/discover'] },
  { status: '502', codes: ['call_failed'], where: ['POST /runtime/mcp/call'] },
  { status: '502', codes: ['session_failed'], where: ['POST /runtime/mcp/session'] },
  { status: '503', codes: ['audit_persist_failed'], where: ['POST /policy/evaluate', 'POST /runtime/execute'] },
];
const REFERENCE_ERROR_CODES = [...new Set(REFERENCE_ERRORS.flatMap((row) => row.codes))];

/** Headers the reference puts on every response. */
const COMMON_HEADERS = ['X-Request-Id', 'X-Response-Time', 'X-RateLimit-Limit', 'X-RateLimit-Remaining', 'X-RateLimit-Reset'];

const RUNTIME_ENDPOINTS = [
  'POST /policy/evaluate',
  'POST /runtime/execute',
  'POST /runtime/mcp/discover',
  'POST /runtime/mcp/call',
  'POST /runtime/mcp/session',
];

/** The enum of the `code` field of the error body. */
function errorCodeEnum(): string[] {
  const error = deref(spec.components.schemas.Error);
  const code = deref(error.properties.error.properties.code);
  return code.enum;
}

const headerNames = (response: Json) => Object.keys(deref(response).headers ?? {}).map((name) => name.toLowerCase());

describe('the bundled spec', () => {
  it('is OpenAPI 3.1.0 with a version', () => {
    expect(spec.openapi).toBe('3.1.0');
    expect(typeof spec.info.version).toBe('string');
    expect(spec.servers.some((s: { url: string }) => s.url.endsWith('/api/v1'))).toBe(true);
  });

  it.each(REFERENCE_ENDPOINTS)('has the reference endpoint %s', (label) => {
    expect(byLabel.has(label), `${label} is missing from spec/dist/openapi.json`).toBe(true);
  });

  it.each(IMPLIED_ENDPOINTS)('has the implied endpoint %s', (label) => {
    expect(byLabel.has(label), `${label} is missing from spec/dist/openapi.json`).toBe(true);
  });

  it.each(REFERENCE_ERROR_CODES)('has the reference error code %s in the error-code enum', (code) => {
    expect(errorCodeEnum()).toContain(code);
  });

  it('has the error codes the server itself answers with', () => {
    const codes = errorCodeEnum();
    for (const code of [
      'insufficient_permission',
      'not_found',
      'route_not_found',
      'method_not_allowed',
      'conflict',
      'payload_too_large',
      'unsupported_media_type',
      'rate_limited',
      'internal_error',
      'not_implemented',
    ]) {
      expect(codes, code).toContain(code);
    }
    expect(new Set(codes).size).toBe(codes.length);
  });

  it.each(REFERENCE_ERRORS.flatMap((row) => row.where.map((where) => [where, row.status, row.codes.join(', ')] as const)))(
    '%s declares status %s (for %s)',
    (label, status) => {
      const operation = byLabel.get(label);
      expect(operation, `${label} is missing`).toBeDefined();
      expect(Object.keys(operation?.op.responses ?? {})).toContain(status);
    },
  );

  it('gives every operation a unique operationId', () => {
    const ids = operations.map((o) => o.op.operationId);
    for (const o of operations) expect(typeof o.op.operationId, `${o.label} has no operationId`).toBe('string');
    expect(new Set(ids).size).toBe(ids.length);
  });

  it('requires the bearer key on every operation but GET /health', () => {
    const schemes = spec.components.securitySchemes;
    const bearer = Object.entries(schemes as Record<string, Json>).find(
      ([, s]) => s.type === 'http' && s.scheme?.toLowerCase() === 'bearer',
    )?.[0];
    expect(bearer, 'no http bearer security scheme').toBeDefined();
    expect(byLabel.get('GET /health')?.op.security).toEqual([]);
    for (const o of authenticated) {
      const security: Json[] = o.op.security ?? spec.security ?? [];
      expect(security.length, `${o.label} needs no key`).toBeGreaterThan(0);
      for (const requirement of security)
        expect(Object.keys(requirement), `${o.label} has a requirement without the bearer key`).toContain(bearer);
    }
  });

  it('accepts the agent key header X-Warden-Agent-Key on the runtime endpoints', () => {
    const schemes = spec.components.securitySchemes as Record<string, Json>;
    const agentKey = Object.entries(schemes).find(
      ([, s]) => s.type === 'apiKey' && s.in === 'header' && s.name.toLowerCase() === 'x-warden-agent-key',
    )?.[0];
    expect(agentKey, 'no apiKey security scheme for the X-Warden-Agent-Key header').toBeDefined();
    for (const label of RUNTIME_ENDPOINTS) {
      const security: Json[] = byLabel.get(label)?.op.security ?? [];
      expect(
        security.some((requirement) => agentKey && Object.hasOwn(requirement, agentKey)),
        `${label} does not accept the agent key`,
      ).toBe(true);
    }
  });

  it('requires approvals:decide to decide an approval', () => {
    expect(byLabel.get('PATCH /approvals/{id}')?.op['x-required-permission']).toBe('approvals:decide');
  });

  it.each(authenticated.map((o) => o.label))('%s declares 401, 429 and 500', (label) => {
    const statuses = Object.keys(byLabel.get(label)?.op.responses ?? {});
    for (const status of ['401', '429', '500']) expect(statuses, `${label} lacks ${status}`).toContain(status);
  });

  it.each(operations.map((o) => o.label))('%s declares X-Request-Id, X-Response-Time and X-RateLimit-* on every response', (label) => {
    const responses = byLabel.get(label)?.op.responses ?? {};
    expect(Object.keys(responses).length).toBeGreaterThan(0);
    for (const [status, response] of Object.entries(responses)) {
      const names = headerNames(response);
      for (const header of COMMON_HEADERS) expect(names, `${label} ${status} lacks ${header}`).toContain(header.toLowerCase());
      if (status === '429') expect(names, `${label} 429 lacks Retry-After`).toContain('retry-after');
    }
  });

  it('answers the documented envelopes: {data} on success, {error:{code,message}} on errors', () => {
    const errorSchema = deref(spec.components.schemas.Error);
    for (const o of operations) {
      for (const [status, response] of Object.entries(o.op.responses as Record<string, Json>)) {
        const schema = deref(deref(response).content?.['application/json']?.schema);
        expect(schema, `${o.label} ${status} has no JSON body`).toBeDefined();
        if (status.startsWith('2')) expect(schema.required, `${o.label} ${status} has no data envelope`).toContain('data');
        else if (o.label !== 'GET /health') expect(schema, `${o.label} ${status} is not the Error body`).toBe(errorSchema);
      }
    }
  });

  it('answers paginated lists as {data, has_more, next_cursor}', () => {
    for (const label of ['GET /agents', 'GET /policies', 'GET /mcp-servers', 'GET /events']) {
      const schema = deref(byLabel.get(label)?.op.responses['200'].content['application/json'].schema);
      expect(schema.required, label).toEqual(expect.arrayContaining(['data', 'has_more', 'next_cursor']));
    }
  });
});

function gitAvailable(): boolean {
  return spawnSync('git', ['--version'], { stdio: 'ignore' }).status === 0;
}

describe('npm run generate', () => {
  /*
   * Regenerates in a copy of the sources (with node_modules linked), not in the working tree:
   * generation rewrites spec/dist, packages/*\/src/generated and apps/server/src/db/schema.ts,
   * which test files running in parallel import. The copy is committed to a scratch git
   * repository, so "generation changes no file" is exactly `git status --porcelain spec
   * packages apps` being empty there.
   */
  it('is deterministic: regenerating changes no file under spec/, packages/ or apps/', (ctx) => {
    if (!gitAvailable()) ctx.skip('git is not available: cannot check that generation changes no file');
    const sandbox = mkdtempSync(join(tmpdir(), 'warden-generate-'));
    try {
      const skip = (source: string) =>
        !/[/\\](node_modules|\.turbo|coverage)([/\\]|$)/.test(source) && !/[/\\]packages[/\\][^/\\]+[/\\]dist([/\\]|$)/.test(source);
      for (const entry of ['package.json', 'tsconfig.json', 'tsconfig.base.json', 'biome.json', 'spec', 'tools', 'packages', 'apps']) {
        if (existsSync(join(ROOT, entry))) cpSync(join(ROOT, entry), join(sandbox, entry), { recursive: true, filter: skip });
      }
      symlinkSync(join(ROOT, 'node_modules'), join(sandbox, 'node_modules'), 'dir');
      const git = (...args: string[]) => {
        const result = spawnSync(
          'git',
          ['-c', 'user.name=warden-test', '-c', 'user.email=test@warden.invalid', '-c', 'commit.gpgsign=false', ...args],
          {
            cwd: sandbox,
            encoding: 'utf8',
          },
        );
        expect(result.status, `git ${args.join(' ')}: ${result.stderr}`).toBe(0);
        return result.stdout;
      };
      git('init', '-q');
      git('add', '-A');
      git('commit', '-q', '-m', 'snapshot');

      // The table types start a PGlite and migrate it: seconds, more on a busy machine.
      const generate = spawnSync('npx', ['tsx', 'tools/generate.ts'], { cwd: sandbox, encoding: 'utf8', timeout: 120_000 });
      expect(generate.status, `tools/generate.ts failed:\n${generate.stdout}\n${generate.stderr}`).toBe(0);
      const changed = git('status', '--porcelain', 'spec', 'packages', 'apps');
      expect(
        changed,
        'npm run generate changed these files: the committed generated output is stale or generation is not deterministic',
      ).toBe('');
    } finally {
      rmSync(sandbox, { recursive: true, force: true });
    }
  }, 150_000);
});
