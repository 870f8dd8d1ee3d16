/**
 * Issue 38: every MCP approval was titled "mcp.call by desktop", so an approver could not tell
 * two apart without opening them. A title names the act: the server and the tool, prompt or
 * resource; the HTTP method and URL (secret query values redacted); or the declared action.
 */
import { describe, expect, it } from 'vitest';
import { approvalTitle, httpFacts, mcpFacts } from '../src/features/acts/act.ts';

describe('approvalTitle', () => {
  it('names the MCP server and the tool, the prompt or the resource', () => {
    const call = mcpFacts('github', { method: 'tools/call', params: { name: 'create_issue', arguments: { title: 'x' } } });
    expect(approvalTitle({ action: 'mcp.call' }, call, 'desktop')).toBe('tools/call github create_issue by desktop');
    const prompt = mcpFacts('db', { method: 'prompts/get', params: { name: 'run_sql', arguments: { sql: 'select 1' } } });
    expect(approvalTitle({ action: 'mcp.prompt' }, prompt, 'desktop')).toBe('prompts/get db run_sql by desktop');
    const read = mcpFacts('files', { method: 'resources/read', params: { uri: 'file:///srv/report.txt' } });
    expect(approvalTitle({ action: 'mcp.read' }, read, 'desktop')).toBe('resources/read files file:///srv/report.txt by desktop');
  });

  it('names the HTTP method and URL, with secret query values redacted', () => {
    const facts = httpFacts({ mode: 'http_proxy', method: 'POST', url: 'https://api.example.com/transfer?access_token=abc123&to=7' });
    const title = approvalTitle({ action: 'payments.transfer' }, facts, 'billing-bot');
    expect(title).toMatch(/^POST api\.example\.com\/transfer\?/);
    expect(title).toContain('to=7');
    expect(title).not.toContain('abc123');
    expect(title.endsWith(' by billing-bot')).toBe(true);
  });

  it('falls back to the declared action and resource', () => {
    expect(approvalTitle({ action: 'refund.create', resource: 'orders/1' }, null, 'billing-bot')).toBe(
      'refund.create on orders/1 by billing-bot',
    );
  });
});
