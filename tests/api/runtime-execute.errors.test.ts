/**
 * POST /runtime/execute (executeRuntime): each refusal — 400 invalid_execution_mode, invalid_execution,
 * invalid_execution_url; 403 execution_target_denied (audited, nothing sent); 403
 * insufficient_permission; 401 — and IPv6 loopback allowed only when allow-listed.
 */
import { describe, expect, it } from 'vitest';
import { keyFor } from '../support/server.ts';
import { PERMISSIONS, useRuntimeExecute } from './support/runtime-execute.ts';

const { server, strict, upstream, upstream6, execute, executeUnchecked, http, seen, auditEvents } = useRuntimeExecute({ strict: true });

describe('POST /runtime/execute (executeRuntime)', () => {
  describe('errors', () => {
    it('answers 400 invalid_execution_mode for an unknown mode', async () => {
      const res = await executeUnchecked({
        input: { action: 'x', agent: 'proxy-bot' },
        execution: { mode: 'ftp', method: 'GET', url: `${upstream.origin}/json` },
      });
      expect(res.status).toBe(400);
      expect(res.body.error.code).toBe('invalid_execution_mode');
    });

    it.each([
      ['http_proxy without method', { mode: 'http_proxy', url: 'http://127.0.0.1:9/' }],
      ['http_proxy with an unknown method', { mode: 'http_proxy', method: 'BREW', url: 'http://127.0.0.1:9/' }],
      ['http_proxy with a timeout over 30 s', { mode: 'http_proxy', method: 'GET', url: 'http://127.0.0.1:9/', timeout_ms: 60_000 }],
      ['mcp_proxy without tool', { mode: 'mcp_proxy', server: 'upstream-mcp' }],
      ['mcp_proxy without server', { mode: 'mcp_proxy', tool: 'echo' }],
      ['mcp_proxy with a url', { mode: 'mcp_proxy', server: 'upstream-mcp', tool: 'echo', url: 'http://127.0.0.1:9/' }],
    ])('answers 400 invalid_execution for %s', async (_label, execution) => {
      const { result: res, requests } = await seen(() => executeUnchecked({ input: { action: 'x', agent: 'proxy-bot' }, execution }));
      expect(res.status).toBe(400);
      expect(res.body.error.code).toBe('invalid_execution');
      expect(requests).toEqual([]);
    });

    it.each([
      ['not a url', 'not a url'],
      ['an ftp: URL', 'ftp://x'],
      ['a relative URL', '/x'],
      ['a file: URL', 'file:///etc/passwd'],
    ])('answers 400 invalid_execution_url for %s', async (_label, url) => {
      const res = await execute({ input: { action: 'x', agent: 'proxy-bot' }, execution: { mode: 'http_proxy', method: 'GET', url } });
      expect(res.status).toBe(400);
      expect(res.body.error.code).toBe('invalid_execution_url');
    });

    it('answers 400 invalid_execution_url for credentials in the URL, and sends nothing', async () => {
      const { result: res, connections } = await seen(() =>
        execute({
          input: { action: 'x', agent: 'proxy-bot' },
          execution: { mode: 'http_proxy', method: 'GET', url: `http://user:pw@127.0.0.1:${upstream.port}/json` },
        }),
      );
      expect(res.status).toBe(400);
      expect(res.body.error.code).toBe('invalid_execution_url');
      expect(connections).toBe(0);
    });

    it.each([
      ['127.0.0.1', () => `http://127.0.0.1:${upstream.port}/json`],
      ['localhost (denied after DNS resolution)', () => `http://localhost:${upstream.port}/json`],
      ['127.1', () => `http://127.1:${upstream.port}/json`],
      ['[::ffff:127.0.0.1]', () => `http://[::ffff:127.0.0.1]:${upstream.port}/json`],
    ])('answers 403 execution_target_denied for %s without an allowlist, and the listener sees no connection', async (_label, url) => {
      const {
        result: res,
        requests,
        connections,
      } = await seen(() =>
        execute(
          { input: { action: 'http.get', agent: 'proxy-bot' }, execution: { mode: 'http_proxy', method: 'GET', url: url() } },
          { target: strict },
        ),
      );
      expect(res.status).toBe(403);
      expect(res.body.error.code).toBe('execution_target_denied');
      expect(requests).toEqual([]);
      expect(connections).toBe(0);
    });

    it('answers 403 execution_target_denied for [::1] without an allowlist, and the listener sees no connection', async ({ skip }) => {
      const target = upstream6();
      if (!target) return skip('::1 is not available here');
      const before = target.requests.length;
      const connections = target.connections();
      const res = await execute(
        {
          input: { action: 'http.get', agent: 'proxy-bot' },
          execution: { mode: 'http_proxy', method: 'GET', url: `http://[::1]:${target.port}/json` },
        },
        { target: strict },
      );
      expect(res.status).toBe(403);
      expect(res.body.error.code).toBe('execution_target_denied');
      expect(target.requests.length).toBe(before);
      expect(target.connections()).toBe(connections);
    });

    it('reaches [::1] when the allowlist names ::1/128', async ({ skip }) => {
      const target = upstream6();
      if (!target) return skip('::1 is not available here');
      const res = await execute(http('/json', { url: `${target.origin}/json` }));
      expect(res.status).toBe(200);
      expect(res.body.data.execution).toMatchObject({ status: 200, body: { hello: 'world' } });
    });

    it('audits a denied target as the outcome of the execution', async () => {
      const res = await execute(
        {
          input: { action: 'http.denied-audit', agent: 'proxy-bot' },
          execution: { mode: 'http_proxy', method: 'GET', url: `http://127.0.0.1:${upstream.port}/json` },
        },
        { target: strict },
      );
      expect(res.status).toBe(403);
      const events = await auditEvents('http.denied-audit', strict);
      expect(events).toHaveLength(2);
      expect(events.every((e) => e.source === 'execution')).toBe(true);
      expect(events.map((e) => e.result)).toContain('blocked');
    });

    it('answers 403 insufficient_permission for a key without runtime:execute, and sends nothing', async () => {
      const key = await keyFor(server, PERMISSIONS.filter((p) => p !== 'runtime:execute' && p !== 'admin').join(','));
      const { result: res, requests, connections } = await seen(() => execute(http('/json'), { key }));
      expect(res.status).toBe(403);
      expect(res.body.error.code).toBe('insufficient_permission');
      expect(requests).toEqual([]);
      expect(connections).toBe(0);
    });

    it('answers 401 unauthorized without a key, and sends nothing', async () => {
      const { result: res, requests } = await seen(() => execute(http('/json'), { key: null }));
      expect(res.status).toBe(401);
      expect(res.body).toEqual({ error: { code: 'unauthorized', message: 'A valid API key is required' } });
      expect(requests).toEqual([]);
    });
  });
});
