/**
 * `Mcp-Param-*` headers against a tool's `x-mcp-header` declarations (SEP-2243), as the
 * gateway checks them before anything is decided: each declared argument the body carries
 * needs its header from a 2026-07-28 client, with the same value, plain or as a canonical
 * base64 sentinel; a tool never listed is not checked.
 */
import { describe, expect, it } from 'vitest';
import type { McpTarget } from '../src/features/execution/mcp-dialer.ts';
import { ParamHeaders } from '../src/features/mcp-gateway/param-headers.ts';

const target = { id: 'srv-1', transport_url: 'https://mcp.example/mcp' } as McpTarget;
const moved = { ...target, transport_url: 'https://elsewhere.example/mcp' } as McpTarget;
const tool = {
  name: 'deploy',
  inputSchema: {
    type: 'object' as const,
    properties: {
      region: { type: 'string', 'x-mcp-header': 'Region' },
      count: { type: 'integer', 'x-mcp-header': 'Count' },
      note: { type: 'string' },
    },
  },
};
const headers = new ParamHeaders();
headers.learn(target, [tool]);
const base64 = (text: string) => `=?base64?${Buffer.from(text).toString('base64')}?=`;
const check = (args: Record<string, unknown>, sent: Record<string, string | string[]>, required = true) =>
  headers.check(target, 'deploy', args, sent, required)?.message ?? null;

describe('Mcp-Param-* headers', () => {
  it('agree when each declared argument is repeated, plain or base64, numbers as text', () => {
    expect(check({ region: 'eu-west', count: 3, note: 'x' }, { 'mcp-param-region': 'eu-west', 'mcp-param-count': '3' })).toBeNull();
    expect(check({ region: 'zürich' }, { 'mcp-param-region': base64('zürich') })).toBeNull();
    // without the whole sentinel the value is literal
    expect(check({ region: '=?base64?SGVsbG8=' }, { 'mcp-param-region': '=?base64?SGVsbG8=' })).toBeNull();
  });

  it('disagree on another value, a missing header, a header without its argument, a repeat, a malformed sentinel', () => {
    expect(check({ region: 'eu-west' }, { 'mcp-param-region': 'us-east' })).toMatch(/differs/);
    expect(check({ region: 'eu-west' }, {})).toMatch(/needs the Mcp-Param-Region header/);
    expect(check({}, { 'mcp-param-region': 'eu-west' })).toMatch(/no argument region/);
    expect(check({ region: 'a' }, { 'mcp-param-region': ['a', 'a'] })).toMatch(/more than once/);
    // padding left out, and a character outside the alphabet
    expect(check({ region: 'Hello' }, { 'mcp-param-region': '=?base64?SGVsbG8?=' })).toMatch(/malformed/);
    expect(check({ region: 'Hello' }, { 'mcp-param-region': '=?base64?SGVs!!!bG8=?=' })).toMatch(/differs/);
  });

  it('asks a legacy client for none, but holds it to those it sends', () => {
    expect(check({ region: 'eu-west' }, {}, false)).toBeNull();
    expect(check({ region: 'eu-west' }, { 'mcp-param-region': 'us-east' }, false)).toMatch(/differs/);
  });

  it('checks nothing of a tool or a server address it has not seen listed', () => {
    expect(headers.check(target, 'other', { region: 'x' }, {}, true)).toBeNull();
    expect(headers.check(moved, 'deploy', { region: 'x' }, {}, true)).toBeNull();
  });
});
