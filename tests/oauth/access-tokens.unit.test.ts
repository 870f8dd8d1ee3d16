/** A token's identity: agent-only permission, and a rate-limit bucket per agent of each workspace. */
import { describe, expect, it } from 'vitest';
import { tokenIdentity } from '../../apps/server/src/features/oauth/access-tokens.ts';

const workspace = (id: string) => ({ id, rate_limit_per_minute: null, policy_version: 1, agents_version: 2, mcp_servers_version: 3 });

describe('tokenIdentity', () => {
  it('acts as the agent with runtime:execute only, at the default limit', () => {
    const identity = tokenIdentity(workspace('w1'), 'bot', 600);
    expect(identity).toMatchObject({ workspaceId: 'w1', agent: 'bot', keyName: 'agent:bot', rateLimitPerMinute: 600, agentsVersion: 2 });
    expect([...identity.permissions]).toEqual(['runtime:execute']);
  });

  it('gives agents of the same slug in two workspaces two rate-limit buckets', () => {
    expect(tokenIdentity(workspace('w1'), 'bot', 600).keyId).not.toBe(tokenIdentity(workspace('w2'), 'bot', 600).keyId);
  });
});
