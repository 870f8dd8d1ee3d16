/**
 * tools/spec-compat.ts: the bundled spec is compatible with the released one, and each kind
 * of breaking change is caught (while additions pass).
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { compareSpecs } from '../../tools/spec-compat.ts';

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL('../..', import.meta.url));
type Json = any;
const read = (file: string): Json => JSON.parse(readFileSync(join(ROOT, file), 'utf8'));
const released = read('spec/released/openapi.json');
const current = read('spec/dist/openapi.json');

/** A copy of the released spec changed by `edit`. */
const changed = (edit: (spec: Json) => void): Json => {
  const copy = structuredClone(released);
  edit(copy);
  return copy;
};
const messages = (head: Json) => compareSpecs(released, head).map((c) => `${c.operation}: ${c.location}: ${c.message}`);

const work = mkdtempSync(join(tmpdir(), 'warden-spec-compat-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));
const cli = (args: string[]) =>
  run(join(ROOT, 'node_modules/.bin/tsx'), ['tools/spec-compat.ts', ...args], { cwd: ROOT }).then(
    (r) => ({ code: 0, out: r.stdout + r.stderr }),
    (e: { code: number; stdout: string; stderr: string }) => ({ code: e.code, out: e.stdout + e.stderr }),
  );

describe('npm run spec:compat (tools/spec-compat.ts)', () => {
  it('passes for the current bundled spec against spec/released', async () => {
    expect(compareSpecs(released, current)).toEqual([]);
    const result = await cli([]);
    expect(result.code).toBe(0);
    expect(result.out).toContain('is compatible');
  });

  it('fails, naming the field, for a copy with a response field removed', async () => {
    const broken = changed((s) => {
      delete s.components.schemas.Agent.properties.slug;
      s.components.schemas.Agent.required = s.components.schemas.Agent.required.filter((r: string) => r !== 'slug');
    });
    expect(messages(broken)).toContain('getAgent: GET /agents/{id} 200 body.data: removed response field `slug`');
    expect(messages(broken)).toContain('listAgents: GET /agents 200 body.data[]: removed response field `slug`');
    const file = join(work, 'broken.json');
    writeFileSync(file, JSON.stringify(broken));
    const result = await cli(['--head', file]);
    expect(result.code).toBe(1);
    expect(result.out).toContain('BREAKING createAgent: POST /agents 201 body.data: removed response field `slug`');
  });

  it.each<[string, (s: Json) => void, string]>([
    ['a removed operation', (s) => delete s.paths['/agents/{id}'].delete, 'deleteAgent: DELETE /agents/{id}: removed operation'],
    [
      'a removed success status',
      (s) => delete s.paths['/agents'].post.responses['201'],
      'createAgent: POST /agents 201: removed success status',
    ],
    [
      'a removed enum value in a response',
      (s) => {
        s.components.schemas.AgentStatus.enum = s.components.schemas.AgentStatus.enum.filter((v: string) => v !== 'retired');
      },
      'getAgent: GET /agents/{id} 200 body.data.status: removed enum value in a response: "retired"',
    ],
    [
      'an added required request field',
      (s) => s.components.schemas.AgentCreate.required.push('model'),
      'createAgent: POST /agents request body: added required request field `model`',
    ],
    [
      'a narrowed type',
      (s) => {
        s.components.schemas.AgentCreate.properties.name.maxLength = 50;
      },
      'createAgent: POST /agents request body.name: narrowed: maxLength 200 → 50',
    ],
    [
      'a type changed in a request',
      (s) => {
        s.components.schemas.AgentCreate.properties.tags = { type: 'string' };
      },
      'createAgent: POST /agents request body.tags: narrowed type: array no longer accepted',
    ],
    [
      'a response field made nullable',
      (s) => {
        s.components.schemas.Agent.properties.name = { type: ['string', 'null'] };
      },
      'getAgent: GET /agents/{id} 200 body.data.name: changed type: the response may now be null',
    ],
    [
      'an added required query parameter',
      (s) => s.paths['/mcp-servers'].get.parameters.push({ name: 'team', in: 'query', required: true, schema: { type: 'string' } }),
      'listMcpServers: GET /mcp-servers query team: added required parameter',
    ],
  ])('catches %s', (_label, edit, expected) => {
    expect(messages(changed(edit))).toContain(expected);
  });

  it('lets additions through: a new operation, a new optional field, a new optional parameter, a new enum value', () => {
    const extended = changed((s) => {
      s.paths['/agents/{id}/pause'] = { post: { operationId: 'pauseAgent', responses: { '200': { description: 'ok' } } } };
      s.components.schemas.AgentCreate.properties.team = { type: 'string' };
      s.components.schemas.Agent.properties.team = { type: 'string' };
      s.paths['/mcp-servers'].get.parameters.push({ name: 'team', in: 'query', schema: { type: 'string' } });
      s.components.schemas.AgentProvider.enum.push('newcomer');
      s.components.schemas.AgentCreate.properties.name.maxLength = 400;
    });
    expect(messages(extended)).toEqual([]);
  });
});
