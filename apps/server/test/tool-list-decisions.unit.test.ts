import type { PolicyRule } from '@warden/contract';
import { describe, expect, it } from 'vitest';
import { mcpFacts } from '../src/features/acts/act.ts';
import { type AgentFacts, compilePolicySet, type DecisionInput, decideEach } from '../src/features/policies/engine.ts';

const agent: AgentFacts = {
  id: 'a1',
  slug: 'bot',
  name: 'Bot',
  status: 'active',
  environment: 'production',
  risk_level: null,
  allowed_tools: [],
  allowed_resources: [],
};

/** Whether a tool list shows `tool` under these rules (decideEach as decisions.allowedTools asks it). */
function listed(rules: PolicyRule[], tool: string, defaultDecision: 'allow' | 'block' = 'allow'): boolean {
  const set = compilePolicySet([{ name: 'p', mode: 'enforce', priority: 0, rules }], { production: defaultDecision });
  const act: DecisionInput = {
    action: 'mcp.call',
    environment: 'production',
    tool,
    execution: mcpFacts('srv', { method: 'tools/call', params: { name: tool } }),
  };
  const [decision] = decideEach(set, [[act]], agent);
  return decision !== null && decision !== undefined && decision.effect !== 'block';
}

describe('a tool list hides a tool only when policy refuses every call to it', () => {
  it('hides a tool an unconditional block names, or a block whose condition holds for every call', () => {
    expect(listed([{ match: { tool: ['nuke'] }, effect: 'block' }], 'nuke')).toBe(false);
    expect(listed([{ match: { tool: ['nuke'] }, condition: 'execution.server == "srv"', effect: 'block' }], 'nuke')).toBe(false);
    expect(listed([{ match: { tool: ['nuke'] }, condition: 'execution.server == "other"', effect: 'block' }], 'nuke')).toBe(true);
    expect(listed([], 'nuke', 'block')).toBe(false);
  });

  it('lists a tool that only some arguments make refusable', () => {
    expect(listed([{ match: { tool: ['add'] }, condition: 'execution.arguments.a > 10', effect: 'block' }], 'add')).toBe(true);
    expect(listed([{ match: { tool: ['add'] }, condition: 'execution.params_sha256 != null', effect: 'block' }], 'add')).toBe(true);
  });

  it('lists a tool that an argument-dependent allow lets some calls through under a blocking default', () => {
    expect(listed([{ match: { tool: ['add'] }, condition: 'execution.arguments.a < 10', effect: 'allow' }], 'add', 'block')).toBe(true);
    expect(
      listed([{ match: { tool: ['add'] }, condition: 'execution.arguments.a < 10', effect: 'require_approval' }], 'add', 'block'),
    ).toBe(true);
  });

  it('still hides it when an unconditional block applies besides', () => {
    const rules: PolicyRule[] = [
      { match: { tool: ['add'] }, condition: 'execution.arguments.a < 10', effect: 'allow' },
      { match: { tool: ['add'] }, effect: 'block' },
    ];
    expect(listed(rules, 'add')).toBe(false);
  });
});
