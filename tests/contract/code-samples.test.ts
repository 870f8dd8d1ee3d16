/**
 * The API reference's code samples (`x-codeSamples`, made by tools/code-samples.ts): every v1
 * operation has a curl command and an SDK call, the curl commands run as written (real curl,
 * through bash, with the variables they name) against a real server whose validator accepts
 * each of them, and each SDK call names a method the SDK has.
 */
import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { createWarden, operations } from '../../packages/sdk/src/index.ts';
import { useTestServer } from '../support/server.ts';

const spec = JSON.parse(readFileSync(new URL('../../spec/dist/openapi.json', import.meta.url), 'utf8'));
const HAS_CURL = existsSync('/usr/bin/curl');
const execFileAsync = promisify(execFile);

interface CodeSample {
  lang: string;
  label: string;
  source: string;
}

const OPERATIONS = Object.entries(spec.paths as Record<string, Record<string, any>>).flatMap(([path, item]) =>
  Object.entries(item)
    .filter(([, op]) => typeof op?.operationId === 'string')
    .map(([method, op]) => ({ path, method, operationId: op.operationId as string, samples: op['x-codeSamples'] as CodeSample[] })),
);

const server = useTestServer();

describe('x-codeSamples', () => {
  it('gives every v1 operation a curl command and an SDK call', () => {
    expect(OPERATIONS.length).toBeGreaterThan(30);
    for (const { operationId, samples } of OPERATIONS) {
      expect(
        samples?.map((s) => `${s.lang}/${s.label}`),
        operationId,
      ).toEqual(['Shell/curl', 'TypeScript/SDK']);
    }
  });

  it('writes each curl command for its own method and path', () => {
    for (const { operationId, method, path, samples } of OPERATIONS) {
      const curl = samples[0]?.source ?? '';
      const [, verb, url] = /^curl -sS(?: -X (\w+))? "\$WARDEN_URL([^"?]*)/.exec(curl) ?? [];
      expect(verb ?? 'GET', operationId).toBe(method.toUpperCase());
      const pattern = new RegExp(`^${path.replace(/\{[^}]+\}/g, '[^/]+')}$`);
      expect(url, operationId).toMatch(pattern);
    }
  });

  it('names in each SDK call a method of the client or a generated operation', () => {
    const warden = createWarden({ apiKey: 'wk_sample' }) as unknown as Record<string, unknown>;
    for (const { operationId, samples } of OPERATIONS) {
      const source = samples[1]?.source ?? '';
      const viaOperations = /await operations\.(\w+)\(/.exec(source);
      if (viaOperations) {
        expect(viaOperations[1], operationId).toBe(operationId);
        expect(typeof (operations as Record<string, unknown>)[operationId], operationId).toBe('function');
        continue;
      }
      const call = /await (warden(?:\.\w+)+)\(/.exec(source)?.[1];
      expect(call, operationId).toBeDefined();
      const target = (call as string)
        .split('.')
        .slice(1)
        .reduce<unknown>((at, name) => (at as Record<string, unknown> | undefined)?.[name], warden);
      expect(typeof target, `${operationId}: ${call}`).toBe('function');
    }
  });

  it.skipIf(!HAS_CURL && process.env.CI !== 'true')(
    'runs every curl command as written, and the server accepts each request',
    async () => {
      const agent = await server.api('POST', '/agents', {
        body: { name: 'Sample runner', provider: 'local', api_key: 'ak_sample_runner_key_0123456789' },
      });
      expect(agent.status).toBe(201);
      const outcomes: string[] = [];
      const env = {
        ...process.env,
        WARDEN_URL: server.url,
        WARDEN_API_KEY: server.key,
        WARDEN_AGENT_KEY: 'ak_sample_runner_key_0123456789',
      };
      for (const { operationId, samples } of OPERATIONS) {
        // The sample as written, plus the status on a line of its own; its example hosts (example.com)
        // point at a closed loopback port, so nothing leaves the machine (the egress guard refuses it).
        const source = String(samples[0]?.source).replace(/https:\/\/[a-z.]*example\.com/g, 'http://127.0.0.1:9');
        // Asynchronously: the server answers from this very process.
        const { stdout: output } = await execFileAsync('bash', ['-c', `${source} --max-time 15 -w '\\n%{http_code}'`], {
          env,
          encoding: 'utf8',
          timeout: 20_000,
        });
        const status = Number(output.slice(output.lastIndexOf('\n') + 1));
        const text = output.slice(0, output.lastIndexOf('\n'));
        const code = text.startsWith('{') ? JSON.parse(text).error?.code : undefined;
        // Well formed and authenticated: what the server then answers depends on the workspace (a
        // sample's agent or policy may not exist here), never on the sample's shape.
        expect(status, operationId).toBeGreaterThanOrEqual(200);
        expect(code, `${operationId}: ${status} ${text.slice(0, 300)}`).not.toBe('invalid_request');
        expect(
          ['unauthorized', 'invalid_agent_key', 'route_not_found', 'method_not_allowed', 'unsupported_media_type'],
          operationId,
        ).not.toContain(code);
        outcomes.push(`${operationId} ${status}${code ? ` ${code}` : ''}`);
      }
      // Most samples succeed outright; the rest fail only for want of what they name here.
      expect(outcomes.filter((o) => / 2\d\d$/.test(o)).length, outcomes.join('\n')).toBeGreaterThan(OPERATIONS.length / 2);
    },
    120_000,
  );
});
