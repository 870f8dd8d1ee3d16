/**
 * POST /runtime/execute (executeRuntime) over mcp_proxy: a tool called, a tool error, a blocked tool,
 * and each refusal (server down, target denied, unknown session or server).
 */
import { describe, expect, it } from 'vitest';
import { useRuntimeExecute } from './support/runtime-execute.ts';

const { strict, mcp, execute } = useRuntimeExecute({ strict: true, mcp: true });

describe('POST /runtime/execute (executeRuntime)', () => {
  describe('mcp_proxy', () => {
    it('calls a tool of a registered MCP server and answers its content and isError', async () => {
      const calls = mcp.calls().length;
      const res = await execute({
        input: { action: 'mcp.call', agent: 'proxy-bot' },
        execution: { mode: 'mcp_proxy', server: 'upstream-mcp', tool: 'add', arguments: { a: 2, b: 3 } },
      });
      expect(res.status).toBe(200);
      expect(res.body.data.allowed).toBe(true);
      expect(res.body.data.execution).toMatchObject({
        mode: 'mcp_proxy',
        server: 'upstream-mcp',
        tool: 'add',
        content: [{ type: 'text', text: '5' }],
        isError: false,
      });
      expect(mcp.calls().slice(calls)).toEqual(['add']);
    });

    it('answers a tool error as isError true, not a 502', async () => {
      const res = await execute({
        input: { action: 'mcp.call', agent: 'proxy-bot' },
        execution: { mode: 'mcp_proxy', server: 'upstream-mcp', tool: 'fail' },
      });
      expect(res.status).toBe(200);
      expect(res.body.data.execution).toMatchObject({
        mode: 'mcp_proxy',
        tool: 'fail',
        isError: true,
        content: [{ type: 'text', text: 'it broke' }],
      });
    });

    it('never calls a tool a policy blocks', async () => {
      const calls = mcp.calls().length;
      const requests = mcp.requests();
      const res = await execute({
        input: { action: 'mcp.call', agent: 'proxy-bot' },
        execution: { mode: 'mcp_proxy', server: 'upstream-mcp', tool: 'delete_everything' },
      });
      expect(res.status).toBe(200);
      expect(res.body.data).toMatchObject({ allowed: false, execution: null, decision: { result: 'blocked', message: 'Too dangerous' } });
      expect(mcp.calls().length).toBe(calls);
      expect(mcp.requests()).toBe(requests);
    });

    it('answers 502 execution_failed when the MCP server is down', async () => {
      const res = await execute({
        input: { action: 'mcp.call', agent: 'proxy-bot' },
        execution: { mode: 'mcp_proxy', server: 'down-mcp', tool: 'echo', arguments: { text: 'x' } },
      });
      expect(res.status).toBe(502);
      expect(res.body.error.code).toBe('execution_failed');
    });

    it('answers 403 execution_target_denied when the registered URL is loopback and not allow-listed, and calls nothing', async () => {
      const requests = mcp.requests();
      const res = await execute(
        {
          input: { action: 'mcp.call', agent: 'proxy-bot' },
          execution: { mode: 'mcp_proxy', server: 'upstream-mcp', tool: 'echo', arguments: { text: 'x' } },
        },
        { target: strict },
      );
      expect(res.status).toBe(403);
      expect(res.body.error.code).toBe('execution_target_denied');
      expect(mcp.requests()).toBe(requests);
    });

    it('answers 404 session_not_found for a session_id no session of this agent has', async () => {
      const calls = mcp.calls();
      const res = await execute({
        input: { action: 'mcp.call', agent: 'proxy-bot' },
        execution: {
          mode: 'mcp_proxy',
          server: 'upstream-mcp',
          tool: 'echo',
          arguments: { text: 'x' },
          session_id: '00000000-0000-4000-8000-000000000000',
        },
      });
      expect(res.status).toBe(404);
      expect(res.body.error.code).toBe('session_not_found');
      expect(mcp.calls()).toEqual(calls);
    });

    it('answers 404 mcp_server_not_found for an unknown server slug', async () => {
      const res = await execute({
        input: { action: 'mcp.call', agent: 'proxy-bot' },
        execution: { mode: 'mcp_proxy', server: 'no-such-server', tool: 'echo', arguments: { text: 'x' } },
      });
      expect(res.status).toBe(404);
      expect(res.body.error.code).toBe('mcp_server_not_found');
    });
  });
});
